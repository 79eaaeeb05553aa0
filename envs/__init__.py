"""Making environments from the names people type (``gym_Reacher-v2``, ``godot_demo``, ...).

An :class:`EnvSpec` is the picklable recipe for one env: the main process resolves and checks
the name once (before any worker starts), and every worker builds its envs from the spec.
Godot games (``godot_demo``, or ``godot`` with ``env_kwargs`` naming a game) are specs too, but
their agents are stepped by ``envs.godot.pool.GodotRunner``, not built by :func:`make_env`.
"""
from __future__ import annotations

import importlib
import inspect
from dataclasses import dataclass, field
from typing import Any, Optional

import gymnasium as gym
import numpy as np

GYM_PREFIX = "gym_"
#: ``godot_demo`` is the demo game; ``godot`` with ``env_kwargs`` ``dict(env_path=...)`` or
#: ``dict(project=...)`` is any other game. Also the ``gym_id`` of every Godot spec.
GODOT_PREFIX = "godot"
#: The demo Godot game shipped in ``envs/godot/demo``.
GODOT_DEMO = "godot_demo"
#: The dummy pixel env for benchmarking and testing the pipeline (``envs/dummy.py``).
TEST_DUMMY = "test_dummy"


@dataclass(frozen=True)
class PixelOptions:
    """Observe rendered frames: ``image_size`` square, optional grey, ``frame_stack`` frames on the
    channel axis, and with ``keep_state`` the state vector under its own key."""

    image_size: int = 84
    grayscale: bool = False
    frame_stack: int = 1
    keep_state: bool = False


@dataclass(frozen=True)
class EnvSpec:
    """How to build one environment.

    Attributes:
        name: the name as typed (``gym_Reacher-v2``).
        gym_id: the gymnasium id it resolved to (``Reacher-v5``).
        gym_packages: modules imported before ``gym.make`` so that custom ids are registered.
        kwargs: keyword arguments for ``gym.make``.
        notice: one line for the user when the name was mapped (empty otherwise).
        pixel: render frames as the observation (None: the env's own observation).
    """

    name: str
    gym_id: str
    gym_packages: tuple[str, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)
    notice: str = ""
    pixel: Optional[PixelOptions] = None


def is_image_space(space: gym.Space) -> bool:
    """sb3's ``is_image_space``: a 3-d uint8 Box with bounds exactly [0, 255]."""
    return (
        isinstance(space, gym.spaces.Box)
        and len(space.shape) == 3
        and space.dtype == np.uint8
        and bool(np.all(space.low == 0))
        and bool(np.all(space.high == 255))
    )


def is_channel_last(space: gym.Space) -> bool:
    """An image whose smallest axis is not the first (sb3's ``is_image_space_channels_first`` negated)."""
    return is_image_space(space) and int(np.argmin(space.shape)) != 0


def channel_first_space(space: gym.Space) -> gym.Space:
    """The space the CNN sees: channel-last image (sub)spaces as [C, H, W] (sb3 ``VecTransposeImage``)."""
    if isinstance(space, gym.spaces.Dict):
        return gym.spaces.Dict({k: channel_first_space(sub) for k, sub in space.spaces.items()})
    if is_channel_last(space):
        h, w, c = space.shape
        return gym.spaces.Box(0, 255, (c, h, w), space.dtype)
    return space


def import_gym_packages(packages: tuple[str, ...]) -> None:
    """Import modules that register envs, as rl-zoo's ``--gym-packages`` does."""
    for module in packages:
        importlib.import_module(module)


def _newest_version(spec: gym.envs.registration.EnvSpec) -> str | None:
    """The newest registered id of the same env family that gymnasium can still make."""
    candidates = [
        s
        for s in gym.registry.values()
        if s.namespace == spec.namespace and s.name == spec.name and isinstance(s.entry_point, str) and s.version is not None
    ]
    return max(candidates, key=lambda s: s.version).id if candidates else None


def resolve_env_name(
    name: str, gym_packages: tuple[str, ...] = (), kwargs: Optional[dict[str, Any]] = None, pixel: Optional[PixelOptions] = None
) -> EnvSpec:
    """Check ``name`` and return its spec, or raise with gymnasium's own "Did you mean" text.

    MuJoCo ids that gymnasium 1.x only registers to raise (``Reacher-v2``, ``-v3``: they need
    mujoco-py) map to the newest version gymnasium makes, with a notice saying so.
    ``test_dummy`` is the dummy pixel env; its ``kwargs`` are checked here. ``godot_demo`` and
    ``godot`` are Godot games (:func:`resolve_godot`).
    """
    kwargs = dict(kwargs or {})
    if name == GODOT_PREFIX or name.startswith(GODOT_PREFIX + "_"):
        return resolve_godot(name, kwargs, pixel)
    import_gym_packages(gym_packages)
    if name == TEST_DUMMY:
        from envs.dummy import GYM_ID, check_kwargs

        check_kwargs(kwargs)
        if pixel is not None:
            raise ValueError("test_dummy already observes images: drop --pixel_obs_wrapper")
        return EnvSpec(name=name, gym_id=GYM_ID, gym_packages=tuple(gym_packages), kwargs=kwargs)
    if not name.startswith(GYM_PREFIX):
        raise ValueError(
            f"unknown environment {name!r}: write gym_<gymnasium id> (e.g. gym_Reacher-v2), {TEST_DUMMY}, "
            f"{GODOT_DEMO} (the Godot demo game) or {GODOT_PREFIX} with --env_kwargs \"dict(env_path=...)\" (another Godot game)"
        )
    gym_id = name[len(GYM_PREFIX) :]
    spec = gym.spec(gym_id)  # raises NameNotFound / VersionNotFound with a "Did you mean" hint
    notice = ""
    if not isinstance(spec.entry_point, str):
        newest = _newest_version(spec)
        if newest is None:
            raise ValueError(f"gymnasium registers {gym_id} but cannot make it, and no other version of it")
        notice = f"note: {gym_id} needs mujoco-py, which gymnasium 1.x dropped; using {newest} instead"
        gym_id = newest
    if pixel is not None:
        from envs.pixels import check_pixel_env

        check_pixel_env(gym.spec(gym_id))
    return EnvSpec(name=name, gym_id=gym_id, gym_packages=tuple(gym_packages), kwargs=kwargs, notice=notice, pixel=pixel)


