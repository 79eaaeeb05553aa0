"""The trainer's env pool over an sb3 ``VecEnv``: the envs stepped as sb3 steps them.

``ppo_dict.PPO`` given an sb3 vec env it cannot rebuild in its own workers (``DummyVecEnv``,
``SubprocVecEnv``, their wrappers) trains on it through this pool: each rollout step is one
``venv.step(actions)``, and what it returned is written into the rollout storage as the runners
write what their envs return, from what sb3's ``collect_rollouts`` reads:

* the observations (``VecNormalize``'s normalised ones, ``VecTransposeImage``'s channel-first
  ones: the vec env is the env here), also kept as the vec env returned them, which the policy
  reads with their own strides as sb3 reads its ``_last_obs``, rewards as float32, ``done`` split into truncated (``done``
  with ``info["TimeLimit.truncated"]`` and a ``"terminal_observation"``: sb3 bootstraps exactly
  those) and terminated (the others);
* the terminal observation of each truncated env, for the bootstrap;
* the episode statistics from ``info["episode"]`` (sb3's ``Monitor`` or ``VecMonitor``) and
  ``info["is_success"]`` at episode ends, as sb3's ``_update_info_buffer`` reads them;
* with masks, ``np.stack(venv.env_method("action_masks"))`` after each reset and step
  (sb3-contrib's ``get_action_masks``, asked before each step: the same values).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Sequence

import numpy as np
from gymnasium import spaces

from ppo_dict.data.episodes import EpisodeBook
from ppo_dict.data.masking import ASK_MASKS, METHOD, with_action_masks
from ppo_dict.data.storage import RolloutStorage, obs_parts
from ppo_dict.vec.runner import Seeds


@dataclass(frozen=True)
class VecEnvBackend:
    """What the collector asks of a pool's backend (a name for messages) for a vec env's pool."""

    label: str
    observation_space: spaces.Space
    action_space: spaces.Space
    makes_gym_envs: bool = False
    unit: int = 1
    info_keywords: tuple[str, ...] = ()


class VecEnvPool:
    """``venv``'s ``num_envs`` envs for a trainer with rollouts of ``n_steps``; ``masks``: the envs
    give ``action_masks()`` (sb3-contrib's MaskablePPO). ``infos``, ``rewards`` (in the vec env's own
    dtype) and ``reset_infos``: what the last step and reset returned."""

    waits = False  # no other process to wait for: owed work is done before a step

    def __init__(self, venv: Any, n_steps: int, masks: bool = False, label: Optional[str] = None):
        self.venv, self.num_envs = venv, venv.num_envs
        self.observation_space = venv.observation_space
        self.action_space = with_action_masks(venv.action_space) if masks else venv.action_space
        self.backend = VecEnvBackend(label or type(venv).__name__, self.observation_space, self.action_space)
        self.storage = RolloutStorage(self.observation_space, self.action_space, n_steps, self.num_envs)
        self.book = EpisodeBook.for_storage(self.storage, range(self.num_envs))
        self.book.monitored = [True] * self.num_envs  # statistics from info["episode"] only, as sb3 reads them
        self.halves = (range(self.num_envs),)
        self.infos: list[dict[str, Any]] = [{} for _ in range(self.num_envs)]
        self.reset_infos: list[dict[str, Any]] = [{} for _ in range(self.num_envs)]
        self.rewards = np.zeros(self.num_envs, dtype=np.float32)
        self.asking = True  # the envs' masks asked (sb3-contrib's use_masking); else all True, as MaskableRolloutBuffer's
        self.closed = False

    def reset(self, seed: Seeds = None, options: Optional[Sequence[dict[str, Any]]] = None) -> None:
        """``venv.reset()`` into ``env_obs[0]``; its own pending seeds apply (``seed``: given to ``venv.seed`` first)."""
        if isinstance(seed, int):
            self.venv.seed(seed)
        obs = self.venv.reset()
        self.reset_infos = list(getattr(self.venv, "reset_infos", self.reset_infos))
        self._write_obs(0, obs)
        for j in range(self.num_envs):
            self.book.start(j)

    def step(self, t: int, rollout: bool = True) -> None:
        """One ``venv.step`` with ``storage.env_actions``; its results into storage at step t."""
        s = self.storage
        obs, rewards, dones, infos = self.venv.step(s.env_actions.copy())
        self.infos, self.rewards = list(infos), rewards
        self._write_obs(t + 1, obs)
        s.env_rewards[t] = rewards
        truncated = [
            bool(done and info.get("TimeLimit.truncated", False) and info.get("terminal_observation") is not None)
            for done, info in zip(dones, infos)
        ]
        s.truncated[t] = truncated
        s.terminated[t] = np.asarray(dones, dtype=bool) & ~s.truncated[t]
        s.returned_terminal.clear()
        for i in np.flatnonzero(dones):
            if truncated[i]:
                parts = s.returned_terminal[i] = obs_parts(self.observation_space, infos[i]["terminal_observation"])
                for key, part in parts.items():
                    s.env_terminal_obs[key][i] = part
            self.book.end(i, infos[i])

    def _write_obs(self, row: int, obs: Any) -> None:
        """``obs`` into row ``row``, and kept as returned (the policy reads it so, as sb3 reads its ``_last_obs``)
        with the row before it (a rollout a callback stops starts the next one from that row, as sb3)."""
        parts = obs_parts(self.observation_space, obs)
        self.storage.returned = {row - 1: self.storage.returned.get(row - 1), row: parts}
        for key, part in parts.items():
            self.storage.env_obs[key][row] = np.asarray(part).reshape(self.storage.env_obs[key][row].shape)
        if self.storage.action_masks is not None:
            self.storage.action_masks[row] = (
                np.stack(self.venv.env_method(METHOD)).reshape(self.num_envs, -1) if self.asking else True
            )

    def step_async(self, t: int, columns: range, rollout: bool = True) -> None:
        """Every env at once (a vec env steps all its envs): ``columns`` must be all of them."""
        if len(columns) != self.num_envs:
            raise ValueError(f"a vec env's envs step together, not columns {columns} of {self.num_envs}")
        self.step(t, rollout)

    def step_wait(self) -> None:
        """Nothing to wait for: :meth:`step_async` stepped the envs already."""

    def record_infos(self, on: bool) -> None:
        """The vec env returns its infos with every step anyway."""

    def adapt(self, busy_elsewhere: bool) -> None:
        """Nothing to adapt: the vec env waits as it waits."""

    def call(
        self, kind: str, indices: Sequence[int], name: str = "", args: tuple = (), kwargs: Optional[dict] = None
    ) -> list[Any]:
        """sb3's ``get_attr``/``set_attr``/``env_method``/``env_is_wrapped``/``has_attr`` through the vec env."""
        indices = list(indices)
        if kind == ASK_MASKS:  # the runners' own call (ppo_dict.vec.runner.GymRunner.call): every env at once
            self.asking = bool(args[0])
            return [None] * len(indices)
        if kind == "get_attr":
            return self.venv.get_attr(name, indices)
        if kind == "set_attr":
            return [self.venv.set_attr(name, args[0], indices)] * len(indices)
        if kind == "env_method":
            return self.venv.env_method(name, *args, indices=indices, **(kwargs or {}))
        if kind == "env_is_wrapped":
            return self.venv.env_is_wrapped(args[0], indices)
        if kind == "has_attr":
            return [self.venv.has_attr(name)] * len(indices)
        raise ValueError(f"unknown env call {kind!r}")

    @property
    def pids(self) -> list[int]:
        return []

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.venv.close()
