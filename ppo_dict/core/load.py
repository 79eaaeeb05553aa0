"""CPUs busy with other work: how much of this process's CPUs other processes use, measured rather than assumed.

The affinity mask says which CPUs a run may use, not whether anything else uses them. On a shared machine
(two CPU burners beside a 2-CPU run) a layout of one process per CPU, waits that look before they sleep and an
update on every core all lose: each hand-over waits for a CPU that another process holds, and a look takes a
CPU that work needs. So a run looks: from ``/proc/stat``, every CPU's busy time over an interval, less the CPU
time of the run's own processes (``/proc/<pid>/stat``), is the other processes' use, in CPUs
(:class:`LoadWatch`). At start (:func:`busy_at_start`, once per process) it decides the layout
(:func:`available_cpus`) and whether waits look; while running, each update looks again (the update's threads,
the waits), and a run whose layout a load at start shaped says once when that load has gone (:meth:`LoadWatch.gone`).

The start tells a load that lasts from a blip (an install's, a compile's or another run's last moments): it looks
in :data:`START_PARTS` parts of :data:`START_PART` seconds and counts the least any part saw, the load that lasted
through the whole look. A part that finds the CPUs free ends the look: a quiet machine costs one part (what the
single look of earlier versions cost), a busy one at most :data:`START_PARTS` parts.

Where ``/proc/stat`` cannot be read (not Linux), nothing is busy elsewhere: the affinity mask decides, as before.
"""

from __future__ import annotations

import os
import time
from typing import Iterable, Optional

from ppo_dict.core.machine import _read, cpu_budget, stat_fields

#: Seconds of each part of the start's look at the CPUs, and the most parts it looks (while each finds them busy).
START_PART, START_PARTS = 0.2, 3
#: CPUs busy elsewhere from which a run takes them as taken (below: noise, a daemon waking up).
BUSY = 0.5
#: Looks in a row (one before each update) without a load after which the load that shaped a layout has gone.
GONE_AFTER = 3

_at_start: Optional[float] = None


def cpu_ticks(cpus: Optional[set[int]] = None) -> tuple[int, int]:
    """``(busy, total)`` clock ticks summed over ``cpus`` (None: every CPU) since boot (``/proc/stat``); ``(0, 0)`` unread."""
    busy = total = 0
    for line in (_read("/proc/stat") or "").splitlines():
        name, *values = line.split()
        if not name.startswith("cpu") or name == "cpu" or (cpus is not None and int(name[3:]) not in cpus):
            continue
        ticks = [int(v) for v in values[:8]]  # user nice system idle iowait irq softirq steal
        total += sum(ticks)
        busy += sum(ticks) - ticks[3] - ticks[4]
    return busy, total


def process_ticks(pids: Iterable[int]) -> int:
    """User and system clock ticks of the processes ``pids`` (those gone count nothing)."""
    ticks = 0
    for pid in pids:
        fields = stat_fields(pid)
        if fields is not None:
            ticks += int(fields[11]) + int(fields[12])  # utime, stime
    return ticks


class LoadWatch:
    """Other processes' use of this process's CPUs between two :meth:`look` calls, in CPUs."""

    def __init__(self) -> None:
        self.cpus = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
        self._last: Optional[tuple[int, int, int]] = None
        self.quiet = 0  # the last looks in a row that found less than BUSY (a look that measured nothing counts none)
        self.gone_said = False

    def look(self, own: Iterable[int] = ()) -> Optional[float]:
        """CPUs the other processes kept busy since the last look (None at the first, and where unread): every
        CPU's busy time less the CPU time of this process and of ``own`` (its workers)."""
        busy, total = cpu_ticks(self.cpus)
        mine = process_ticks([os.getpid(), *own])
        last, self._last = self._last, (busy, total, mine)
        if last is None or total <= last[1]:
            return None
        cpus = len(self.cpus) if self.cpus else 1
        elapsed = (total - last[1]) / cpus  # ticks of one CPU
        others = max(0.0, (busy - last[0] - (mine - last[2])) / elapsed)
        self.quiet = self.quiet + 1 if others < BUSY else 0
        return others

    def gone(self) -> bool:
        """Whether the load the start found (:func:`busy_at_start`; a start that did not look found none) has gone: the last
        :data:`GONE_AFTER` looks found less than :data:`BUSY`. True once per watch (a load that comes back and goes again
        is not said twice)."""
        if self.gone_said or self.quiet < GONE_AFTER or (_at_start or 0.0) < BUSY:
            return False
        self.gone_said = True
        return True


def busy_elsewhere(interval: float = START_PART) -> float:
    """CPUs of this process's affinity mask that other processes keep busy, over ``interval`` seconds now."""
    watch = LoadWatch()
    watch.look()
    time.sleep(interval)
    return watch.look() or 0.0


def look_at_start(part: float = START_PART, parts: int = START_PARTS) -> list[float]:
    """CPUs other processes kept busy in each part of a look of up to ``parts`` parts of ``part`` seconds, in order;
    the look ends at the first part that finds less than :data:`BUSY` (so a quiet machine costs one part)."""
    watch, seen = LoadWatch(), []
    watch.look()
    while len(seen) < parts and (not seen or seen[-1] >= BUSY):
        time.sleep(part)
        seen.append(watch.look() or 0.0)
    return seen


def busy_at_start() -> float:
    """The load that lasted through the start's look (:func:`look_at_start`: the least of its parts), measured once
    per process (the first ask): what the layout and the waits are planned by."""
    global _at_start
    if _at_start is None:
        _at_start = min(look_at_start())
    return _at_start


def available_cpus() -> tuple[int, str]:
    """:func:`~ppo_dict.core.machine.cpu_budget` less the CPUs busy with other work at start (at least one), and why."""
    count, source = cpu_budget()
    busy = busy_at_start()
    if busy < BUSY:
        return count, source
    return max(1, count - round(busy)), f"{source}; {busy:.1f} busy with other work"
