"""A run directory belongs to one run: judged before anything is written, locked while written,
never overwritten without being asked, and untouched by a run that is refused.

* **Judged first** (:func:`run_dir_problems`, part of the config check, so ``--dry_run`` says it
  too): writable, room for a checkpoint, names the file system takes, not in use by another run,
  and empty, unless the run resumes it (``--resume``) or replaces it (``--overwrite True``).
* **Locked while written** (:func:`claim`): an exclusive ``flock`` on ``RUN_DIR/.lock``, which holds
  the pid of the run that has it. A second run on the directory is refused, naming that pid. The
  lock goes with the process (a killed run leaves no stale lock); the file stays, empty.
* **Claimed last**: a run takes its directory only once every check has passed and its model is
  built (and its checkpoint restored): a refused run writes nothing, anywhere.
* **Resuming from an older checkpoint branches**: when the run directory holds checkpoints newer
  than the one resumed, the resumed run writes a new run directory
  ``RUN_DIR/branches/from_<steps>`` (``_2``, ``_3``... for the next ones), whose ``progress.csv``
  starts with the run's rows up to ``<steps>``; nothing of the run itself is changed or deleted.
"""
from __future__ import annotations

import csv
import fcntl
import os
import re
import shutil
import sys
from typing import Any, Optional, TextIO

from ppo_dict.core.errors import ConfigError
from ppo_dict.core.files import output_problem
from ppo_dict.run.checkpoint import BEST_MODEL, CHECKPOINT_DIR, list_checkpoints
from ppo_dict.run.monitor_csv import MONITOR

LOCK_FILE = ".lock"
BRANCHES = "branches"
PROGRESS = "progress.csv"
#: What a run writes into its directory: what ``--overwrite True`` removes (and nothing else).
RUN_ENTRIES = ("config.json", PROGRESS, MONITOR, CHECKPOINT_DIR, "evaluations.npz", BEST_MODEL, "videos", "learning_curve.png",
               "wandb_run_id", "wandb", BRANCHES)
_BEFORE_RESUME = re.compile(r"^(progress|monitor)\.before_resume_at_\d+\.csv$")


def checkpoint_run_dir(file: str) -> str:
    """The run directory a checkpoint file belongs to: the folder above ``checkpoints/``, else its own folder."""
    folder = os.path.dirname(os.path.abspath(file))
    return os.path.dirname(folder) if os.path.basename(folder) == CHECKPOINT_DIR else folder


def checkpoint_step(file: str) -> Optional[int]:
    """The step count in a checkpoint's name, or None for a file of another name."""
    found = re.match(r"^checkpoint_(\d+)\.pt$", os.path.basename(file))
    return None if found is None else int(found.group(1))


def newer_checkpoints(file: str, steps: int) -> list[str]:
    """The checkpoints of ``file``'s run directory written after ``steps``, oldest first."""
    directory = os.path.join(checkpoint_run_dir(file), CHECKPOINT_DIR)
    return [p for p in list_checkpoints(directory) if (checkpoint_step(p) or 0) > steps]


def branch_dir(run_dir: str, steps: int) -> str:
    """``run_dir/branches/from_<steps>``, or ``..._2``, ``..._3``... when that exists already."""
    base = os.path.join(run_dir, BRANCHES, f"from_{steps}")
    path, n = base, 1
    while os.path.exists(path):
        n += 1
        path = f"{base}_{n}"
    return path


def lock_holder(run_dir: str) -> Optional[str]:
    """Who holds ``run_dir``'s lock (``"pid 1234"``), or None when no run holds it. Writes nothing."""
    path = os.path.join(run_dir, LOCK_FILE)
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        pid = os.pread(fd, 32, 0).decode(errors="replace").strip()
        return f"pid {pid}" if pid.isdigit() else "a run that has not written its pid yet"
    finally:
        os.close(fd)  # closing the descriptor drops the shared lock taken to look
    return None


def earlier_run(run_dir: str) -> list[str]:
    """What ``run_dir`` holds besides its lock file (empty: a new run may start in it)."""
    if not os.path.isdir(run_dir):
        return []
    return sorted(name for name in os.listdir(run_dir) if name != LOCK_FILE)


def run_dir_problems(cfg: Any, resumed: Optional[tuple[str, dict[str, Any]]], need_bytes: int) -> list[str]:
    """What keeps the run from owning ``cfg.run_dir`` (``runs/`` when it is not set yet): the path, its
    free space (``need_bytes``: a checkpoint), another run holding it, an earlier run in it."""
    run_dir = cfg.run_dir or "runs"
    problem = output_problem("run_dir", run_dir, directory=True, need_bytes=need_bytes)
    if problem or not cfg.run_dir:
        return [problem] if problem else []
    holder = lock_holder(run_dir)
    if holder is not None:
        return [f"run_dir={run_dir!r}: in use by another run ({holder}, holding {os.path.join(run_dir, LOCK_FILE)}); "
                "wait for it to end, or choose another --run_dir"]
    found = earlier_run(run_dir)
    if resumed is not None and os.path.realpath(run_dir) == os.path.realpath(checkpoint_run_dir(resumed[0])):
        newer = newer_checkpoints(resumed[0], int(resumed[1]["num_timesteps"]))
        if newer and os.path.isfile(cfg.resume):
            return [f"run_dir={run_dir!r}: holds checkpoints newer than the one resumed ({', '.join(map(os.path.basename, newer))}), "
                    f"which continuing in it would rotate away: leave --run_dir out to branch into "
                    f"{branch_dir(run_dir, int(resumed[1]['num_timesteps']))}, or choose another --run_dir"]
        return []
    if found and not cfg.overwrite and cfg.resume is None:
        shown = ", ".join(found[:4]) + (", ..." if len(found) > 4 else "")
        return [f"run_dir={run_dir!r}: holds an earlier run ({shown}); pass --resume {run_dir} to continue it, "
                "--overwrite True to replace it, or choose another --run_dir"]
    if found and not cfg.overwrite and cfg.resume is not None and resumed is not None:
        return [f"run_dir={run_dir!r}: holds another run than the one resumed ({checkpoint_run_dir(resumed[0])}); "
                "choose a new --run_dir for the resumed run, or --overwrite True to replace this one"]
    return []


