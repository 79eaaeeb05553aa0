"""Env backends: what the pools need from a kind of environment, behind one interface.

A backend is picklable (a worker process receives it once, when it starts). It carries the spaces
probed once in the main process (the storage is sized before any worker starts) and makes the
:class:`~ppo_dict.vec.runner.Runner` of a block of env columns. The pools and the workers see
only this interface; :func:`ppo_dict.vec.probe_env` picks the backend of an
:class:`~ppo_dict.envs.EnvSpec` (gymnasium here, Godot in ``ppo_dict.vec.godot``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional, Protocol, Sequence

import gymnasium as gym
from gymnasium import spaces

from ppo_dict.data.storage import RolloutStorage
from ppo_dict.envs import EnvSpec, make_env
from ppo_dict.envs.state import restore_problem
from ppo_dict.vec.runner import GymRunner, Runner

EnvFactory = Callable[[int], gym.Env]


class EnvBackend(Protocol):
    """One kind of environment, probed: its spaces, and runners for blocks of its env columns.

    Attributes:
        label: the env's name in messages (``gym_Reacher-v2 = Reacher-v5``).
        observation_space, action_space: one env column's spaces.
        makes_gym_envs: whether one env column can also be built alone as a gymnasium env
            (evaluation, videos, the sb3 export, info keywords and action masks need that); such a
            backend also has ``factory``, which builds env column ``i`` in the calling process.
        unit: a block of columns holds whole multiples of this many (1; a Godot game's agents).
        info_keywords: the info keys its runners record at episode ends (``--info_keywords``), which
            every process's storage holds a column for (``ppo_dict.data.episodes``).
    """

    label: str
    observation_space: spaces.Space
    action_space: spaces.Space
    makes_gym_envs: bool
    unit: int
    info_keywords: tuple[str, ...]
    state_problem: str  # why its envs' states cannot be saved in checkpoints (they restart on a resume); "" when they can

    def make_runner(self, block: Sequence[int], storage: RolloutStorage) -> Runner:
        """The runner of columns ``block``; its ``open()`` builds their envs (in the calling process)."""

    def for_blocks(self, envs_per_block: Optional[int], step_timeout: float, in_workers: bool) -> "EnvBackend":
        """This backend as a pool runs it: blocks of ``envs_per_block`` columns (None: of any size, as
        the layout splits them), in worker processes or not."""

    def layout_problems(
        self, n_envs: int, num_workers: Optional[int], envs_per_worker: Optional[int], step_timeout: float
    ) -> list[str]:
        """What the layout settings (as given: None where the layout chooses) ask of this backend that cannot work
        (empty when it can)."""


class SpecFactory:
    """Picklable ``env index -> env`` from an :class:`EnvSpec` (imports its gym_packages)."""

    def __init__(self, spec: EnvSpec):
        self.spec = spec

    def __call__(self, env_idx: int) -> gym.Env:
        return make_env(self.spec)


def probe_spaces(make: Callable[[], gym.Env], what: str) -> tuple[spaces.Space, spaces.Space, Optional[str]]:
    """Build one env in this process to read its spaces: ``(observation_space, action_space, env id or None)``."""
    return probe(make, what)[:3]


def probe(make: Callable[[], gym.Env], what: str) -> tuple[spaces.Space, spaces.Space, Optional[str], Optional[str]]:
    """:func:`probe_spaces` and the env's ``render_mode``."""
    try:
        env = make()
    except Exception as exc:
        exc.add_note(f"while building one {what} in the main process to read its spaces (before any worker started)")
        raise
    try:
        return env.observation_space, env.action_space, getattr(env.spec, "id", None), getattr(env, "render_mode", None)
    finally:
        env.close()


@dataclass(frozen=True)
class GymBackend:
    """Gymnasium envs, built by ``factory(env index)`` and stepped by :class:`GymRunner`.

    ``record_infos``: runners also keep sb3's infos (``ShmVecEnv`` hands them to sb3).
    ``episodes_from_infos``: an episode's return and length are ``info["episode"]``'s (sb3's
    ``Monitor``) and none is recorded without one, as sb3's ``_update_info_buffer`` reads them
    (``ppo_dict.PPO``'s envs); else the runner counts them itself, as Monitor would.
    ``needs_main``: the workers import the main module (spawn's and forkserver's way, for what it
    defines); False where ``factory`` pickles all it needs by value (``ppo_dict.PPO``'s envs: a
    script without a ``__main__`` guard must not start itself again in every worker).
    """

    factory: EnvFactory
    observation_space: spaces.Space
    action_space: spaces.Space
    label: str
    record_infos: bool = False
    makes_gym_envs: bool = True
    unit: int = 1
    info_keywords: tuple[str, ...] = ()
    episodes_from_infos: bool = False
    needs_main: bool = True
    state_problem: str = ""  # why an env's state cannot be saved in a checkpoint (envs.state), "" when it can

    @classmethod
    def probe(cls, spec: EnvSpec) -> "GymBackend":
        """Build one env of ``spec`` here to read its spaces (an unknown id or bad kwargs fail here), and whether its
        state can be saved in checkpoints (``envs.state``)."""
        problems: list[str] = []

        def make() -> gym.Env:
            env = make_env(spec)
            problems.append(restore_problem(env))
            return env

        observation_space, action_space, _ = probe_spaces(make, f"env {spec.name}")
        return cls(
            SpecFactory(spec), observation_space, action_space, spec.label, state_problem=problems[0] if problems else ""
        )

    def make_runner(self, block: Sequence[int], storage: RolloutStorage) -> GymRunner:
        return GymRunner(
            self.factory, block, storage, record_infos=self.record_infos, episodes_from_infos=self.episodes_from_infos
        )

    def for_blocks(self, envs_per_block: Optional[int], step_timeout: float, in_workers: bool) -> "GymBackend":
        return self

    def layout_problems(
        self, n_envs: int, num_workers: Optional[int], envs_per_worker: Optional[int], step_timeout: float
    ) -> list[str]:
        return []
