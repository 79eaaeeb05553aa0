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
* **Its own files, never a way out**: a lock that is no lock file ppo_dict wrote (a link, a FIFO, a
  folder, a file of other content or links) is refused and left alone; continuing in place, each of
  the run's names that is a link, a FIFO, a device or a folder where a file goes is refused
  (:func:`entry_problems`, at ``--dry_run`` too, and again once locked), and what it reads of its run
  (``progress.csv``, ``evaluations.npz``) is read whole first. A checkpoint outside a run directory
  (:func:`checkpoint_run_dir`: None) continues in a new one.
* **Resuming from an older checkpoint branches**: when the run directory holds checkpoints newer
  than the one resumed, the resumed run writes a new run directory
  ``RUN_DIR/branches/from_<steps>`` (``_2``, ``_3``... for the next ones), whose ``progress.csv``
  starts with the run's rows up to ``<steps>``; nothing of the run itself is changed or deleted.
"""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import stat
import time
from typing import Any, Optional, TextIO

from ppo_dict.core.config import Config
from ppo_dict.core.errors import ConfigError
from ppo_dict.core.files import atomic_write, output_problem
from ppo_dict.core.logger import STDERR
from ppo_dict.core.reading import entry_kind, kind_of, open_regular
from ppo_dict.run.checkpoint import BEST_MODEL, CHECKPOINT_DIR, Resumed, list_checkpoints
from ppo_dict.run.monitor_csv import MONITOR
from ppo_dict.run.run_files import read_progress, resumed_file_problems
from ppo_dict.run.tracking import STEP

LOCK_FILE = ".lock"
BRANCHES = "branches"
PROGRESS = "progress.csv"
CONFIG = "config.json"
#: What a run writes into its directory: what ``--overwrite True`` removes (and nothing else).
RUN_ENTRIES = (
    CONFIG,
    PROGRESS,
    MONITOR,
    CHECKPOINT_DIR,
    "evaluations.npz",
    BEST_MODEL,
    "videos",
    "learning_curve.png",
    "wandb_run_id",
    "wandb",
    BRANCHES,
)
_BEFORE_RESUME = re.compile(r"^(progress|monitor)\.before_resume_at_\d+\.csv$")


def checkpoint_run_dir(file: str) -> Optional[str]:
    """The ppo_dict run directory a checkpoint file belongs to: the folder above its ``checkpoints/``, when that
    folder holds the run's ``config.json`` (a run writes it before its first checkpoint); None for a file
    anywhere else (a download, a copy), whose folder is no run's to continue."""
    folder = os.path.dirname(os.path.abspath(file))
    run_dir = os.path.dirname(folder)
    if os.path.basename(folder) == CHECKPOINT_DIR and entry_kind(os.path.join(run_dir, CONFIG)) == "a regular file":
        return run_dir
    return None


def checkpoint_step(file: str) -> Optional[int]:
    """The step count in a checkpoint's name, or None for a file of another name."""
    found = re.match(r"^checkpoint_(\d+)\.pt$", os.path.basename(file))
    return None if found is None else int(found.group(1))


def newer_checkpoints(run_dir: Optional[str], steps: int) -> list[str]:
    """The checkpoints of ``run_dir`` written after ``steps``, oldest first (none without a run directory)."""
    if run_dir is None:
        return []
    directory = os.path.join(run_dir, CHECKPOINT_DIR)
    return [p for p in list_checkpoints(directory) if (checkpoint_step(p) or 0) > steps]


def branch_dir(run_dir: str, steps: int) -> str:
    """``run_dir/branches/from_<steps>``, or ``..._2``, ``..._3``... when that exists already."""
    base = os.path.join(run_dir, BRANCHES, f"from_{steps}")
    path, n = base, 1
    while os.path.lexists(path):  # a dangling link counts: mkdir cannot create a folder there either
        n += 1
        path = f"{base}_{n}"
    return path