class RunDirLock:
    """The exclusive lock on a run directory, held by this process until :meth:`release` (or its exit)."""

    def __init__(self, run_dir: str, fd: int):
        self.run_dir, self.fd = run_dir, fd

    def release(self) -> None:
        if self.fd >= 0:
            os.ftruncate(self.fd, 0)
            fcntl.flock(self.fd, fcntl.LOCK_UN)
            os.close(self.fd)
            self.fd = -1


def lock(run_dir: str, fresh: bool) -> RunDirLock:
    """Create ``run_dir`` (``fresh``: it must not exist yet: a default or branch directory another run
    may pick at the same moment) and take its lock; :class:`ConfigError` names the holder when another
    run has it."""
    if fresh:
        os.makedirs(os.path.dirname(os.path.abspath(run_dir)), exist_ok=True)
        try:
            os.mkdir(run_dir)
        except FileExistsError:
            raise ConfigError([f"run_dir={run_dir!r}: created by another run a moment ago; start again"]) from None
    else:
        os.makedirs(run_dir, exist_ok=True)
    fd = os.open(os.path.join(run_dir, LOCK_FILE), os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        pid = os.pread(fd, 32, 0).decode(errors="replace").strip()
        os.close(fd)
        raise ConfigError([f"run_dir={run_dir!r}: in use by another run (pid {pid or 'not written yet'}, holding "
                           f"{os.path.join(run_dir, LOCK_FILE)}); wait for it to end, or choose another --run_dir"]) from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return RunDirLock(run_dir, fd)


def claim(cfg: Any, resumed: Optional[tuple[str, dict[str, Any]]], fresh: bool, log: TextIO = sys.stderr) -> RunDirLock:
    """Take ``cfg.run_dir`` for this run (its checks passed, its model built): lock it, then make it
    what the run continues from. ``--overwrite True`` removes an earlier run's files (:data:`RUN_ENTRIES`,
    nothing else); a run resumed in place renames the checkpoints newer than the one it resumed (they
    failed to load: ``*.corrupt``, kept for inspection) and keeps ``progress.csv`` rows logged after
    its checkpoint in ``progress.before_resume_at_<steps>.csv``. Raises :class:`ConfigError` when
    another run took the directory since it was checked."""
    run_dir = cfg.run_dir
    held = lock(run_dir, fresh)
    try:
        found = earlier_run(run_dir)
        in_place = resumed is not None and os.path.realpath(run_dir) == os.path.realpath(checkpoint_run_dir(resumed[0]))
        if found and cfg.overwrite and not in_place:
            for name in found:
                if name in RUN_ENTRIES or _BEFORE_RESUME.match(name):
                    path = os.path.join(run_dir, name)
                    shutil.rmtree(path) if os.path.isdir(path) and not os.path.islink(path) else os.unlink(path)
            print(f"--overwrite True: removed the earlier run's files from {run_dir}", file=log, flush=True)
        elif found and not in_place and cfg.resume is None:
            raise ConfigError([f"run_dir={run_dir!r}: another run wrote into it since it was checked ({', '.join(found[:4])}); "
                               "choose another --run_dir"])
        if in_place:
            steps = int(resumed[1]["num_timesteps"])  # type: ignore[index]
            for path in newer_checkpoints(resumed[0], steps):  # type: ignore[index]
                os.replace(path, path + ".corrupt")
                print(f"renamed {os.path.basename(path)} to {os.path.basename(path)}.corrupt: it cannot be loaded "
                      "(kept for inspection, out of the rotation)", file=log, flush=True)
    except BaseException:
        held.release()
        raise
    return held


def progress_rows_after(path: str, steps: int) -> bool:
    """True if ``path`` (a ``progress.csv``) has rows logged after ``steps``."""
    if not os.path.isfile(path):
        return False
    with open(path, newline="") as f:
        return any(row.get("step") and float(row["step"]) > steps for row in csv.DictReader(f))


def keep_progress_after(run_dir: str, steps: int, log: TextIO = sys.stderr) -> Optional[str]:
    """A run resumed at ``steps`` in ``run_dir`` continues its ``progress.csv`` from that step; rows logged
    after it (by a run that went on past its last checkpoint) are first copied to
    ``progress.before_resume_at_<steps>.csv``. Returns that file, or None when there were none."""
    path = os.path.join(run_dir, PROGRESS)
    if not progress_rows_after(path, steps):
        return None
    kept = os.path.join(run_dir, f"progress.before_resume_at_{steps}.csv")
    shutil.copyfile(path, kept)
    print(f"{path} has rows after step {steps}, where this run resumes: the file as it was is kept as {kept}", file=log, flush=True)
    return kept

