"""Command line for Godot games: ``python -m ppo_dict.main_ppo_godot`` trains the demo through the worker pool.

It is ``python -m ppo_dict.main_ppo`` with the Godot demo's tuned settings as defaults (2 workers x
4 agents, each worker owning one headless Godot process; ``benchmarks/bench_godot.py`` uses them too).
Every main_ppo flag works and a flag typed here wins over these defaults; ``--env_path PATH``
trains another game instead (an exported game binary, or a Godot project folder), as
``--env godot --env_kwargs "dict(env_path=PATH)"`` (or ``dict(project=PATH)``) does from main_ppo.

    python -m ppo_dict.main_ppo_godot                                # the demo, 150k agent steps
    python -m ppo_dict.main_ppo_godot --total_timesteps 20000 --seed 1
    python -m ppo_dict.main_ppo_godot --env_path build/MyGame.x86_64 --n_envs 16
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any, Optional

from ppo_dict.run import startup

if __name__ == "__main__":  # before main_ppo's imports take their seconds: a stop signal then ends the start cleanly
    startup.exit_on_stop_signals()

from ppo_dict.envs import GODOT_DEMO, GODOT_PREFIX  # noqa: E402 (after the start-up signal handlers)
from ppo_dict.run.cli import FlagParser, Option, build_parser, read_flags

#: The demo's tuned hyperparameters, as main_ppo flags (``benchmarks/bench_godot.py`` trains with them too).
DEMO_DEFAULTS: dict[str, Any] = {
    "env": GODOT_DEMO,
    "total_timesteps": 150_000,
    "n_steps": 128,
    "batch_size": 256,
    "n_epochs": 10,
    "learning_rate": 3e-4,
    "gamma": 0.98,
    "gae_lambda": 0.95,
    "ent_coef": 0.0,
    "device": "cpu",  # a 64x64 MLP: a GPU only adds transfers
}
#: The default layout, used only when none of its three flags is typed (they must agree).
DEMO_LAYOUT: dict[str, Any] = {"n_envs": 8, "num_workers": 2}
LAYOUT_FLAGS = ("n_envs", "num_workers", "envs_per_worker")
PROG = "python -m ppo_dict.main_ppo_godot"
#: this command's own flag: another game than the demo
ENV_PATH = Option(
    ("--env_path",),
    "another Godot game: an exported game binary, or a Godot project folder (as --env godot "
    '--env_kwargs "dict(env_path=PATH)" or "dict(project=PATH)" from main_ppo)',
    None,
    "None: the demo game",
    {"metavar": "PATH"},
)


def godot_argv(argv: list[str]) -> list[str]:
    """main_ppo's argv: the demo's defaults for every flag not typed, ``--env_path`` turned into env_kwargs.

    With ``--resume`` nothing is added (the checkpoint's config is the base); with
    ``--hyperparams`` only ``--env`` is (the file's entry sets the rest).
    Exits 2, as argparse does, when ``--env_path`` comes with another ``--env``.
    """
    pre = argparse.ArgumentParser(prog=PROG, add_help=False, allow_abbrev=False)
    pre.add_argument(*ENV_PATH.names, default=None)
    known, rest = pre.parse_known_args(argv)
    given, unreadable = read_flags(rest)  # argparse exits 2 on an unknown flag; main_ppo lists unreadable values
    if known.env_path is not None:
        if "env_kwargs" in unreadable:  # it cannot be merged with the path: refused alone
            pre.error(unreadable["env_kwargs"])
        if given.get("env", GODOT_PREFIX) != GODOT_PREFIX:
            pre.error(f"--env_path trains another Godot game (--env {GODOT_PREFIX}); drop --env {given['env']}")
        key = "project" if os.path.isdir(known.env_path) else "env_path"
        # argparse keeps the last of a repeated flag: these replace any typed --env/--env_kwargs
        rest = rest + ["--env", GODOT_PREFIX, "--env_kwargs", repr({**given.get("env_kwargs", {}), key: known.env_path})]
        given["env"] = GODOT_PREFIX
    if "resume" in given:
        return rest
    defaults = dict(DEMO_DEFAULTS)
    if not any(flag in given for flag in LAYOUT_FLAGS):
        defaults.update(DEMO_LAYOUT)
    if "hyperparams" in given:
        defaults = {"env": DEMO_DEFAULTS["env"]}
    added = [item for key, value in defaults.items() if key not in given for item in (f"--{key}", str(value))]
    return added + rest


def godot_parser() -> FlagParser:
    """``--help``'s parser: main_ppo's flags with the demo's defaults, and ``--env_path``."""
    doc, _, examples = __doc__.partition("\n\n    python -m")
    doc = doc.replace("\n\n", "\n", 1)  # both paragraphs: what it is, then how its defaults and main_ppo's flags meet
    return build_parser(
        PROG,
        defaults={**DEMO_DEFAULTS, **DEMO_LAYOUT},
        doc=doc,
        extra={"env": [ENV_PATH]},
        epilog="examples:\n  python -m" + examples.replace("\n    ", "\n  ").rstrip(),
    )


def main(argv: Optional[list[str]] = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if "-h" in argv or "--help" in argv:
        godot_parser().parse_args(["--help"])  # prints it and exits 0, as argparse does
    argv = godot_argv(argv)  # --help and a flag argparse refuses: answered before main_ppo imports torch
    from ppo_dict import main_ppo

    return main_ppo.main(argv)


if __name__ == "__main__":
    sys.exit(main())
