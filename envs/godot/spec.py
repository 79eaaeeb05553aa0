"""Godot games as :class:`~envs.spec.EnvSpec`: ``godot_demo``, or ``godot`` with a game's path.

A Godot spec's ``kwargs`` are :class:`~envs.godot.game.GodotGame`'s arguments; its ``gym_id`` is
``godot`` (``EnvSpec.is_godot``). Nothing here launches a game: the files are checked only.
"""

from __future__ import annotations

import inspect
import os
from typing import Any, Optional, Union

from ..spec import GODOT_BACKEND, GODOT_DEMO, GODOT_PREFIX, EnvSpec, PixelOptions
from .game import DEMO_PROJECT, GodotGame, check_program


def godot_spec(name: str = GODOT_DEMO, project: Union[str, os.PathLike, None] = DEMO_PROJECT, **game_kwargs: Any) -> EnvSpec:
    """An :class:`EnvSpec` for a Godot game; ``kwargs`` are :class:`GodotGame`'s arguments.

    ``game_kwargs``: env_path, binary, seed (launch ``--env_seed`` of game 0), speedup,
    action_repeat, framerate, game_args, connect_timeout, step_timeout.
    """
    return EnvSpec(
        name=name,
        gym_id=GODOT_PREFIX,
        kwargs={"project": None if project is None else str(project), **game_kwargs},
        backend=GODOT_BACKEND,
    )


def resolve_godot(name: str, kwargs: dict[str, Any], pixel: Optional[PixelOptions] = None) -> EnvSpec:
    """The spec of a Godot game: ``godot_demo``, or ``godot`` with ``env_path`` or ``project`` in ``kwargs``.

    ``kwargs`` are checked against :class:`GodotGame`'s signature; the binary, exported game or
    project must exist (nothing is launched here).
    """
    allowed = [p for p in inspect.signature(GodotGame).parameters]
    unknown = sorted(set(kwargs) - set(allowed))
    if unknown:
        raise ValueError(f"unknown env_kwargs {', '.join(unknown)}: a Godot game takes {', '.join(allowed)}")
    if pixel is not None:
        raise ValueError(f"{name} is a Godot game, which sends its own observations: drop --pixel_obs_wrapper")
    game = {k: v for k, v in kwargs.items() if k != "project"}
    if name == GODOT_DEMO:
        if "project" in kwargs or "env_path" in kwargs:
            raise ValueError(
                f"{GODOT_DEMO} is the demo game: for another game use --env {GODOT_PREFIX} with env_kwargs project or env_path"
            )
        spec = godot_spec(GODOT_DEMO, **game)
    elif name == GODOT_PREFIX:
        if kwargs.get("project") is None and kwargs.get("env_path") is None:
            raise ValueError(
                f"--env {GODOT_PREFIX} needs a game: --env_kwargs \"dict(env_path='game.x86_64')\" (an exported game) or "
                f"\"dict(project='path/to/project')\" (a folder with project.godot); or use --env {GODOT_DEMO}"
            )
        spec = godot_spec(GODOT_PREFIX, project=kwargs.get("project"), **game)
    else:
        raise ValueError(
            f'unknown Godot game {name!r}: use {GODOT_DEMO}, or {GODOT_PREFIX} with --env_kwargs "dict(env_path=...)"'
        )
    check_program(**{k: spec.kwargs[k] for k in ("project", "env_path", "binary") if k in spec.kwargs})
    return spec
