"""Stepping environments into rollout storage, with sb3's ``DummyVecEnv`` + ``Monitor`` semantics.

:class:`EnvRunner` steps a block of envs and writes their results into storage arrays; it is the
one piece of code that both the in-process pool here and each worker process run.
:class:`InProcessEnvPool` steps every env in the main process (``--num_workers 0``, debugging).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional, Sequence

import gymnasium as gym
import numpy as np

from envs import EnvSpec, is_godot, make_env
from ppo_dict.storage import OBS_KEY, RolloutStorage

if TYPE_CHECKING:
    from ppo_dict.config import Config


def env_seeds(seed: Optional[int], n_envs: int) -> list[Optional[int]]:
    """sb3 ``VecEnv.seed``: env i is first reset with ``seed + i`` (all ``None`` for no seed)."""
    return [None if seed is None else seed + i for i in range(n_envs)]


class EnvRunner:
    """Steps envs ``env_ids[j]`` (global indices) held in ``envs[j]``, writing into ``storage``.

    sb3 semantics: env i is first reset with ``seeds[i]`` (``seed + i``); an episode end
    (terminated or truncated) stores the last obs in ``terminal_obs`` and auto-resets (without a
    seed), so ``obs[t+1]`` holds the new episode's first obs; rewards are float32; episode return
    and length are Monitor's (return summed in float64, rounded to 6 decimals).

    With ``record_infos`` the runner also keeps what sb3's ``DummyVecEnv`` returns besides the
    arrays: ``infos[j]`` of the last step (with ``"TimeLimit.truncated"`` and, at an episode end,
    ``"terminal_observation"``, the raw obs) and ``reset_infos[j]``.

    ``active`` is ``(global env index, call)`` of the env call in progress or last made
    (``"reset"`` or ``"step"``), so that a worker can say which env failed.
    """

    def __init__(self, envs: Sequence[gym.Env], env_ids: Sequence[int], storage: RolloutStorage, record_infos: bool = False):
        self.envs, self.env_ids, self.storage = list(envs), list(env_ids), storage
        self.is_dict_obs = storage.is_dict_obs
        self.record_infos = record_infos
        self.infos: list[dict[str, Any]] = [{} for _ in self.envs]
        self.reset_infos: list[dict[str, Any]] = [{} for _ in self.envs]
        self.active: tuple[int, str] = (-1, "")
        self._returns = [0.0] * len(self.envs)
        self._lengths = [0] * len(self.envs)

    def _write_obs(self, target: dict[str, np.ndarray], row: int, obs) -> None:
        if self.is_dict_obs:
            for key, arr in target.items():
                arr[row] = obs[key]
        else:
            target[OBS_KEY][row] = obs

    def reset(self, seeds: Sequence[Optional[int]], options: Optional[Sequence[dict[str, Any]]] = None) -> None:
        """Reset every env (env i with ``seeds[i]``, global index) and write ``obs[0]``.

        ``options[i]`` is passed only when non-empty, as sb3's ``DummyVecEnv.reset`` does.
        """
        obs0 = self.storage.obs_at(0)
        for j, (env, i) in enumerate(zip(self.envs, self.env_ids)):
            self.active = (i, "reset")
            maybe_options = {"options": options[i]} if options is not None and options[i] else {}
            obs, self.reset_infos[j] = env.reset(seed=seeds[i], **maybe_options)
            self._write_obs(obs0, i, obs)
            self._returns[j], self._lengths[j] = 0.0, 0

    def step(self, t: int) -> None:
        """Apply ``env_actions`` and write ``obs[t+1]``, ``rewards[t]``, ``terminated[t]``, ``truncated[t]``."""
        s = self.storage
        next_obs = s.obs_at(t + 1)
        for j, (env, i) in enumerate(zip(self.envs, self.env_ids)):
            self.active = (i, "step")
            obs, reward, terminated, truncated, info = env.step(s.env_actions[i].copy())
            self._returns[j] += float(reward)
            self._lengths[j] += 1
            s.rewards[t, i] = reward
            s.terminated[t, i] = terminated
            s.truncated[t, i] = truncated
            if self.record_infos:
                # sb3 DummyVecEnv.step_wait: set on every step, not only at episode ends.
                info["TimeLimit.truncated"] = truncated and not terminated
                self.infos[j] = info
            if terminated or truncated:
                self._write_obs(s.terminal_obs, i, obs)
                if self.record_infos:
                    info["terminal_observation"] = obs
                s.episode_return[i] = round(self._returns[j], 6)
                s.episode_length[i] = self._lengths[j]
                self._returns[j], self._lengths[j] = 0.0, 0
                self.active = (i, "reset")
                obs, self.reset_infos[j] = env.reset()
            self._write_obs(next_obs, i, obs)

    def close(self) -> None:
        for env in self.envs:
            env.close()


class InProcessEnvPool:
    """All ``n_envs`` envs stepped in the calling process, in env order (sb3 ``DummyVecEnv``)."""

    def __init__(self, spec: EnvSpec, n_envs: int, n_steps: int):
        envs = [make_env(spec) for _ in range(n_envs)]
        self.spec, self.num_envs = spec, n_envs
        self.observation_space, self.action_space = envs[0].observation_space, envs[0].action_space
        self.storage = RolloutStorage(self.observation_space, self.action_space, n_steps, n_envs)
        self._runner = EnvRunner(envs, range(n_envs), self.storage)
        self.closed = False

    def reset(self, seed: Optional[int]) -> None:
        self._runner.reset(env_seeds(seed, self.num_envs))

    def step(self, t: int) -> None:
        self._runner.step(t)

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self._runner.close()


def make_env_pool(cfg: Config, spec: EnvSpec):
    """The env pool a config asks for: worker processes, or in-process for ``num_workers 0``.

    A Godot game's pools launch whole games per block of columns (``envs.godot.pool.spec_for_pool``:
    the demo runs one Godot process per worker, or one in-process).
    """
    n_envs, num_workers, envs_per_worker = cfg.worker_layout
    if is_godot(spec):
        from envs.godot.pool import GodotInProcessPool, spec_for_pool

        spec = spec_for_pool(spec, envs_per_worker or n_envs, cfg.step_timeout, in_workers=num_workers > 0)
        if num_workers == 0:
            return GodotInProcessPool(spec, n_envs, cfg.n_steps)
    if num_workers == 0:
        return InProcessEnvPool(spec, n_envs, cfg.n_steps)
    from ppo_dict.workers import ShmEnvPool

    return ShmEnvPool(
        spec,
        num_workers=num_workers,
        envs_per_worker=envs_per_worker,
        n_steps=cfg.n_steps,
        mp_method=cfg.mp_method,
        step_timeout=cfg.step_timeout,
        main_steps_envs=cfg.main_steps_envs,
    )
