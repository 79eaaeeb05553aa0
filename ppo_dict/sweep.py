"""Run a wandb sweep file without a W&B server, on an Optuna study many processes can share.

``python -m ppo_dict.sweep sweeps/reacher.yaml --count 8 --n_jobs 2`` runs 8 trials, 2 at a time;
``--storage URL --study_name NAME`` puts the study where other processes, here or on other
machines, join it with the same command (``ppo_dict.run.study``). Each trial is the command line a
``wandb agent`` would run for the same sweep file: the file's ``command`` with ``${env}``,
``${interpreter}`` and ``${args}`` expanded by wandb's own ``create_sweep_command`` /
``create_sweep_command_args`` (flags as ``--name=value``), run as a subprocess that prints its
summary JSON line last, from which the sweep's ``metric`` is read (``metrics[<name>]``). Every
method is an Optuna sampler, so every method shares one storage: ``grid`` (``GridSampler``),
``random`` (``RandomSampler``) and ``bayes`` (``TPESampler``). Ctrl-C / SIGTERM while it starts (imports,
Optuna, the sweep file) ends it cleanly (``ppo_dict.run.startup``); from the study on, its own handlers stop
the running trials and queue them again. The trials and the study's run are ``ppo_dict.run.sweep``.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from typing import Optional

from ppo_dict.run import startup

#: what a stop signal does to a sweep that is starting (``ppo_dict.run.startup``); its study's own handlers follow
STOPPED = "while starting: stopped before any trial began; nothing was run"

if __name__ == "__main__":  # before the imports below take their seconds: a stop signal then ends the start cleanly
    startup.exit_on_stop_signals(STOPPED)

from ppo_dict.core.errors import SweepError  # noqa: E402 (after the start-up signal handlers)
from ppo_dict.run.sweep import TrialProcesses, import_optuna, install_stop_handlers, run_sweep, write_results  # noqa: E402
from ppo_dict.run.sweep_file import read_sweep_file  # noqa: E402


def parse_args(argv: Optional[list[str]]) -> tuple[argparse.Namespace, list[str]]:
    from ppo_dict.run.cli import Option, command_parser

    parser = command_parser(
        "python -m ppo_dict.sweep",
        __doc__,
        [
            Option(("sweep_file",), "a wandb sweep file (sweeps/reacher.yaml)"),
            Option(
                ("--count",),
                "trials this process runs (grid: the study stops when the grid is done)",
                10,
                kwargs={"type": int},
            ),
            Option(("--n_jobs",), "trials this process runs at once", 1, kwargs={"type": int}),
            Option(
                ("--storage",),
                "Optuna storage: sqlite:///FILE.db, FILE.journal, postgresql://user:password@host/db",
                None,
                "None: sqlite:///<out>/optuna.db",
            ),
            Option(("--study_name",), "the study to create or join", None, "None: the sweep file's name"),
            Option(
                ("--method",), "override the file's method", None, "None: the file's", {"choices": ("grid", "random", "bayes")}
            ),
            Option(
                ("--seed",), "seed of this process's sampler", None, "None: fresh, so joined processes differ", {"type": int}
            ),
            Option(("--out",), "folder for the trials' run directories", None, "None: runs/sweeps/<study name>"),
            Option(("--timeout",), "seconds one trial may take", 3600.0, kwargs={"type": float}),
            Option(
                ("--allow_command",),
                "run the sweep file's command when it is not ppo_dict's own (${interpreter} -m "
                "ppo_dict.main_ppo "
                "${args}): it runs whatever program the file names",
                False,
                kwargs={"action": "store_true"},
            ),
            Option(
                ("--allow_code",),
                "let the sweep file's parameters import or launch code (gym_packages, an env <module>:<id>, "
                "a Godot game's program)",
                False,
                kwargs={"action": "store_true"},
            ),
        ],
        epilog="Arguments after -- go to every trial, e.g. -- --total_timesteps 20000",
    )
    args, extra = parser.parse_known_args(argv)
    problems = [f"--{name} must be >= {low}" for name, low in (("count", 0), ("n_jobs", 1)) if getattr(args, name) < low]
    if problems:
        parser.error("; ".join(problems))
    return args, [a for a in extra if a != "--"]


def main(argv: Optional[list[str]] = None) -> int:
    args, extra = parse_args(argv)
    try:
        import_optuna()  # while a stop signal still ends the start at once (inside a C extension's import it must)
        startup.imported()
        sweep = read_sweep_file(args.sweep_file)
    except SweepError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    method = args.method or sweep.get("method", "random")
    study_name = args.study_name or os.path.splitext(os.path.basename(args.sweep_file))[0]
    out = args.out or os.path.join("runs", "sweeps", study_name)
    trials = TrialProcesses()
    previous = install_stop_handlers(trials)
    try:
        rows = run_sweep(
            sweep,
            args.count,
            method,
            out,
            extra,
            args.seed,
            args.timeout,
            args.storage,
            study_name,
            args.n_jobs,
            trials,
            args.allow_command,
            args.allow_code,
        )
    except SweepError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(
            "interrupted: the running trials were stopped and are queued again; run the same command to resume",
            file=sys.stderr,
            flush=True,
        )
        return 128 + (trials.signum or signal.SIGINT)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return write_results(rows, sweep, out, study_name, args.storage)


if __name__ == "__main__":
    sys.exit(main())
