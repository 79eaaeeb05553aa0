"""What a config read from a file (a checkpoint's, a model file's) would do: modules it imports, programs it
launches, and where it writes.

A checkpoint holds plain values only (``torch.load(weights_only=True)``), but some of them name code:
``gym_packages`` are imported, an env id ``<module>:<id>`` (or ``gym_<module>:<id>``) imports its module (gymnasium's
form), and a Godot game's ``env_kwargs`` (``env_path``, ``project``, ``binary``, ``game_args``) choose the program
launched. A setting typed on the command line is the user's own; one that comes from the file is said first, in one line
(:func:`announce`), and ``--dry_run`` imports and launches none of them: it refuses the run, naming each.

Only the command line decides where a run writes and what it trusts (:data:`COMMAND_LINE_ONLY`): a file's
output settings (a save path, an export, a TensorBoard folder, a wandb project) are dropped unless typed
again (:func:`file_values`; a dropped wandb project is said in one line), a sweep file may not set any of
them, and ``--dry_run`` lists every path the run writes (:func:`written_paths`).
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Any, Iterable, Optional, TextIO

from ppo_dict.core.errors import ConfigError
from ppo_dict.envs import gym_id_of, is_godot_name

if TYPE_CHECKING:
    from ppo_dict.core.config import Config

#: a Godot game's env_kwargs that choose the program launched, and what it is given
GODOT_PROGRAM_KWARGS = ("env_path", "project", "binary", "game_args")
#: where a run writes besides its run directory, and the wandb project it logs to
OUTPUT_SETTINGS = ("save_path", "export_sb3", "tensorboard_log", "project", "entity")
#: what only the command line sets (docs/safety.md): trust in pickles, replacing a run's files, where the run writes
COMMAND_LINE_ONLY = ("trust_pickles", "overwrite", "run_dir", *OUTPUT_SETTINGS)


def file_values(values: dict[str, Any], typed: Iterable[str], source: str, log: Optional[TextIO] = None) -> dict[str, Any]:
    """``values`` (a config read from ``source``) without the settings only the command line decides
    (:data:`COMMAND_LINE_ONLY`; ``run_dir`` aside: a resumed run's is where its checkpoint lies), unless
    ``typed``; a wandb project so dropped is said in one line, so that no run stops logging unnoticed."""
    typed = set(typed)
    dropped = [
        name for name in COMMAND_LINE_ONLY if name != "run_dir" and name not in typed and values.get(name) not in (None, False)
    ]
    if "project" in dropped:
        print(
            f"{source}: its config logs to the wandb project {values['project']!r}; a resumed run logs where its command "
            f"line says: pass --project {values['project']} to log there",
            file=log or sys.stderr,
            flush=True,
        )
    return {name: value for name, value in values.items() if name not in dropped}


def written_paths(cfg: "Config") -> list[str]:
    """Every place the run of ``cfg`` writes: its run directory (and what in it), ``--save_path``,
    ``--export_sb3`` (and rl-zoo's statistics beside it), ``--tensorboard_log``, a wandb project."""
    run_dir = cfg.run_dir or os.path.join("runs", f"{cfg.env}__{'<seed>' if cfg.seed is None else cfg.seed}__<time>")
    inside = ["config.json", "progress.csv", "monitor.csv", "checkpoints/", ".lock"]
    inside += ["evaluations.npz", "best_model.pt"] if cfg.eval_freq > 0 else []
    inside += ["videos/"] if cfg.video and cfg.eval_freq > 0 else []
    inside += ["learning_curve.png"] if cfg.plot else []
    inside += ["wandb/", "wandb_run_id"] if cfg.project is not None else []
    paths = [f"{os.path.join(run_dir, '')} ({', '.join(inside)})"]
    if cfg.save_path is not None:
        paths.append(f"{os.path.join(cfg.save_path, 'model.pt')}, {os.path.join(cfg.save_path, 'config.json')}")
    if cfg.export_sb3 is not None:
        zip_file = cfg.export_sb3 if cfg.export_sb3.endswith(".zip") else cfg.export_sb3 + ".zip"
        stats = ", ".join(os.path.join(zip_file[:-4], n) for n in ("vecnormalize.pkl", "vecnormalize.npz", "config.yml"))
        paths.append(zip_file + (f", {stats}" if cfg.normalize else ""))
    if cfg.tensorboard_log is not None:
        paths.append(os.path.join(cfg.tensorboard_log, "PPO_<n>", ""))
    if cfg.project is not None:
        paths.append(f"the wandb project {cfg.project}" + (f" of {cfg.entity}" if cfg.entity else ""))
    return paths


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
        raise ConfigError(
            [
                f"{name}={getattr(cfg, name)!r}: from {source}'s config, which {what}; --dry_run imports and "
                f"launches nothing a file names: type --{name} on the command line to check the run with it"
                for name, what in effects.items()
            ]
        )
    print(
        f"{source}: its config {'; '.join(f'{what} ({name})' for name, what in effects.items())}", file=sys.stderr, flush=True
    )
