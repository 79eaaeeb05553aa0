"""``ShmVecEnv``: an sb3 ``VecEnv`` on ppo_dict's shared-memory workers.

A drop-in for ``DummyVecEnv`` / ``SubprocVecEnv`` (``make_vec_env(..., vec_env_cls=ShmVecEnv)``)
that gives sb3 the same numbers as ``DummyVecEnv``: observations in the env's own layout and the
space's dtypes (channel-last images stay channel-last: sb3 adds its own ``VecTransposeImage``),
an ``OrderedDict`` for Dict spaces and a tuple for Tuple spaces, float32 rewards, ``infos`` with
``"TimeLimit.truncated"`` on every step and ``"terminal_observation"`` (the raw obs) at episode
ends. Like both sb3 vec envs it adds no ``Monitor``: ``make_vec_env`` wraps each env in one (that
is where ``info["episode"]`` comes from), a bare ``env_fn`` gets none.

Spaces: what sb3's vec envs take, Box, Discrete, MultiDiscrete, MultiBinary and one level of Dict
or Tuple of them, for observations and actions alike (a Dict or Tuple action batch is one dict or
tuple per env, as sb3's classes take it). Env indices (``get_attr``, ``env_method``...) index as
Python lists do: ``-1`` is the last env, duplicates are called twice, out of range is an IndexError.

Actions are written into shared memory of the action space's dtype, so a batch must cast to it
without losing meaning: the same shape, and either a float batch for a float space (rounded as
numpy rounds) or values that the cast leaves equal (``[[0.5], [-0.5]]`` as Python floats for
Pendulum's float32, ``0.0``/``1.0`` floats for MultiBinary's int8); ``2.5`` for a Discrete space,
``300`` for int8 or NaN is refused before any worker gets a command. Unlike ``DummyVecEnv``, which
hands each env its row as given, the env receives the row in the space's dtype.

Observations, rewards and dones travel through a one-step shared storage (``env_obs[0]`` is
written by reset, ``env_obs[1]`` by step); only the info dicts are pickled back. This is the only module that
imports stable_baselines3 (an optional dependency).
"""
from __future__ import annotations

import multiprocessing
import warnings
from collections import OrderedDict, defaultdict
from typing import Any, Callable, Optional, Sequence

import gymnasium as gym
import numpy as np
from stable_baselines3.common.vec_env.base_vec_env import CloudpickleWrapper, VecEnv, VecEnvIndices, VecEnvObs, VecEnvStepReturn
from stable_baselines3.common.vec_env.patch_gym import _patch_env

