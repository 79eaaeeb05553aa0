"""``ShmVecEnv``: an sb3 ``VecEnv`` on ppo_dict's shared-memory workers.

A drop-in for ``DummyVecEnv`` / ``SubprocVecEnv`` (``make_vec_env(..., vec_env_cls=ShmVecEnv)``)
that gives sb3 the same numbers as ``DummyVecEnv``: same obs dtypes (the space's), float32
rewards, ``infos`` with ``"TimeLimit.truncated"`` on every step and ``"terminal_observation"``
(the raw obs) at episode ends. Like both sb3 vec envs it adds no ``Monitor``: ``make_vec_env``
wraps each env in one (that is where ``info["episode"]`` comes from), a bare ``env_fn`` gets none.

Observations, rewards and dones travel through a one-step shared storage (``env_obs[0]`` is
written by reset, ``env_obs[1]`` by step); only the info dicts are pickled back. This is the only module that
imports stable_baselines3 (an optional dependency).
"""
from __future__ import annotations

import multiprocessing
from collections import defaultdict
from typing import Any, Callable, Optional, Sequence

import gymnasium as gym
import numpy as np
from stable_baselines3.common.vec_env.base_vec_env import CloudpickleWrapper, VecEnv, VecEnvIndices, VecEnvObs, VecEnvStepReturn
from stable_baselines3.common.vec_env.patch_gym import _patch_env

from ppo_dict.config import default_num_workers
from ppo_dict.errors import NoAsyncCallError, PoolClosedError
from ppo_dict.vec.backend import GymBackend, probe_spaces
from ppo_dict.vec.group import WorkerGroup, split_columns


class EnvFns:
    """Picklable ``env index -> env`` from arbitrary callables.

    The callables are cloudpickled (sb3's ``CloudpickleWrapper``): forkserver and spawn workers
    cannot receive lambdas or closures through plain pickle.
    """

    def __init__(self, env_fns: Sequence[Callable[[], gym.Env]]):
        self.fns = [CloudpickleWrapper(fn) for fn in env_fns]

    def __call__(self, env_idx: int) -> gym.Env:
        return _patch_env(self.fns[env_idx].var())  # as DummyVecEnv / SubprocVecEnv do


