"""Vectorisation: env columns stepped into rollout storage, in this process or in worker processes.

* :mod:`.runner`: the :class:`~.runner.Runner` interface and the gymnasium runner.
* :mod:`.backend`: the :class:`~.backend.EnvBackend` interface and the gymnasium backend;
  :mod:`.godot`: the Godot backend.
* :mod:`.in_process`: every env in this process. :mod:`.shm_pool`: the worker pool, over
  :mod:`.group` (the main side), :mod:`.worker` (a worker process), :mod:`.channel` (the line between
  them) and :mod:`.shared_memory`.
* :mod:`.shm_vec_env`: ``ShmVecEnv``, an sb3 ``VecEnv`` on the same workers.
* :mod:`.watchdog`: deadlines for the env calls the main process makes itself, and stop signals
  that interrupt them.

Above both pools, :func:`make_env_pool` builds the one a :class:`~ppo_dict.core.config.Config` asks for.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Callable, Optional, Protocol, Sequence, Union

from gymnasium import spaces

from ppo_dict.data.masking import masked_backend
from ppo_dict.data.storage import RolloutStorage, stage_keys_of
from ppo_dict.envs import GODOT_BACKEND, GYM_BACKEND, AtariOptions, EnvSpec, PixelOptions, resolve_env_name
from ppo_dict.vec.backend import EnvBackend, GymBackend
from ppo_dict.vec.godot import GodotBackend
from ppo_dict.vec.in_process import InProcessEnvPool
from ppo_dict.vec.shm_pool import ShmEnvPool

if TYPE_CHECKING:
    from ppo_dict.core.config import Config
    from ppo_dict.core.layout import Layout


class EnvPool(Protocol):
    """What PPO needs from the envs: they read ``storage.env_actions`` and write into ``storage``.

    sb3's API (``PoolVecEnv``, callbacks) also reads ``infos`` and ``reset_infos`` (each env's last
    sb3 infos, kept while ``record_infos(True)``) and calls ``call`` (``get_attr``, ``env_method``...).
    """

    backend: EnvBackend
    num_envs: int
    observation_space: spaces.Space
    action_space: spaces.Space
    storage: RolloutStorage
    infos: list[dict[str, Any]]
    reset_infos: list[dict[str, Any]]
    # whether step() waits for other processes, and takes ``idle``: work to do meanwhile, a unit a call
    waits: bool

    # writes env_obs[0]; env i reset with seed + i (or seed[i] for a list), with options[i]
    def reset(self, seed: Any, options: Optional[Sequence[dict[str, Any]]] = None) -> None: ...

    # writes env_obs[t+1], env_rewards[t], terminated[t], truncated[t] (rollout False: not a rollout's step t)
    def step(self, t: int, rollout: bool = True) -> None: ...

    def step_async(self, t: int, columns: range, rollout: bool = True) -> None: ...  # starts step t of the envs in columns

    def step_wait(self) -> None: ...  # waits for them

    def record_infos(self, on: bool) -> None: ...

    # other processes keep the CPUs busy (ppo_dict.core.load): waits that sleep
    def adapt(self, busy_elsewhere: bool) -> None: ...

    def call(
        self,
        kind: str,
        indices: Sequence[int],
        name: str = "",
        args: tuple = (),
        kwargs: Optional[dict] = None,
        timeout: Optional[float] = None,
        per_env: Optional[Sequence[Any]] = None,
    ) -> list[Any]: ...

    def close(self) -> None: ...


def env_spec(cfg: "Config") -> EnvSpec:
    """The checked recipe for a run's envs (raises gymnasium's error for an unknown id)."""
    pixel = PixelOptions(cfg.image_size, cfg.grayscale, cfg.pixel_keep_state) if cfg.pixel_obs_wrapper else None
    atari = None
    if cfg.atari_wrapper:
        atari = AtariOptions(
            cfg.atari_noop_max,
            cfg.atari_frame_skip,
            cfg.image_size,
            cfg.atari_terminal_on_life_loss,
            cfg.atari_clip_reward,
            cfg.atari_action_repeat_probability,
        )
    return resolve_env_name(
        cfg.env, cfg.gym_packages, kwargs=cfg.env_kwargs, pixel=pixel, atari=atari, frame_stack=cfg.frame_stack
    )


#: How to probe each env backend, by the name a spec gives (``EnvSpec.backend``): a new kind of env is a
#: backend module here (its runner and its probe) and its line in this table; ``envs/`` names its specs.
BACKENDS: dict[str, Callable[[EnvSpec], EnvBackend]] = {GYM_BACKEND: GymBackend.probe, GODOT_BACKEND: GodotBackend.probe}


def probe_env(spec: EnvSpec) -> EnvBackend:
    """The backend of ``spec``, probed once in this process (one env built, or one game launched, briefly)."""
    probe = BACKENDS.get(spec.backend)
    if probe is None:
        raise ValueError(
            f"{spec.label}: no env backend named {spec.backend!r} (ppo_dict.vec.BACKENDS has {', '.join(BACKENDS)})"
        )
    return probe(spec)


def pool_backend(cfg: "Config", backend: Optional[EnvBackend] = None) -> EnvBackend:
    """The env's backend (``backend``, probed when not given) as the pools run it: in blocks of the
    sizes the layout gives (a Godot demo game per block), with the run's ``step_timeout``."""
    return (backend or probe_env(env_spec(cfg))).for_blocks(None, cfg.step_timeout, True)


def make_env_pool(
    cfg: "Config", backend: Optional[EnvBackend] = None, layout: Optional["Layout"] = None
) -> Union[InProcessEnvPool, ShmEnvPool]:
    """The env pool a config asks for: worker processes, or in-process (``num_workers 0``, one env, one CPU).

    ``backend``: the env as ``ppo_dict.run.checks.validate`` probed it (probed here when not given);
    ``layout``: the run plan's (:meth:`Config.layout` when not given).
    A config with a bad setting is refused first (:meth:`Config.check`), however it was built.
    """
    cfg.check()
    backend = pool_backend(cfg, backend)
    layout = layout or cfg.layout(backend.unit)
    if cfg.action_masks:  # the storage (in every process) then holds the envs' masks
        backend = masked_backend(backend)
    if cfg.info_keywords:  # the storage (in every process) then has a column for each
        backend = dataclasses.replace(backend, info_keywords=cfg.info_keywords)
    if not layout.processes:
        return InProcessEnvPool(backend, layout.n_envs, cfg.n_steps, step_timeout=cfg.step_timeout)
    # the normalised observations in shared memory too: the processes that step the envs may write them
    # (ppo_dict.algo.rollout.shard)
    stage_keys = stage_keys_of(backend.observation_space, cfg.normalize, cfg.norm_obs)
    return ShmEnvPool(
        backend,
        n_steps=cfg.n_steps,
        mp_method=cfg.mp_method,
        step_timeout=cfg.step_timeout,
        halves=cfg.double_buffer,
        spin_wait_us=cfg.spin_wait_us,
        layout=layout,
        stage_keys=stage_keys,
    )
