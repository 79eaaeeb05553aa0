"""What a config read from a file (a checkpoint's, a model file's) would run: modules it imports, programs it launches.

A checkpoint holds plain values only (``torch.load(weights_only=True)``), but some of them name code:
``gym_packages`` are imported, an env id ``<module>:<id>`` (or ``gym_<module>:<id>``) imports its module (gymnasium's form), and a
Godot game's ``env_kwargs`` (``env_path``, ``project``, ``binary``, ``game_args``) choose the program launched.
A setting typed on the command line is the user's own; one that comes from the file is said first, in one
line (:func:`announce`), and ``--dry_run`` imports and launches none of them: it refuses the run, naming each.
"""
from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Iterable

from ppo_dict.core.errors import ConfigError
from ppo_dict.envs import gym_id_of, is_godot_name

if TYPE_CHECKING:
    from ppo_dict.core.config import Config

#: a Godot game's env_kwargs that choose the program launched, and what it is given
GODOT_PROGRAM_KWARGS = ("env_path", "project", "binary", "game_args")


def config_effects(cfg: "Config", typed: Iterable[str]) -> dict[str, str]:
    """``{setting: what it runs}`` for the settings of ``cfg`` that import a module or launch a program,
    among those not ``typed`` on the command line (so they come from the file)."""
    typed = set(typed)
    effects = {}
    if cfg.gym_packages and "gym_packages" not in typed:
        effects["gym_packages"] = f"imports the module(s) {', '.join(cfg.gym_packages)}"
    gym_id = gym_id_of(cfg.env)  # gym_<module>:<id> and <module>:<id> alike
    if ":" in gym_id and "env" not in typed:
        effects["env"] = f"imports the module {gym_id.partition(':')[0]} (gymnasium's <module>:<env id>)"
    program = {k: v for k, v in cfg.env_kwargs.items() if k in GODOT_PROGRAM_KWARGS and v is not None}
    if is_godot_name(cfg.env) and program and "env_kwargs" not in typed:
        effects["env_kwargs"] = "launches the Godot program of " + ", ".join(f"{k}={v!r}" for k, v in program.items())
    return effects


def announce(source: str, cfg: "Config", typed: Iterable[str], dry_run: bool) -> None:
    """Say in one line (stderr) what ``cfg``, read from ``source``, imports or launches; under ``dry_run`` raise
    :class:`ConfigError` naming each such setting instead, having imported and launched nothing."""
    effects = config_effects(cfg, typed)
    if not effects:
        return
    if dry_run:
        raise ConfigError([f"{name}={getattr(cfg, name)!r}: from {source}'s config, which {what}; --dry_run imports and launches "
                           f"nothing a file names: type --{name} on the command line to check the run with it" for name, what in effects.items()])
    print(f"{source}: its config {'; '.join(f'{what} ({name})' for name, what in effects.items())}", file=sys.stderr, flush=True)
