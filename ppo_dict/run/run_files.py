"""What a resumed run reads of its run directory, read bounded and checked whole before anything is written.

A run directory is a folder anyone with access may have edited: its ``progress.csv``, ``monitor.csv``,
``evaluations.npz``, ``wandb_run_id`` and the temp files of ``checkpoints/`` are each read here the way the
run will read them later (:mod:`ppo_dict.core.bounded`: lines, cells, rows and JSON nesting bounded), in the
checks that run before the run takes its directory (``--dry_run`` too). Every problem is a line naming the
file and what is wrong; the run is refused with all of them, and nothing is changed.
"""

from __future__ import annotations

import glob
import io
import os
from typing import Any, Callable, Optional

from ppo_dict.core.reading import entry_kind, read_capped
from ppo_dict.run.checkpoint import CHECKPOINT_DIR
from ppo_dict.run.monitor_csv import MONITOR, read_monitor
from ppo_dict.run.tracking import WandbTracker, progress_rows, read_wandb_id

PROGRESS = "progress.csv"
#: the most bytes of a ``progress.csv`` read (a dump of a hundred keys is a few KiB: hundreds of thousands of dumps)
MAX_PROGRESS_BYTES = 2**30
#: the temp files an interrupted checkpoint write leaves (:func:`ppo_dict.core.files.atomic_write`)
CHECKPOINT_TEMP = ".checkpoint_*.tmp"


def read_progress(path: str) -> list[dict[str, Any]]:
    """A run's ``progress.csv`` (never through a link, at most :data:`MAX_PROGRESS_BYTES`) as :func:`progress_rows`."""
    data = read_capped(path, MAX_PROGRESS_BYTES, "a progress.csv", follow=False)
    try:
        text = data.decode()
    except UnicodeDecodeError as exc:
        raise ValueError(f"{path}: not UTF-8 text (byte {exc.start})") from None
    return progress_rows(io.StringIO(text, newline=""), path)


def evaluation_problem(path: str, episodes: Optional[int]) -> str:
    """Why the run cannot append evaluations of ``episodes`` episodes (None: it does not evaluate) to ``path``
    (read whole first: ``ValueError`` or ``OSError`` for one that does not read), or ``""``."""
    from ppo_dict.run.evaluation import read_evaluations  # (the evaluation's modules: only when resuming)

    results = read_evaluations(path)["results"]
    if episodes is not None and len(results) and results.shape[1] != episodes:
        return (
            f"{path} holds evaluations of {results.shape[1]} episodes and this run evaluates {episodes}: pass "
            f"--eval_episodes {results.shape[1]} to continue it, or choose another --run_dir"
        )
    return ""


def temp_file_problems(run_dir: str) -> list[str]:
    """Names in ``run_dir/checkpoints`` like an interrupted checkpoint's temp file that the run, which deletes
    those, cannot delete as one: anything but a regular file or a link (a folder, a FIFO)."""
    found = sorted(glob.glob(os.path.join(glob.escape(os.path.join(run_dir, CHECKPOINT_DIR)), CHECKPOINT_TEMP)))
    return [
        f"{path} is {entry_kind(path)}, named like the temp file of an interrupted checkpoint, which the run deletes; "
        "remove it"
        for path in found
        if entry_kind(path) not in ("a regular file", "a symbolic link")
    ]


def resumed_file_problems(cfg: Any, home: str, in_place: bool) -> list[str]:
    """What a run resumed from ``cfg.resume`` would read of its run directory ``home`` and cannot: its
    ``progress.csv`` and ``monitor.csv`` (the rows it continues from, a branch too) and, continuing in place, its
    ``evaluations.npz`` (of ``cfg.eval_episodes`` episodes, when it evaluates), its ``wandb_run_id`` (with a
    ``--project``) and ``checkpoints/``'s temp files. One line per file."""
    checks: list[tuple[str, Callable[[str], Any]]] = [(PROGRESS, read_progress), (MONITOR, read_monitor)]
    if in_place:
        checks.append(("evaluations.npz", lambda path: evaluation_problem(path, cfg.eval_episodes if cfg.eval_freq else None)))
        checks += [(WandbTracker.ID_FILE, read_wandb_id)] if cfg.project is not None else []
    problems = temp_file_problems(home) if in_place else []
    for name, check in checks:
        path = os.path.join(home, name)
        if not entry_kind(path):
            continue
        try:
            said = check(path)
        except (OSError, ValueError, UnicodeDecodeError) as exc:
            problems.append(" ".join(str(exc).split()) + "; the run continues from it, so it must read as the run wrote it")
        else:
            problems += [said] if name == "evaluations.npz" and said else []
    return [f"resume={cfg.resume!r}: {p}" for p in problems]