def lock_holder(run_dir: str) -> Optional[str]:
    """Who holds ``run_dir``'s lock (``"pid 1234"``), or None when no run holds it (or its lock is no lock file:
    :func:`entry_problems` says so). Writes nothing, waits on nothing."""
    path = os.path.join(run_dir, LOCK_FILE)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        pid = os.pread(fd, 32, 0).decode(errors="replace").strip()
        return f"pid {pid}" if pid.isdigit() else "a run that has not written its pid yet"
    finally:
        os.close(fd)  # closing the descriptor drops the shared lock taken to look
    return None


#: the run's own files and folders (besides checkpoints): each must be what the run writes there, never a link out of it
RUN_FILES = (LOCK_FILE, CONFIG, PROGRESS, MONITOR, "evaluations.npz", BEST_MODEL, "learning_curve.png", "wandb_run_id")
RUN_FOLDERS = (CHECKPOINT_DIR, "videos", "wandb", BRANCHES)
#: the most a lock file holds: the pid a run wrote, and a newline
LOCK_BYTES = 32


def lock_file_problem(path: str, fd: Optional[int] = None) -> str:
    """Why ``path`` (a ``.lock``) is not a lock file ppo_dict wrote, which a run may empty and write its pid into:
    a regular file of one link (not a link to another file), holding nothing or a pid; ``""`` when it is one.
    ``fd``: the file open already (as the lock is taken), else it is looked at without following a link."""
    info = os.fstat(fd) if fd is not None else os.lstat(path)
    if not stat.S_ISREG(info.st_mode):
        return f"{path} is {kind_of(info.st_mode)}, not the lock file a run writes"
    if info.st_nlink != 1 or info.st_size > LOCK_BYTES:
        return (
            f"{path} is not the lock file a run writes ({info.st_size} bytes, {info.st_nlink} links): ppo_dict empties "
            f"it, so it is left alone"
        )
    if fd is None:
        with open_regular(path, follow=False) as f:
            text = f.read(LOCK_BYTES + 1)
    else:
        text = os.pread(fd, LOCK_BYTES + 1, 0)
    if text.strip() and not text.strip().isdigit():
        return f"{path} is not the lock file a run writes (it holds {text[:20]!r}): ppo_dict empties it, so it is left alone"
    return ""


def entry_problems(run_dir: str, whole: bool) -> list[str]:
    """What in ``run_dir`` a run could not write as its own, at the names the run reads and writes: a lock that is
    no lock file, and (``whole``: the run continues in the directory) a symbolic link, FIFO, device or directory
    where the run has a file, and anything but a folder where it has one (a link would lead its writes out)."""
    if entry_kind(run_dir) != "a directory":
        return []
    found = []
    lock = os.path.join(run_dir, LOCK_FILE)
    if entry_kind(lock):
        found.append(lock_file_problem(lock))
    if whole:
        checkpoints = os.path.join(run_dir, CHECKPOINT_DIR)
        names = [n for n in os.listdir(run_dir) if n in RUN_FILES[1:] or _BEFORE_RESUME.match(n)]
        files = [os.path.join(run_dir, n) for n in names] + (
            [os.path.join(checkpoints, n) for n in os.listdir(checkpoints) if checkpoint_step(n) is not None]
            if entry_kind(checkpoints) == "a directory"
            else []
        )
        found += [
            f"{path} is {entry_kind(path)}, where the run writes a file of its own"
            for path in sorted(files)
            if entry_kind(path) != "a regular file"
        ]
        found += [
            f"{os.path.join(run_dir, n)} is {entry_kind(os.path.join(run_dir, n))}, where the run writes a folder of its own"
            for n in RUN_FOLDERS
            if entry_kind(os.path.join(run_dir, n)) not in ("", "a directory")
        ]
    return [f"run_dir={run_dir!r}: {p}; remove it, or choose another --run_dir" for p in found if p]


def earlier_run(run_dir: str) -> list[str]:
    """What ``run_dir`` holds besides its lock file (empty: a new run may start in it)."""
    if not os.path.isdir(run_dir):
        return []
    return sorted(name for name in os.listdir(run_dir) if name != LOCK_FILE)


def resumed_home(run_dir: str, resumed: Optional[Resumed]) -> tuple[Optional[str], bool]:
    """``(the run directory the resumed checkpoint belongs to, or None; whether the run continues in it as run_dir)``."""
    home = None if resumed is None else resumed.home
    return home, home is not None and os.path.realpath(run_dir) == os.path.realpath(home)


