"""A run's ``monitor.csv``: its training episodes as sb3's ``Monitor`` writes them, for the tools that read them.

sb3's ``results_plotter.load_results`` and rl-zoo's ``plots/plot_train.py`` read ``*monitor.csv`` in a folder:
a first line ``#{"t_start": <time.time()>, "env_id": "<gymnasium id>"}`` (``Monitor``'s ``ResultsWriter``),
then a CSV of ``r,l,t`` and the ``--info_keywords`` columns, one row per episode: its return (rounded to 6
decimals), its length and the seconds since ``t_start`` when it ended. ``load_results(RUN_DIR)`` reads a run
directory as it reads one of rl-zoo's log folders.

sb3's ``make_vec_env`` writes one file per env (``<rank>.monitor.csv``); here the main process reads every
env's episode ends, in env order at each step, so the run writes one file in that order: what
``load_results`` makes of per-env files (it concatenates them and sorts the rows by time).

The file follows the run directory's rules (``ppo_dict.run.run_dir``): written by the run that owns the
directory, created and rewritten atomically, and rows appended after each update, before any checkpoint
of that update, so that a checkpoint's episode count (``EpisodeLog.total``) says which rows it had. A run
resumed in place keeps the rows up to its checkpoint (those written after it go to
``monitor.before_resume_at_<steps>.csv`` first, as ``progress.csv``'s do); a branch starts with them.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import time
from typing import Any, Optional, Sequence, TextIO

from ppo_dict.core import bounded
from ppo_dict.core.files import append_text, atomic_write
from ppo_dict.core.logger import STDERR
from ppo_dict.core.reading import entry_kind, open_regular
from ppo_dict.data.episodes import EpisodeLog

MONITOR = "monitor.csv"
#: Monitor's own columns (``ResultsWriter``'s fieldnames before the info keywords)
COLUMNS = ("r", "l", "t")


def before_resume_name(steps: int) -> str:
    """Where a run resumed at ``steps`` in place keeps the rows written after its checkpoint (not ``*monitor.csv``:
    ``load_results`` does not read it as part of the run)."""
    return f"monitor.before_resume_at_{steps}.csv"


#: the longest first line (``#{"t_start": ..., "env_id": ...}``) read: Monitor writes a few dozen characters
MAX_HEADER = 2**16
#: the most bytes of a monitor.csv a resumed run continues (an episode is a line of a few dozen bytes: tens of millions)
MAX_MONITOR_BYTES = 2**30


def read_monitor(path: str) -> tuple[dict[str, Any], list[str]]:
    """:func:`read_monitor_text`, a file that is not UTF-8 text said so, naming it."""
    try:
        return read_monitor_text(path)
    except UnicodeDecodeError as exc:
        raise ValueError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start} of a read)") from None


def read_monitor_text(path: str) -> tuple[dict[str, Any], list[str]]:
    """``(header, lines)``: a monitor file's first-line JSON and its CSV lines (column names first), read bounded
    (:mod:`ppo_dict.core.bounded`) and checked whole: a JSON object whose ``t_start`` is a finite number (and
    ``env_id`` text), then a table whose rows are as wide as its columns and whose ``r``, ``l``, ``t`` are numbers.
    ``ValueError`` (an ``OSError`` for a file that is not read) names the file, the line and what is wrong."""
    with open_regular(path, follow=False) as raw:  # the run's own file: never read through a link, nor a FIFO waited on
        size = os.fstat(raw.fileno()).st_size
        if size > MAX_MONITOR_BYTES:
            raise ValueError(f"{path}: {size:,} bytes; a monitor.csv ppo_dict continues holds at most {MAX_MONITOR_BYTES:,}")
        f = io.TextIOWrapper(raw, encoding="utf-8", newline="")
        first = f.readline(MAX_HEADER + 1)
        if not first.startswith("#") or len(first) > MAX_HEADER:
            raise ValueError(
                f"{path}: not a monitor file (its first line is not #{{...}} of at most {MAX_HEADER:,} characters)"
            )
        header = bounded.loads(first[1:], f"{path}: line 1")
        start = header.get("t_start") if isinstance(header, dict) else None
        if not (isinstance(start, (int, float)) and not isinstance(start, bool) and math.isfinite(start)):
            raise ValueError(
                f"{path}: line 1 is not Monitor's header (a JSON object whose t_start is a time, not {start!r:.40})"
            )
        if not isinstance(header.get("env_id", ""), str):
            raise ValueError(f"{path}: line 1: its env_id is not text")
        lines, columns = [], []
        for n, cells in bounded.table(f, path, first=2):
            bad = columns and next((c for c, v in zip(columns, cells) if c in COLUMNS and bounded.number(v) is None), None)
            columns = columns or cells
            if bad:
                raise ValueError(f"{path}: line {n}: its {bad} is not a number")
            lines.append(cells)
    return header, [_csv_line(cells) for cells in lines]


def _csv_line(cells: list[str]) -> str:
    """A row as csv writes it, with Monitor's line end."""
    buffer = io.StringIO()
    csv.writer(buffer, lineterminator="\n").writerow(cells)
    return buffer.getvalue()


