"""The envs a script hands ``ppo_dict.PPO``, as sb3 takes them, and where they run.

* **In ppo_dict's pool** (the trainer's workers write straight into the rollout storage): an env
  id (``n_envs`` copies, each ``Monitor(gym.make(id, render_mode="rgb_array"))`` as sb3 makes
  them), an env factory (``n_envs`` copies in a ``Monitor``, as ``make_vec_env`` wraps a callable),
  a list of factories (``DummyVecEnv``'s: no ``Monitor`` added), ``ppo_dict.make_vec_env``'s vec env
  or a ``ShmVecEnv`` (the trainer's pool takes their envs over: one set of processes), either in a
  ``VecNormalize`` whose statistics the trainer keeps (live, in the wrapper's own objects); an env
  instance steps in this process.
* **As sb3 steps it** (``ppo_dict.vec.vec_env_pool``): any other sb3 vec env (``DummyVecEnv``,
  ``SubprocVecEnv``, other wrappers), with one notice naming the faster form.

What ``get_env()`` returns is the vec env given (or made here) after sb3's ``BaseAlgorithm._wrap_env``
(``VecTransposeImage`` for channel-last images), exactly as sb3 holds it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import gymnasium as gym
from gymnasium.envs.registration import load_env_creator
from stable_baselines3.common.base_class import BaseAlgorithm
from stable_baselines3.common.env_util import is_wrapped
from stable_baselines3.common.env_util import make_vec_env as sb3_make_vec_env
from stable_baselines3.common.monitor import Monitor
from stable_baselines3.common.vec_env import VecEnv, VecNormalize, VecTransposeImage
from stable_baselines3.common.vec_env.patch_gym import _patch_env

from ppo_dict.data.storage import OBS_KEY, vector_obs_shapes
from ppo_dict.envs import GYM_PREFIX, import_gym_packages, import_id_module
from ppo_dict.vec.backend import GymBackend, probe
from ppo_dict.vec.pool_vec_env import PoolVecEnv
from ppo_dict.vec.shm_vec_env import EnvFns, ShmVecEnv


class GymMake:
    """``gym.make(id, render_mode="rgb_array", **kwargs)`` (without the render mode where the env takes
    none), as sb3 makes an env from an id. The id's registration is read here, in the main process,
    and travels with it (an entry point in the script itself as the class or function, pickled by
    value): a worker builds the env without importing the script or the module that registered it."""

    def __init__(self, env_id: str):
        spec = gym.spec(import_id_module(env_id)[1])  # mymodule:MyEnv-v0 imports mymodule, as gym.make does
        if isinstance(spec.entry_point, str) and spec.entry_point.startswith("__main__:"):
            spec = dataclasses.replace(spec, entry_point=load_env_creator(spec.entry_point))
        self.env_id, self.spec = env_id, spec

    def __call__(self, **kwargs: Any) -> gym.Env:
        try:
            return gym.make(self.spec, **{"render_mode": "rgb_array", **kwargs})
        except TypeError:
            return gym.make(self.spec, **kwargs)


class MakeEnv:
    """sb3's env from an id or a callable (``maybe_make_env``, ``make_vec_env``): :class:`GymMake`'s, or
    ``callable(**kwargs)``, in a ``Monitor``. Picklable: each worker builds its envs with it."""

    def __init__(self, env_id: Any, kwargs: dict[str, Any]):
        self.make, self.kwargs = (GymMake(env_id) if isinstance(env_id, str) else env_id), dict(kwargs)

    def __call__(self) -> gym.Env:
        return Monitor(_patch_env(self.make(**self.kwargs)))


class Borrowed(gym.Wrapper):
    """An env a script handed over, lent to a check that closes what it builds: closing it does nothing."""

    def close(self) -> None:
        pass


@dataclass
class TrainingEnvs:
    """Where an algorithm's envs live.

    Attributes:
        vec_env: what ``get_env()`` returns. label: the config's ``env`` (a name for messages).
        facade: the vec env whose pool the trainer builds (None: stepped as sb3 steps it).
        vec_normalize: the ``VecNormalize`` whose statistics the trainer keeps (fast path).
        asked: the config values the given vec env asks for (its worker layout, its envs in this process).
        notice: one line to print, or "".
    """

    vec_env: VecEnv
    label: str
    facade: Optional[PoolVecEnv] = None
    vec_normalize: Optional[VecNormalize] = None
    asked: dict[str, Any] = field(default_factory=dict)
    notice: str = ""

    @property
    def backend(self) -> Optional[GymBackend]:
        return None if self.facade is None else self.facade.backend


def made_here(fns: list[Callable[[], gym.Env]], label: str) -> PoolVecEnv:
    """A vec env on ``fns`` whose pool the trainer gives it (env 0 built here once, for the spaces)."""
    observation_space, action_space, _, render_mode = probe(lambda: _patch_env(fns[0]()), f"env {label}")
    backend = GymBackend(EnvFns(fns), observation_space, action_space, label=label, episodes_from_infos=True, needs_main=False)
    return PoolVecEnv(len(fns), observation_space, action_space, label, render_mode=render_mode, backend=backend)


def lent(env: gym.Env) -> PoolVecEnv:
    """A vec env on one env instance (stepped in this process: it lives here), in a Monitor as sb3 wraps it."""
    env = _patch_env(env)
    wrapped = env if is_wrapped(env, Monitor) else Monitor(env)
    label = getattr(env.spec, "id", None) or type(env.unwrapped).__name__
    backend = GymBackend(
        lambda i: Borrowed(wrapped),
        wrapped.observation_space,
        wrapped.action_space,
        label=label,
        episodes_from_infos=True,
        needs_main=False,
    )
    return PoolVecEnv(
        1, wrapped.observation_space, wrapped.action_space, label, render_mode=wrapped.render_mode, backend=backend
    )


def fast_normalize(vec_normalize: VecNormalize, facade: PoolVecEnv) -> bool:
    """Whether ppo_dict's normaliser computes what ``vec_normalize`` would on ``facade``'s envs: the
    same keys (every Box vector key; no image: sb3 would normalise it and change its space)."""
    if not vec_normalize.norm_obs:
        return True
    ours = vector_obs_shapes(facade.observation_space)
    if isinstance(facade.observation_space, gym.spaces.Dict):
        return set(vec_normalize.norm_obs_keys or ()) == set(ours)
    return list(ours) == [OBS_KEY]


def classify(
    env: Any, n_envs: Optional[int], env_kwargs: dict[str, Any], gym_packages: tuple[str, ...], verbose: int
) -> TrainingEnvs:
    """Where ``env`` (as sb3's ``PPO(policy, env)`` takes it, or a factory) runs; see the module doc."""
    if isinstance(env, str):
        if verbose >= 1:
            print(f"Creating environment from the given name '{env}'")
        import_gym_packages(gym_packages)
        facade = made_here([MakeEnv(env, env_kwargs) for _ in range(n_envs or 1)], env)
        announce_wrappers(verbose, monitor=True)  # sb3's maybe_make_env gives _wrap_env a bare gym.make
        return TrainingEnvs(BaseAlgorithm._wrap_env(facade, verbose), GYM_PREFIX + env, facade)
    if isinstance(env, gym.Env):
        announce_wrappers(verbose, monitor=not is_wrapped(_patch_env(env), Monitor))
        facade = lent(env)
        return TrainingEnvs(BaseAlgorithm._wrap_env(facade, verbose), facade.label, facade, asked={"num_workers": 0})
    if isinstance(env, (list, tuple)) and env and all(callable(fn) for fn in env):
        facade = made_here(list(env), "env_fns")
        return TrainingEnvs(BaseAlgorithm._wrap_env(facade, verbose), facade.label, facade)
    if callable(env) and not isinstance(env, VecEnv):
        facade = made_here([MakeEnv(env, env_kwargs) for _ in range(n_envs or 1)], getattr(env, "__name__", "env_fn"))
        return TrainingEnvs(BaseAlgorithm._wrap_env(facade, verbose), facade.label, facade)
    if isinstance(env, VecEnv):
        return classify_vec_env(env, verbose)
    raise TypeError(f"env={env!r}: expected an env id, a gymnasium env, an env factory or a list of them, or an sb3 VecEnv")


#: what ``verbose=1`` says where sb3 says "Wrapping the env in a DummyVecEnv.": ppo_dict's pool steps the env instead
POOL_LINE = "Stepping the env in ppo_dict's env pool (where sb3 wraps it in a DummyVecEnv)."


def announce_wrappers(verbose: int, monitor: bool) -> None:
    """sb3's ``_wrap_env`` lines for one gym env at ``verbose >= 1`` (``monitor``: it adds a ``Monitor``), the last
    one saying what steps it here (:data:`POOL_LINE`): there is no DummyVecEnv, which a user would look for."""
    if verbose >= 1:
        if monitor:
            print("Wrapping the env with a `Monitor` wrapper")
        print(POOL_LINE)


def classify_vec_env(env: VecEnv, verbose: int) -> TrainingEnvs:
    """A vec env: in ppo_dict's pool when its envs can be rebuilt there (a ``PoolVecEnv`` with its
    recipe, maybe in a ``VecNormalize`` ppo_dict reproduces, maybe under ``VecTransposeImage``), else as sb3 steps it."""
    inner = env.venv if isinstance(env, VecTransposeImage) else env
    vec_normalize = inner if isinstance(inner, VecNormalize) else None
    facade = inner.venv if vec_normalize is not None else inner
    if (
        isinstance(facade, PoolVecEnv)
        and facade.backend is not None
        and (vec_normalize is None or fast_normalize(vec_normalize, facade))
    ):
        asked = {k: v for k, v in facade.layout.items() if k in ("num_workers", "mp_method", "step_timeout", "spin_wait_us")}
        return TrainingEnvs(BaseAlgorithm._wrap_env(env, verbose), facade.label, facade, vec_normalize, asked)
    wrapped = BaseAlgorithm._wrap_env(env, verbose)
    names = [type(env).__name__]
    while hasattr(env, "venv"):
        env = env.venv
        names.append(type(env).__name__)
    chain = f"{'('.join(names)}{')' * (len(names) - 1)}"
    if isinstance(facade, PoolVecEnv):  # ppo_dict's vec env under wrappers the trainer does not reproduce
        why = (
            "ppo_dict's pool takes a ppo_dict vec env alone, or in a VecNormalize of its vector observations (under sb3's "
            "VecTransposeImage)"
        )
    else:
        why = (
            "ppo_dict.make_vec_env with the same arguments (or an env id, or env factories) runs the envs in ppo_dict's "
            "worker processes, which write straight into the rollout storage: faster"
        )
    notice = f"note: {chain} is stepped as sb3 steps it, one vec env step at a time (the same numbers); {why}"
    return TrainingEnvs(wrapped, names[-1], notice=notice)


def make_vec_env(
    env_id: Any,
    n_envs: int = 1,
    seed: Optional[int] = None,
    start_index: int = 0,
    monitor_dir: Optional[str] = None,
    wrapper_class: Optional[Callable[[gym.Env], gym.Env]] = None,
    env_kwargs: Optional[dict[str, Any]] = None,
    vec_env_cls: Optional[type[VecEnv]] = None,
    vec_env_kwargs: Optional[dict[str, Any]] = None,
    monitor_kwargs: Optional[dict[str, Any]] = None,
    wrapper_kwargs: Optional[dict[str, Any]] = None,
) -> VecEnv:
    """sb3's ``make_vec_env`` (the same arguments, envs and seeds), whose default vec env is a
    :class:`~ppo_dict.vec.shm_vec_env.ShmVecEnv` that starts its workers on first use: given to
    ``ppo_dict.PPO``, its envs run in the trainer's own pool and no other process is started. Used on
    its own (an evaluation env), its workers never import the main module and one env steps in this
    process (``in_place_of_dummy``: it stands where sb3's ``DummyVecEnv`` would)."""
    if vec_env_cls is None:
        vec_env_cls, vec_env_kwargs = ShmVecEnv, {"start": False, "in_place_of_dummy": True, **(vec_env_kwargs or {})}
    make = GymMake(env_id) if isinstance(env_id, str) else env_id  # sb3's gym.make, its registration carried to the workers
    return sb3_make_vec_env(
        make,
        n_envs,
        seed,
        start_index,
        monitor_dir,
        wrapper_class,
        env_kwargs,
        vec_env_cls,
        vec_env_kwargs,
        monitor_kwargs,
        wrapper_kwargs,
    )
