"""``PoolVecEnv``: sb3's ``VecEnv`` API on an env pool (in this process or in worker processes).

It gives sb3 what ``DummyVecEnv`` gives: observations in the env's own layout and the space's
dtypes (channel-last images stay channel-last: sb3 adds its own ``VecTransposeImage``), an
``OrderedDict`` for Dict spaces and a tuple for Tuple spaces, float32 rewards, ``infos`` with
``"TimeLimit.truncated"`` on every step and ``"terminal_observation"`` (the raw obs) at episode
ends. It steps the first rows of the pool's storage: ``env_obs[0]`` is written by reset,
``env_obs[1]`` by a step; only the info dicts are pickled back from workers.

The pool is started on first use (``start``), or handed over: :meth:`PoolVecEnv.attach` makes a
vec env step through another pool (the trainer's, so that the envs a script passed to
``ppo_dict.PPO`` and the ones it trains on are one set of processes), closing the one it started.
``ppo_dict.vec.shm_vec_env.ShmVecEnv`` is this class on worker processes it starts itself.

Actions are written into memory of the action space's dtype, so a batch must cast to it without
losing meaning: the same shape, and either a float batch for a float space (rounded as numpy
rounds) or values that the cast leaves equal (``[[0.5], [-0.5]]`` as Python floats for
Pendulum's float32, ``0.0``/``1.0`` floats for MultiBinary's int8); ``2.5`` for a Discrete space,
``300`` for int8 or NaN is refused before any env gets a command. Unlike ``DummyVecEnv``, which
hands each env its row as given, the env receives the row in the space's dtype. Env indices
(``get_attr``, ``env_method``...) index as Python lists do: ``-1`` is the last env, duplicates are
called twice, out of range is an IndexError.
"""

from __future__ import annotations

import warnings
from collections import OrderedDict
from typing import Any, Callable, Optional, Sequence

import gymnasium as gym
import numpy as np
from stable_baselines3.common.vec_env.base_vec_env import VecEnv, VecEnvIndices, VecEnvObs, VecEnvStepReturn

from ppo_dict.core.errors import NoAsyncCallError, PoolClosedError
from ppo_dict.data.storage import OBS_KEY, storage_keys

#: what :class:`PoolVecEnv` needs of a pool (``ppo_dict.vec.EnvPool`` and the sb3 API's additions)
Pool = Any