from ppo_dict.core.config import default_num_workers
from ppo_dict.core.errors import NoAsyncCallError, PoolClosedError
from ppo_dict.data.storage import OBS_KEY, storage_keys
from ppo_dict.envs import vec_space_problem
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
    :param spin_wait_us: microseconds the workers and this process look for each other's messages
        before sleeping (``ppo_dict.vec.channel.wait_for``; 0: sleep at once; None: 1000 where the
        workers and this process each have a physical core, else 0).

    ``env_fns[0]`` is also called once in this process to read the spaces (the shared storage is
    sized before any worker starts), as gymnasium's ``AsyncVectorEnv`` does.
    """

    def __init__(
        self,
        env_fns: Sequence[Callable[[], gym.Env]],
        start_method: Optional[str] = None,
        num_workers: Optional[int] = None,
        step_timeout: float = 60.0,
        spin_wait_us: Optional[float] = None,
    ):
        n_envs = len(env_fns)
        if n_envs == 0:
            raise ValueError("ShmVecEnv needs at least one env_fn")
        num_workers = default_num_workers(n_envs) if num_workers is None else num_workers
        if not (isinstance(num_workers, int) and 1 <= num_workers <= n_envs and n_envs % num_workers == 0):
            raise ValueError(f"num_workers={num_workers!r} must divide the number of envs ({n_envs})")
        start_method = start_method or ("forkserver" if "forkserver" in multiprocessing.get_all_start_methods() else "spawn")
        multiprocessing.get_context(start_method)  # a bad method: multiprocessing's own ValueError, as SubprocVecEnv gives it
        observation_space, action_space, env_id = probe_spaces(lambda: _patch_env(env_fns[0]()), "env from env_fns[0]")
        for space, what in ((observation_space, "observation"), (action_space, "action")):
            problem = vec_space_problem(space, what)
            if problem:
                raise ValueError(f"ShmVecEnv ({env_id or 'env_fns'}): {problem}; a fixed shared-memory layout holds Box, Discrete, "
                                 "MultiDiscrete, MultiBinary and one level of Dict or Tuple of them, as sb3's vec envs do")
        backend = GymBackend(EnvFns(env_fns), observation_space, action_space, label=env_id or "env_fns", record_infos=True)
        blocks = split_columns(0, n_envs, num_workers)
        self._group = WorkerGroup(backend, blocks, n_steps=1, mp_method=start_method, step_timeout=step_timeout, spin_wait_us=spin_wait_us)
        self.storage = self._group.storage
        self._leaves = storage_keys(observation_space)  # {storage key: leaf space}, read by every step's _obs
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
        checked = self._checked(actions)
        if isinstance(checked, dict):
            for key, batch in checked.items():
                self.storage.env_actions[key][...] = batch
        else:
            self.storage.env_actions[...] = checked
        self._group.send(("step", 0), cache=True)
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
        """Copies of ``env_obs[row]`` in the env's own layout, as ``DummyVecEnv`` returns them:
        ``(n_envs, *space shape)`` per leaf (Discrete: ``(n_envs,)``), an OrderedDict for a Dict space,
        a tuple for a Tuple space."""
        obs = OrderedDict((key, self.storage.env_obs[key][row].reshape(self.num_envs, *sub.shape).copy()) for key, sub in self._leaves.items())
        if isinstance(self.observation_space, gym.spaces.Dict):
            return obs
        if isinstance(self.observation_space, gym.spaces.Tuple):
            return tuple(obs.values())
        return obs[OBS_KEY]

    def _checked(self, actions: Any) -> Any:
        """The action batch cast to the shared arrays' dtypes, if nothing is lost (module doc); for a Dict
        or Tuple action space ``{leaf key: batch}`` from one dict or tuple per env."""
        target = self.storage.env_actions
        if not isinstance(target, dict):
            return checked_cast(actions, target)
        if isinstance(actions, dict) or not hasattr(actions, "__len__") or len(actions) != self.num_envs:
            raise ValueError(f"ShmVecEnv.step: expected one {type(self.action_space).__name__} action per env ({self.num_envs}), "
                             f"as sb3's vec envs take them, got {type(actions).__name__}; nothing was sent to the envs")
        pick = (lambda a, key: a[key]) if isinstance(self.action_space, gym.spaces.Dict) else (lambda a, key: a[int(key)])
        return {key: checked_cast([pick(a, key) for a in actions], arr, f"[{key!r}]") for key, arr in target.items()}

    # ------------------------------------------------------------------ env attributes and methods
    def _call(self, kind: str, indices: VecEnvIndices, name: str = "", args: tuple = (), kwargs: Optional[dict] = None) -> list[Any]:
        """Run ``kind`` on the given envs in their workers; results in ``indices`` order. Indices are
        Python list indices, as sb3's classes use them (``self.envs[i]``, ``self.remotes[i]``)."""
        if self._group.closed:
            raise self._closed_error()
        envs = [list_index(i, self.num_envs) for i in self._get_indices(indices)]
        by_worker: dict[int, list[tuple[int, int]]] = defaultdict(list)  # worker -> [(position in results, env)]
        for position, env in enumerate(envs):
            by_worker[self._group.owner[env]].append((position, env))
        self._group.send_each({w: ("call", kind, [env for _, env in calls], name, args, kwargs or {}) for w, calls in by_worker.items()})
        answers = self._group.gather()
        results: list[Any] = [None] * len(envs)
        for w, calls in by_worker.items():
            for (position, _), value in zip(calls, answers[w]):
                results[position] = value
        return results

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
        """Each env's ``render()`` (sb3's ``get_images``), with sb3's warning and ``None``s unless ``render_mode`` is rgb_array."""
        if self.render_mode != "rgb_array":
            warnings.warn(f"The render mode is {self.render_mode}, but this method assumes it is `rgb_array` to obtain images.")
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


def list_index(i: Any, n: int) -> int:
    """``i`` as ``list(range(n))[i]`` reads it: negative from the end; IndexError / TypeError as a list gives them."""
    if not isinstance(i, (int, np.integer)) or isinstance(i, bool):
        raise TypeError(f"list indices must be integers or slices, not {type(i).__name__}")
    if not -n <= i < n:
        raise IndexError("list index out of range")
    return int(i) % n


def checked_cast(actions: Any, target: np.ndarray, leaf: str = "") -> np.ndarray:
    """``actions`` as ``target``'s dtype when the cast keeps their meaning: the same shape; finite;
    a float batch for a float target (rounded), else values the cast leaves equal. Raises ValueError
    (``leaf``: the action space's key, ``['bits']``, in messages)."""
    actions = np.asarray(actions)
    lossless = actions.dtype.kind in "biuf" and actions.shape == target.shape
    if lossless and actions.dtype.kind == "f" and not np.isfinite(actions).all():
        bad = int(np.flatnonzero(~np.isfinite(actions.reshape(len(actions), -1)).all(axis=1))[0])
        raise ValueError(f"ShmVecEnv.step: non-finite action{leaf} for env {bad}; nothing was sent to the envs")
    if lossless and not (actions.dtype.kind == "f" and target.dtype.kind == "f"):
        with np.errstate(invalid="ignore", over="ignore"):
            lossless = np.array_equal(actions.astype(target.dtype), actions)
    if not lossless:
        raise ValueError(
            f"ShmVecEnv.step: expected actions{leaf} of shape {target.shape} and dtype {target.dtype} (or values that cast to "
            f"it unchanged), got shape {actions.shape} and dtype {actions.dtype}; nothing was sent to the envs"
        )
    return actions
