"""Making environments from the names people type (``gym_Reacher-v2``, ...).

An :class:`EnvSpec` is the picklable recipe for one env: the main process resolves and checks
the name once (before any worker starts), and every worker builds its envs from the spec.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Any, Optional

import gymnasium as gym
import numpy as np

GYM_PREFIX = "gym_"
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
    ``test_dummy`` is the dummy pixel env; its ``kwargs`` are checked here.
    """
    kwargs = dict(kwargs or {})
    import_gym_packages(gym_packages)
    if name == TEST_DUMMY:
        from envs.dummy import GYM_ID, check_kwargs

        check_kwargs(kwargs)
        if pixel is not None:
            raise ValueError("test_dummy already observes images: drop --pixel_obs_wrapper")
        return EnvSpec(name=name, gym_id=GYM_ID, gym_packages=tuple(gym_packages), kwargs=kwargs)
    if not name.startswith(GYM_PREFIX):
        raise ValueError(f"unknown environment {name!r}: write gym_<gymnasium id> (e.g. gym_Reacher-v2) or {TEST_DUMMY}")
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


def make_env(spec: EnvSpec) -> gym.Env:
    """Build one env from its spec (in the main process or in a worker)."""
    import_gym_packages(spec.gym_packages)
    if spec.name == TEST_DUMMY:
        import envs.dummy  # noqa: F401  (registers the gymnasium id)
    if spec.pixel is None:
        return gym.make(spec.gym_id, **spec.kwargs)
    from envs.pixels import make_pixel_env

    return make_pixel_env(spec.gym_id, spec.kwargs, spec.pixel)


def observes_images(spec: EnvSpec) -> bool:
    """Whether the env's observation is (or contains) an image; builds one env unless it is known."""
    if spec.pixel is not None or spec.name == TEST_DUMMY:
        return True
    env = make_env(spec)
    try:
        space = env.observation_space
        subspaces = space.spaces.values() if isinstance(space, gym.spaces.Dict) else [space]
        return any(is_image_space(sub) for sub in subspaces)
    finally:
        env.close()