class PoolVecEnv(VecEnv):
    """``num_envs`` envs of a pool, as an sb3 ``VecEnv``.

    :param start: builds the pool on first use (None: only :meth:`attach` gives one).
    :param label: the env's name in messages.
    :param render_mode: the envs' ``render_mode``, answered before the pool exists (``VecEnv.__init__`` asks for it).
    :param backend: the envs' recipe (a :class:`~ppo_dict.vec.backend.GymBackend`), which a trainer builds its pool from.
    :param layout: the worker settings asked for (``num_workers``, ``mp_method``...; absent: not asked).
    """

    def __init__(
        self,
        num_envs: int,
        observation_space: gym.spaces.Space,
        action_space: gym.spaces.Space,
        label: str,
        start: Optional[Callable[[], Pool]] = None,
        render_mode: Optional[str] = None,
        backend: Any = None,
        layout: Optional[dict[str, Any]] = None,
    ):
        self.label, self.backend, self.layout = label, backend, dict(layout or {})
        self._start, self._pool, self._closed = start, None, False
        self._render_mode = render_mode
        self._leaves = storage_keys(observation_space)  # {storage key: leaf space}, read by every step's _obs
        self.waiting = False
        super().__init__(num_envs, observation_space, action_space)

    # ------------------------------------------------------------------ the pool
    @property
    def pool(self) -> Pool:
        """The pool the envs live in, started here on first use."""
        if self._closed or (self._pool is not None and self._pool.closed):
            raise self._closed_error()
        if self._pool is None:
            if self._start is None:
                raise PoolClosedError(f"this {type(self).__name__} ({self.label}) has no envs yet")
            self._pool = self._start()
        return self._pool

    @property
    def started(self) -> bool:
        return self._pool is not None

    def attach(self, pool: Pool) -> None:
        """Step through ``pool`` from now on (its envs must be built as this vec env's are); a pool
        this vec env started is closed (its envs' states are lost: the next use resets them)."""
        if self._pool is not None and self._pool is not pool:
            self._pool.close()
        self._pool, self._closed, self.waiting = pool, False, False

    # ------------------------------------------------------------------ stepping
    def reset(self) -> VecEnvObs:
        """Reset env i with ``_seeds[i]`` and ``_options[i]`` (set by ``seed()``/``set_options()``, used once)."""
        self.waiting = False
        pool = self.pool
        pool.record_infos(True)
        pool.reset(list(self._seeds), list(self._options))
        self.reset_infos = list(pool.reset_infos)
        self._reset_seeds()
        self._reset_options()
        return self._obs(0)

    def step_async(self, actions: np.ndarray) -> None:
        """Check the whole batch, then start every env's step (nothing is sent for a bad batch)."""
        pool = self.pool
        if self.waiting:
            raise NoAsyncCallError("step_async() called while a step is pending; call step_wait() first")
        checked = self._checked(actions, pool.storage.env_actions)
        pool.record_infos(True)
        if isinstance(checked, dict):
            for key, batch in checked.items():
                pool.storage.env_actions[key][...] = batch
        else:
            pool.storage.env_actions[...] = checked
        pool.step_async(0, range(self.num_envs), rollout=False)
        self.waiting = True

    def step_wait(self) -> VecEnvStepReturn:
        """``(obs copies, float32 rewards, bool dones, infos)`` as DummyVecEnv returns them."""
        if not self.waiting:
            raise NoAsyncCallError("step_wait() called without a pending step_async()")
        self.waiting = False
        pool = self.pool
        pool.step_wait()
        s = pool.storage
        self.reset_infos = list(pool.reset_infos)
        return self._obs(1), s.env_rewards[0].copy(), s.terminated[0] | s.truncated[0], list(pool.infos)

    def _obs(self, row: int) -> VecEnvObs:
        """Copies of ``env_obs[row]`` in the env's own layout, as ``DummyVecEnv`` returns them:
        ``(n_envs, *space shape)`` per leaf (Discrete: ``(n_envs,)``), an OrderedDict for a Dict space,
        a tuple for a Tuple space."""
        env_obs = self.pool.storage.env_obs
        obs = OrderedDict(
            (key, env_obs[key][row].reshape(self.num_envs, *sub.shape).copy()) for key, sub in self._leaves.items()
        )
        if isinstance(self.observation_space, gym.spaces.Dict):
            return obs
        if isinstance(self.observation_space, gym.spaces.Tuple):
            return tuple(obs.values())
        return obs[OBS_KEY]

    def _checked(self, actions: Any, target: Any) -> Any:
        """The action batch cast to the arrays' dtypes, if nothing is lost (module doc); for a Dict
        or Tuple action space ``{leaf key: batch}`` from one dict or tuple per env."""
        name = type(self).__name__
        if not isinstance(target, dict):
            return checked_cast(actions, target, name)
        if isinstance(actions, dict) or not hasattr(actions, "__len__") or len(actions) != self.num_envs:
            raise ValueError(
                f"{name}.step: expected one {type(self.action_space).__name__} action per env ({self.num_envs}), "
                f"as sb3's vec envs take them, got {type(actions).__name__}; nothing was sent to the envs"
            )
        pick = (lambda a, key: a[key]) if isinstance(self.action_space, gym.spaces.Dict) else (lambda a, key: a[int(key)])
        return {key: checked_cast([pick(a, key) for a in actions], arr, name, f"[{key!r}]") for key, arr in target.items()}

    # ------------------------------------------------------------------ env attributes and methods
    def _call(
        self, kind: str, indices: VecEnvIndices, name: str = "", args: tuple = (), kwargs: Optional[dict] = None
    ) -> list[Any]:
        """Run ``kind`` on the given envs where they live; results in ``indices`` order. Indices are
        Python list indices, as sb3's classes use them (``self.envs[i]``, ``self.remotes[i]``)."""
        envs = [list_index(i, self.num_envs) for i in self._get_indices(indices)]
        return self.pool.call(kind, envs, name, args, kwargs or {})

    def get_attr(self, attr_name: str, indices: VecEnvIndices = None) -> list[Any]:
        if attr_name == "render_mode" and self._pool is None and not self._closed:
            return [self._render_mode] * len(list(self._get_indices(indices)))  # known from the probe: no pool started for it
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
        """Each env's ``render()`` (sb3's ``get_images``), with sb3's warning and ``None``s unless ``render_mode`` is
        rgb_array."""
        if self.render_mode != "rgb_array":
            warnings.warn(
                f"The render mode is {self.render_mode}, but this method assumes it is `rgb_array` to obtain images."
            )
            return [None] * self.num_envs
        return self.env_method("render")

    # ------------------------------------------------------------------ lifetime
    def _closed_error(self) -> Exception:
        return PoolClosedError(f"this {type(self).__name__} ({self.label}) is closed")

    @property
    def closed(self) -> bool:
        return self._closed or (self._pool is not None and self._pool.closed)

    @property
    def pids(self) -> list[int]:
        return [] if self._pool is None else self._pool.pids

    def close(self) -> None:
        """Stop the envs (the worker processes); idempotent, never waits for a pending step."""
        self.waiting = False
        if self._pool is not None:
            self._pool.close()
        self._closed = True


def list_index(i: Any, n: int) -> int:
    """``i`` as ``list(range(n))[i]`` reads it: negative from the end; IndexError / TypeError as a list gives them."""
    if not isinstance(i, (int, np.integer)) or isinstance(i, bool):
        raise TypeError(f"list indices must be integers or slices, not {type(i).__name__}")
    if not -n <= i < n:
        raise IndexError("list index out of range")
    return int(i) % n


def checked_cast(actions: Any, target: np.ndarray, name: str, leaf: str = "") -> np.ndarray:
    """``actions`` as ``target``'s dtype when the cast keeps their meaning: the same shape; finite;
    a float batch for a float target (rounded), else values the cast leaves equal. Raises ValueError
    (``name``: the vec env's class; ``leaf``: the action space's key, ``['bits']``, in messages)."""
    actions = np.asarray(actions)
    lossless = actions.dtype.kind in "biuf" and actions.shape == target.shape
    if lossless and actions.dtype.kind == "f" and not np.isfinite(actions).all():
        bad = int(np.flatnonzero(~np.isfinite(actions.reshape(len(actions), -1)).all(axis=1))[0])
        raise ValueError(f"{name}.step: non-finite action{leaf} for env {bad}; nothing was sent to the envs")
    if lossless and not (actions.dtype.kind == "f" and target.dtype.kind == "f"):
        with np.errstate(invalid="ignore", over="ignore"):
            lossless = np.array_equal(actions.astype(target.dtype), actions)
    if not lossless:
        raise ValueError(
            f"{name}.step: expected actions{leaf} of shape {target.shape} and dtype {target.dtype} (or values that cast to "
            f"it unchanged), got shape {actions.shape} and dtype {actions.dtype}; nothing was sent to the envs"
        )
    return actions