def is_godot(spec: EnvSpec) -> bool:
    """Whether ``spec`` is a Godot game (stepped by ``envs.godot.pool.GodotRunner``)."""
    return spec.gym_id == GODOT_PREFIX


def resolve_godot(name: str, kwargs: dict[str, Any], pixel: Optional[PixelOptions] = None) -> EnvSpec:
    """The spec of a Godot game: ``godot_demo``, or ``godot`` with ``env_path`` or ``project`` in ``kwargs``.

    ``kwargs`` are :class:`envs.godot.game.GodotGame`'s arguments, checked against its signature;
    the binary, exported game or project must exist (nothing is launched here).
    """
    from envs.godot.game import GodotGame, check_program
    from envs.godot.pool import godot_spec

    allowed = [p for p in inspect.signature(GodotGame).parameters]
    unknown = sorted(set(kwargs) - set(allowed))
    if unknown:
        raise ValueError(f"unknown env_kwargs {', '.join(unknown)}: a Godot game takes {', '.join(allowed)}")
    if pixel is not None:
        raise ValueError(f"{name} is a Godot game, which sends its own observations: drop --pixel_obs_wrapper")
    game = {k: v for k, v in kwargs.items() if k != "project"}
    if name == GODOT_DEMO:
        if "project" in kwargs or "env_path" in kwargs:
            raise ValueError(f"{GODOT_DEMO} is the demo game: for another game use --env {GODOT_PREFIX} with env_kwargs project or env_path")
        spec = godot_spec(GODOT_DEMO, **game)
    elif name == GODOT_PREFIX:
        if kwargs.get("project") is None and kwargs.get("env_path") is None:
            raise ValueError(
                f"--env {GODOT_PREFIX} needs a game: --env_kwargs \"dict(env_path='game.x86_64')\" (an exported game) or "
                f"\"dict(project='path/to/project')\" (a folder with project.godot); or use --env {GODOT_DEMO}"
            )
        spec = godot_spec(GODOT_PREFIX, project=kwargs.get("project"), **game)
    else:
        raise ValueError(f"unknown Godot game {name!r}: use {GODOT_DEMO}, or {GODOT_PREFIX} with --env_kwargs \"dict(env_path=...)\"")
    check_program(**{k: spec.kwargs[k] for k in ("project", "env_path", "binary") if k in spec.kwargs})
    return spec


def make_env(spec: EnvSpec) -> gym.Env:
    """Build one env from its spec (in the main process or in a worker); not for Godot specs."""
    if is_godot(spec):
        raise ValueError(
            f"{spec.name} is a Godot game: its agents are env columns stepped by envs.godot.pool.GodotRunner "
            "(the worker pool or GodotInProcessPool), not a gymnasium env that make_env can build"
        )
    import_gym_packages(spec.gym_packages)
    if spec.name == TEST_DUMMY:
        import envs.dummy  # noqa: F401  (registers the gymnasium id)
    if spec.pixel is None:
        return gym.make(spec.gym_id, **spec.kwargs)
    from envs.pixels import make_pixel_env

    return make_pixel_env(spec.gym_id, spec.kwargs, spec.pixel)


def observes_images(spec: EnvSpec) -> bool:
    """Whether the env's observation is (or contains) an image; builds one env unless it is known.

    The Godot demo observes an image when its ``game_args`` ask for ``image_size`` > 0; another
    Godot game is launched once, briefly, to read its spaces.
    """
    if spec.pixel is not None or spec.name == TEST_DUMMY:
        return True
    if spec.name == GODOT_DEMO:
        return int((spec.kwargs.get("game_args") or {}).get("image_size", 0)) > 0
    if is_godot(spec):
        from envs.godot.pool import probe_game

        return contains_image(probe_game(spec).observation_space)
    env = make_env(spec)
    try:
        return contains_image(env.observation_space)
    finally:
        env.close()


def contains_image(space: gym.Space) -> bool:
    """Whether ``space`` is an image (:func:`is_image_space`) or a Dict with one."""
    subspaces = space.spaces.values() if isinstance(space, gym.spaces.Dict) else [space]
    return any(is_image_space(sub) for sub in subspaces)