class MonitorFile:
    """``RUN_DIR/monitor.csv``, fed by ``episodes`` (:attr:`EpisodeLog.ended`) and written by :meth:`flush`.

    ``resume``: ``(steps, checkpoint's run directory)`` of a resumed run (None: a new run). Its rows up to
    the checkpoint's episode count are kept (copied from that run directory's file into a branch).
    """

    def __init__(
        self,
        run_dir: str,
        env_id: str,
        info_keywords: Sequence[str],
        episodes: EpisodeLog,
        resume: Optional[tuple[int, str]] = None,
        log: TextIO = STDERR,
    ):
        self.path, self.keys = os.path.join(run_dir, MONITOR), (*COLUMNS, *info_keywords)
        self.episodes = episodes
        header: dict[str, Any] = {"t_start": time.time(), "env_id": env_id}
        lines = [",".join(self.keys) + "\n"]
        source = None if resume is None or resume[1] is None else os.path.join(resume[1], MONITOR)
        if source is not None and entry_kind(source):
            try:
                header, found = read_monitor(source)
            except (OSError, ValueError, UnicodeDecodeError) as exc:
                print(f"warning: {exc}; the resumed run starts a new {MONITOR}", file=log, flush=True)
            else:
                lines = self._kept(header, found, source, resume[0], log)  # type: ignore[index]
        self.t_start = float(header.get("t_start", time.time()))
        atomic_write(self.path, lambda f: f.write(f"#{json.dumps(header)}\n" + "".join(lines)), mode="w")
        episodes.ended = []

    def _kept(self, header: dict[str, Any], found: list[str], source: str, steps: int, log: TextIO) -> list[str]:
        """The lines of ``source`` a run resumed at ``steps`` keeps: its columns and the rows its checkpoint
        counted (all of them where the checkpoint did not count: one written before the count was kept)."""
        total = self.episodes.total
        same_columns = bool(found) and found[0].strip() == ",".join(self.keys)  # else other info keywords: a new file
        kept = (found if total is None else found[: 1 + total]) if same_columns else [",".join(self.keys) + "\n"]
        if len(kept) < len(found) and source == self.path:
            later = os.path.join(os.path.dirname(self.path), before_resume_name(steps))
            atomic_write(later, lambda f: f.write("".join(["#", json.dumps(header), "\n", *found])), mode="w")
            print(
                f"{source} has episodes after step {steps}, where this run resumes: the file as it was is kept as {later}",
                file=log,
                flush=True,
            )
        return kept

    def flush(self) -> None:
        """Append the episodes recorded since the last flush (after each update, before its checkpoint)."""
        ended, self.episodes.ended = self.episodes.ended or [], []
        if not ended:
            return
        buffer = io.StringIO()
        writer = csv.DictWriter(buffer, fieldnames=self.keys, extrasaction="ignore", lineterminator="\n")
        for episode, at in ended:  # as Monitor.step: r and l as recorded, t rounded to 6 decimals
            writer.writerow({**episode, "t": round(at - self.t_start, 6)})
        append_text(self.path, buffer.getvalue())

    def close(self) -> None:
        """Stop recording; episodes not flushed (a rollout a stop dropped, which no checkpoint holds) are not written."""
        self.episodes.ended = None
