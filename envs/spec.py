"""What an environment is before it exists: the names people type and the picklable recipe.

An :class:`EnvSpec` is resolved and checked once in the main process (``envs.make``) and handed to
every worker, which builds its envs from it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

GYM_PREFIX = "gym_"
#: ``godot_demo`` is the demo game; ``godot`` with ``env_kwargs`` ``dict(env_path=...)`` or
#: ``dict(project=...)`` is any other game. Also the ``gym_id`` of every Godot spec.
GODOT_PREFIX = "godot"
#: The demo Godot game shipped in ``envs/godot/demo``.
GODOT_DEMO = "godot_demo"
#: The dummy pixel env for benchmarking and testing the pipeline (``envs/dummy.py``).
TEST_DUMMY = "test_dummy"
#: The trainer's env backends (``ppo_dict.vec.BACKENDS``) a spec names: gymnasium envs, and Godot games.
GYM_BACKEND, GODOT_BACKEND = "gym", "godot"


#: The keys of a rendered-pixels observation (``envs.pixels``): the frames, and the env's own state.
PIXELS, STATE = "pixels", "state"
#: The module whose import registers the Atari games (``ALE/Pong-v5``, ``PongNoFrameskip-v4``); a
#: spec whose ``gym_packages`` holds it is an Atari game (:attr:`EnvSpec.is_atari`).
ALE_MODULE = "ale_py"


def is_godot_name(name: str) -> bool:
    """``godot`` and ``godot_<game>`` (``godot_demo``): Godot games, never gymnasium ids."""
    return name == GODOT_PREFIX or name.startswith(GODOT_PREFIX + "_")


def gym_id_of(name: str) -> str:
    """The gymnasium id an ``--env`` name means, ``""`` for none: ``CartPole-v1`` as rl-zoo takes it, or
    ``gym_CartPole-v1`` (the prefix is optional), ``mymodule:MyEnv-v0`` (gymnasium's form, which imports the
    module) alike. ppo_dict's own names (:data:`TEST_DUMMY`, ``godot``, ``godot_<game>``) are never read as
    gymnasium ids; a gymnasium env registered under one of them is reached with the prefix (``gym_test_dummy``)."""
    if name.startswith(GYM_PREFIX):
        return name[len(GYM_PREFIX) :]
    return "" if name == TEST_DUMMY or is_godot_name(name) else name


def is_atari_entry(entry_point: Any) -> bool:
    """rl-zoo's ``ExperimentManager.is_atari``: a gymnasium entry point that is ale-py's ``AtariEnv``."""
    return "AtariEnv" in str(entry_point)


@dataclass(frozen=True)
class PixelOptions:
    """Observe rendered frames: ``image_size`` square, optional grey, and with ``keep_state`` the
    state vector under its own key (frame stacking is :attr:`EnvSpec.frame_stack`)."""

    image_size: int = 84
    grayscale: bool = False
    keep_state: bool = False


@dataclass(frozen=True)
class AtariOptions:
    """sb3 ``AtariWrapper``'s arguments, with its defaults (``envs.atari.wrap_atari``)."""

    noop_max: int = 30
    frame_skip: int = 4
    screen_size: int = 84
    terminal_on_life_loss: bool = True
    clip_reward: bool = True
    action_repeat_probability: float = 0.0


@dataclass(frozen=True)
class EnvSpec:
    """How to build one environment.

    Attributes:
        name: the name as typed (``gym_Reacher-v2``).
        gym_id: the gymnasium id it resolved to (``Reacher-v5``); :data:`GODOT_PREFIX` for a Godot game.
        gym_packages: modules imported before ``gym.make`` so that custom ids are registered.
        kwargs: keyword arguments for ``gym.make`` (a Godot game: ``GodotGame``'s).
        notice: one line for the user when the name was mapped (empty otherwise).
        pixel: render frames as the observation (None: the env's own observation).
        atari: sb3's ``AtariWrapper`` preprocessing of an Atari game (None: the game's raw frames).
        frame_stack: the last K observations stacked on the channel axis (sb3 ``VecFrameStack``);
            1 stacks nothing.
        backend: which of the trainer's env backends steps it (``ppo_dict.vec.BACKENDS``):
            :data:`GYM_BACKEND` (gymnasium envs, built by ``make_env``) or :data:`GODOT_BACKEND`.
    """

    name: str
    gym_id: str
    gym_packages: tuple[str, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)
    notice: str = ""
    pixel: Optional[PixelOptions] = None
    atari: Optional[AtariOptions] = None
    frame_stack: int = 1
    backend: str = GYM_BACKEND

    @property
    def is_godot(self) -> bool:
        """A Godot game: its agents are env columns of one process, not gymnasium envs."""
        return self.backend == GODOT_BACKEND

    @property
    def is_atari(self) -> bool:
        """An Atari game from ale-py (its id resolved only once ale_py was imported)."""
        return ALE_MODULE in self.gym_packages

    @property
    def label(self) -> str:
        """The env's name in messages: ``gym_Reacher-v2 = Reacher-v5``, ``godot (game.x86_64)``."""
        if self.is_godot:
            game = self.kwargs.get("env_path") or self.kwargs.get("project")
            return self.name if self.name == GODOT_DEMO else f"{self.name} ({game})"
        return self.name if self.name.endswith(self.gym_id) else f"{self.name} = {self.gym_id}"