class ShmVecEnv(VecEnv):
    """``len(env_fns)`` envs in ``num_workers`` worker processes, each stepping its block in turn.

    :param env_fns: callables that each build one env (env i is ``env_fns[i]()``).
    :param start_method: ``forkserver`` (default where available, as SubprocVecEnv), ``spawn`` or ``fork``.
    :param num_workers: worker processes (default: the largest divisor of n_envs <= physical cores).
    :param step_timeout: seconds one step/reset may take before the workers are declared hung.

    ``env_fns[0]`` is also called once in this process to read the spaces (the shared storage is
    sized before any worker starts), as gymnasium's ``AsyncVectorEnv`` does.
    """

    def __init__(
        self,
        env_fns: Sequence[Callable[[], gym.Env]],
        start_method: Optional[str] = None,
        num_workers: Optional[int] = None,
        step_timeout: float = 60.0,
    ):
        n_envs = len(env_fns)
        if n_envs == 0:
            raise ValueError("ShmVecEnv needs at least one env_fn")
        num_workers = default_num_workers(n_envs) if num_workers is None else num_workers
        if not (isinstance(num_workers, int) and 1 <= num_workers <= n_envs and n_envs % num_workers == 0):
            raise ValueError(f"num_workers={num_workers!r} must divide the number of envs ({n_envs})")
        start_method = start_method or ("forkserver" if "forkserver" in multiprocessing.get_all_start_methods() else "spawn")
        observation_space, action_space, env_id = probe_spaces(lambda: _patch_env(env_fns[0]()), "env from env_fns[0]")
        backend = GymBackend(EnvFns(env_fns), observation_space, action_space, label=env_id or "env_fns", record_infos=True)
        blocks = split_columns(0, n_envs, num_workers)
        self._group = WorkerGroup(backend, blocks, n_steps=1, mp_method=start_method, step_timeout=step_timeout)
        self.storage = self._group.storage
        self.waiting = False
        super().__init__(n_envs, observation_space, action_space)

    # ------------------------------------------------------------------ stepping
    def reset(self) -> VecEnvObs:
        """Reset env i with ``_seeds[i]`` and ``_options[i]`` (set by ``seed()``/``set_options()``, used once)."""
        self.waiting = False
        seeds, options = list(self._seeds), list(self._options)
        self._group.send(("reset", seeds, options), detail=seeds)
        answers = self._group.gather()
        self.reset_infos = [info for w in sorted(answers) for info in answers[w]]
        self._reset_seeds()
        self._reset_options()
        return self._obs(0)

    def step_async(self, actions: np.ndarray) -> None:
        """Check the whole batch, then tell every worker to step (nothing is sent for a bad batch)."""
        if self._group.closed:
            raise self._closed_error()
        if self.waiting:
            raise NoAsyncCallError("step_async() called while a step is pending; call step_wait() first")
        self.storage.env_actions[...] = self._checked(actions)
        self._group.send(("step", 0))
        self.waiting = True

    def step_wait(self) -> VecEnvStepReturn:
        """``(obs copies, float32 rewards, bool dones, infos)`` as DummyVecEnv returns them."""
        if not self.waiting:
            raise NoAsyncCallError("step_wait() called without a pending step_async()")
        self.waiting = False
        answers = self._group.gather()
        infos: list[dict[str, Any]] = []
        for w in sorted(answers):
            step_infos, reset_infos = answers[w]
            infos += step_infos
            for i, info in zip(self._group.blocks[w], reset_infos):
                self.reset_infos[i] = info
        s = self.storage
        dones = s.terminated[0] | s.truncated[0]
        return self._obs(1), s.env_rewards[0].copy(), dones, infos

    def _obs(self, row: int) -> VecEnvObs:
        """Copies of ``env_obs[row]`` shaped ``(n_envs, *space shape)`` (Discrete: ``(n_envs,)``)."""
        spaces_by_key = self.observation_space.spaces if self.storage.is_dict_obs else None
        obs = {}
        for key, arr in self.storage.env_obs.items():
            space = spaces_by_key[key] if spaces_by_key is not None else self.observation_space
            obs[key] = arr[row].reshape(self.num_envs, *space.shape).copy()
        return self.storage.as_policy_input(obs)

    def _checked(self, actions: Any) -> np.ndarray:
        """The action batch, if its shape, dtype and values are what the envs can take."""
        actions = np.asarray(actions)
        target = self.storage.env_actions
        if actions.shape != target.shape or not np.can_cast(actions.dtype, target.dtype, casting="safe"):
            raise ValueError(
                f"ShmVecEnv.step: expected actions of shape {target.shape} and dtype {target.dtype} "
                f"(or one that casts to it safely), got shape {actions.shape} and dtype {actions.dtype}; nothing was sent to the envs"
            )
        if actions.dtype.kind == "f":
            finite = np.isfinite(actions.reshape(self.num_envs, -1)).all(axis=1)
            if not finite.all():
                raise ValueError(f"ShmVecEnv.step: non-finite action for env {int(np.flatnonzero(~finite)[0])}; nothing was sent to the envs")
        return actions

    # ------------------------------------------------------------------ env attributes and methods
    def _call(self, kind: str, indices: VecEnvIndices, name: str = "", args: tuple = (), kwargs: Optional[dict] = None) -> list[Any]:
        """Run ``kind`` on the given envs in their workers; results in ``indices`` order."""
        if self._group.closed:
            raise self._closed_error()
        indices = list(self._get_indices(indices))
        by_worker: dict[int, list[int]] = defaultdict(list)
        for i in indices:
            by_worker[self._group.owner[i]].append(i)
        self._group.send_each({w: ("call", kind, ids, name, args, kwargs or {}) for w, ids in by_worker.items()})
        answers = self._group.gather()
        found = {i: value for w, ids in by_worker.items() for i, value in zip(ids, answers[w])}
        return [found[i] for i in indices]

    def get_attr(self, attr_name: str, indices: VecEnvIndices = None) -> list[Any]:
        return self._call("get_attr", indices, attr_name)

    def set_attr(self, attr_name: str, value: Any, indices: VecEnvIndices = None) -> None:
        self._call("set_attr", indices, attr_name, (value,))

    def env_method(self, method_name: str, *method_args, indices: VecEnvIndices = None, **method_kwargs) -> list[Any]:
        return self._call("env_method", indices, method_name, method_args, method_kwargs)

    def env_is_wrapped(self, wrapper_class: type[gym.Wrapper], indices: VecEnvIndices = None) -> list[bool]:
        return self._call("env_is_wrapped", indices, args=(wrapper_class,))

    def has_attr(self, attr_name: str) -> bool:
        return all(self._call("has_attr", None, attr_name))

    def get_images(self) -> Sequence[Optional[np.ndarray]]:
        if self.render_mode != "rgb_array":
            return [None] * self.num_envs
        return self.env_method("render")

    # ------------------------------------------------------------------ lifetime
    def _closed_error(self) -> Exception:
        return PoolClosedError(f"this ShmVecEnv ({self._group.label}) is closed")

    @property
    def closed(self) -> bool:
        return self._group.closed

    @property
    def pids(self) -> list[int]:
        return self._group.pids

    def close(self) -> None:
        """Stop the workers; idempotent, never waits for a pending step."""
        self.waiting = False
        self._group.close()