def branch_problems(run_dir: str, home: str) -> list[str]:
    """A branch ``home/branches/from_<steps>`` is created in ``home``'s own ``branches/`` folder: refused where
    that is no folder (a link would lead the branch out of the run)."""
    branches = os.path.join(home, BRANCHES)
    if os.path.dirname(os.path.abspath(run_dir)) != os.path.abspath(branches) or entry_kind(branches) in ("", "a directory"):
        return []
    return [f"run_dir={run_dir!r}: {branches} is {entry_kind(branches)}, where the run writes a folder of its own; remove it"]


def run_dir_problems(cfg: Any, resumed: Optional[Resumed], need_bytes: int) -> list[str]:
    """What keeps the run from owning ``cfg.run_dir`` (``runs/`` when it is not set yet): the path, its
    free space (``need_bytes``: a checkpoint), another run holding it, an earlier run in it."""
    run_dir = cfg.run_dir or "runs"
    problem = output_problem("run_dir", run_dir, directory=True, need_bytes=need_bytes)
    if problem or not cfg.run_dir:
        return [problem] if problem else []
    holder = lock_holder(run_dir)
    if holder is not None:
        return [
            f"run_dir={run_dir!r}: in use by another run ({holder}, holding {os.path.join(run_dir, LOCK_FILE)}); "
            "wait for it to end, or choose another --run_dir"
        ]
    home, in_place = resumed_home(run_dir, resumed)
    entries = entry_problems(run_dir, whole=in_place) + ([] if home is None else branch_problems(run_dir, home))
    if entries:
        return entries
    if home is not None:  # what the resumed run reads of its run before it writes: read now, whole
        entries = resumed_file_problems(cfg, home, in_place)
        if entries:
            return entries
    found = earlier_run(run_dir)
    if in_place:
        newer = newer_checkpoints(home, resumed.steps)  # type: ignore[union-attr]  (in place: resumed is set)
        if newer and os.path.isfile(cfg.resume):
            return [
                f"run_dir={run_dir!r}: holds checkpoints newer than the one resumed "
                f"({', '.join(map(os.path.basename, newer))}), which continuing in it would rotate away: leave --run_dir "
                f"out to branch into {branch_dir(run_dir, resumed.steps)}, or choose another --run_dir"
            ]
        return []
    if found and not cfg.overwrite and cfg.resume is None:
        shown = ", ".join(found[:4]) + (", ..." if len(found) > 4 else "")
        return [
            f"run_dir={run_dir!r}: holds an earlier run ({shown}); pass --resume {run_dir} to continue it, "
            "--overwrite True to replace it, or choose another --run_dir"
        ]
    if found and not cfg.overwrite and cfg.resume is not None and resumed is not None:
        return [
            f"run_dir={run_dir!r}: holds another run than the one resumed ({home or resumed.file}); "
            "choose a new --run_dir for the resumed run, or --overwrite True to replace this one"
        ]
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


def open_lock_file(run_dir: str) -> int:
    """``run_dir/.lock`` opened for reading and writing: created now, or one a run wrote (:func:`lock_file_problem`),
    never through a symbolic link nor waiting on a FIFO: what is emptied and written is always a lock file."""
    path, flags = os.path.join(run_dir, LOCK_FILE), os.O_RDWR | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        return os.open(path, flags | os.O_CREAT | os.O_EXCL, 0o666)
    except FileExistsError:
        pass
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        raise ConfigError(
            [
                f"run_dir={run_dir!r}: {path} is {entry_kind(path) or 'gone'}, not the lock file a run writes "
                f"({exc.strerror}); remove it, or choose another --run_dir"
            ]
        ) from None
    problem = lock_file_problem(path, fd)
    if problem:
        os.close(fd)
        raise ConfigError([f"run_dir={run_dir!r}: {problem}; remove it, or choose another --run_dir"])
    return fd


