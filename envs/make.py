"""From the names people type (``gym_Reacher-v2``, ``test_dummy``, ``godot_demo``) to specs and envs.

:func:`resolve_env_name` checks a name once, in the main process, before any worker starts, and
returns its :class:`~envs.spec.EnvSpec`; :func:`make_env` builds a gymnasium env from a spec
(in the main process or in a worker). Godot games are specs too (``envs.godot.spec``), but a
Godot process holds many agents, so the trainer steps them with its own runner instead.
"""
from __future__ import annotations

import importlib
from typing import Any, Optional

import gymnasium as gym

from .spec import GODOT_DEMO, GODOT_PREFIX, GYM_PREFIX, TEST_DUMMY, EnvSpec, PixelOptions


def import_gym_packages(packages: tuple[str, ...]) -> None:
    """Import modules that register envs, as rl-zoo's ``--gym-packages`` does."""
    for module in packages:
        importlib.import_module(module)


def is_mujoco_py_stub(spec: gym.envs.registration.EnvSpec) -> bool:
    """Whether gymnasium registers ``spec`` only to raise: the MuJoCo v2/v3 ids that needed mujoco-py
    have as entry point gymnasium's own ``_raise_mujoco_py_error``. Any other entry point (a
    ``"module:Class"`` string, a class, a function, as gymnasium's docs register custom envs) makes an env."""
    stub = getattr(gym.envs, "_raise_mujoco_py_error", None)
    return stub is not None and spec.entry_point is stub


def _newest_version(spec: gym.envs.registration.EnvSpec) -> Optional[str]:
    """The newest registered id of the same env family that gymnasium can still make."""
    candidates = [
        s
        for s in gym.registry.values()
        if s.namespace == spec.namespace and s.name == spec.name and not is_mujoco_py_stub(s) and s.version is not None
    ]
    return max(candidates, key=lambda s: s.version).id if candidates else None


def resolve_env_name(
    name: str, gym_packages: tuple[str, ...] = (), kwargs: Optional[dict[str, Any]] = None, pixel: Optional[PixelOptions] = None
) -> EnvSpec:
    """Check ``name`` and return its spec, or raise with gymnasium's own "Did you mean" text.

    MuJoCo ids that gymnasium 1.x only registers to raise (``Reacher-v2``, ``-v3``: they need
    mujoco-py) map to the newest version gymnasium makes, with a notice saying so.
    ``test_dummy`` is the dummy pixel env; its ``kwargs`` are checked here. ``godot_demo`` and
    ``godot`` are Godot games (``envs.godot.spec.resolve_godot``).
    """
    kwargs = dict(kwargs or {})
    if name == GODOT_PREFIX or name.startswith(GODOT_PREFIX + "_"):
        from .godot.spec import resolve_godot

        return resolve_godot(name, kwargs, pixel)
    import_gym_packages(gym_packages)
    if name == TEST_DUMMY:
        from .dummy import GYM_ID, check_kwargs

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
    if is_mujoco_py_stub(spec):
        newest = _newest_version(spec)
        if newest is None:
            raise ValueError(f"gymnasium registers {gym_id} but cannot make it, and no other version of it")
        notice = f"note: {gym_id} needs mujoco-py, which gymnasium 1.x dropped; using {newest} instead"
        gym_id = newest
    if pixel is not None:
        from .pixels import check_pixel_env

        check_pixel_env(gym.spec(gym_id))
    return EnvSpec(name=name, gym_id=gym_id, gym_packages=tuple(gym_packages), kwargs=kwargs, notice=notice, pixel=pixel)


def make_env(spec: EnvSpec) -> gym.Env:
    """Build one gymnasium env from its spec (in the main process or in a worker); not for Godot specs."""
    if spec.is_godot:
        raise ValueError(
            f"{spec.name} is a Godot game: its agents are env columns of one Godot process, stepped by the trainer's "
            "Godot runner (ppo_dict.vec.godot), not a gymnasium env that make_env can build"
        )
    import_gym_packages(spec.gym_packages)
    if spec.name == TEST_DUMMY:
        from . import dummy  # noqa: F401  (registers the gymnasium id)
    if spec.pixel is None:
        return gym.make(spec.gym_id, **spec.kwargs)
    from .pixels import make_pixel_env

    return make_pixel_env(spec.gym_id, spec.kwargs, spec.pixel)