def lock(run_dir: str, fresh: bool) -> RunDirLock:
    """Create ``run_dir`` (``fresh``: it must not exist yet: a default or branch directory another run
    may pick at the same moment) and take its lock; :class:`ConfigError` names the holder when another
    run has it."""
    if fresh:
        os.makedirs(os.path.dirname(os.path.abspath(run_dir)), exist_ok=True)
        try:
            os.mkdir(run_dir)
        except FileExistsError:
            kind = entry_kind(run_dir)
            raise ConfigError(
                [
                    f"run_dir={run_dir!r}: created by another run a moment ago; start again"
                    if kind == "a directory"
                    else f"run_dir={run_dir!r}: is {kind}, where the run creates its folder; remove it, or "
                    f"choose another --run_dir"
                ]
            ) from None
    else:
        os.makedirs(run_dir, exist_ok=True)
    fd = open_lock_file(run_dir)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        pid = os.pread(fd, 32, 0).decode(errors="replace").strip()
        os.close(fd)
        raise ConfigError(
            [
                f"run_dir={run_dir!r}: in use by another run (pid {pid or 'not written yet'}, holding "
                f"{os.path.join(run_dir, LOCK_FILE)}); wait for it to end, or choose another --run_dir"
            ]
        ) from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return RunDirLock(run_dir, fd)


def claim(cfg: Any, resumed: Optional[Resumed], fresh: bool, log: TextIO = STDERR) -> RunDirLock:
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
        home, in_place = resumed_home(run_dir, resumed)
        changed = entry_problems(run_dir, whole=in_place)  # as checked, unless changed since: then nothing is written
        if changed:
            raise ConfigError(changed)
        if found and cfg.overwrite and not in_place:
            for name in found:
                if name in RUN_ENTRIES or _BEFORE_RESUME.match(name):
                    path = os.path.join(run_dir, name)
                    shutil.rmtree(path) if os.path.isdir(path) and not os.path.islink(path) else os.unlink(path)
            print(f"--overwrite True: removed the earlier run's files from {run_dir}", file=log, flush=True)
        elif found and not in_place and cfg.resume is None:
            raise ConfigError(
                [
                    f"run_dir={run_dir!r}: another run wrote into it since it was checked "
                    f"({', '.join(found[:4])}); choose another --run_dir"
                ]
            )
        if in_place:
            for path in newer_checkpoints(home, resumed.steps):  # type: ignore[union-attr]  (in place: resumed is set)
                os.replace(path, path + ".corrupt")
                print(
                    f"renamed {os.path.basename(path)} to {os.path.basename(path)}.corrupt: it cannot be loaded "
                    "(kept for inspection, out of the rotation)",
                    file=log,
                    flush=True,
                )
    except BaseException:
        held.release()
        raise
    return held


def keep_progress_after(run_dir: str, steps: int, log: TextIO = STDERR) -> Optional[str]:
    """A run resumed at ``steps`` in ``run_dir`` continues its ``progress.csv`` from that step; rows logged
    after it (by a run that went on past its last checkpoint) are first copied to
    ``progress.before_resume_at_<steps>.csv`` (read and written without following a link). Returns that
    file, or None when there were none."""
    path = os.path.join(run_dir, PROGRESS)
    if not entry_kind(path):
        return None
    if not any(row[STEP] > steps for row in read_progress(path)):
        return None
    with open_regular(path, follow=False) as f:  # read as checked (bounded) just above
        logged = f.read()
    kept = os.path.join(run_dir, f"progress.before_resume_at_{steps}.csv")
    atomic_write(kept, lambda f: f.write(logged))
    print(
        f"{path} has rows after step {steps}, where this run resumes: the file as it was is kept as {kept}",
        file=log,
        flush=True,
    )
    return kept


def default_run_dir(cfg: Config, root: str = "runs") -> str:
    """``runs/<env>__<seed>__<YYYYmmdd-HHMMSS>``, with ``_2``, ``_3``... if that exists already."""
    base = os.path.join(root, f"{cfg.env}__{cfg.seed}__{time.strftime('%Y%m%d-%H%M%S')}")
    path, n = base, 1
    while os.path.exists(path):
        n += 1
        path = f"{base}_{n}"
    return path
