"""CPUs busy with other work: how much of this process's CPUs other processes use, measured rather than assumed.

The affinity mask says which CPUs a run may use, not whether anything else uses them. On a shared machine
(two CPU burners beside a 2-CPU run) a layout of one process per CPU, waits that look before they sleep and an
update on every core all lose: each hand-over waits for a CPU that another process holds, and a look takes a
CPU that work needs. So a run looks: from ``/proc/stat``, every CPU's busy time over an interval, less the CPU
time of the run's own processes (``/proc/<pid>/stat``), is the other processes' use, in CPUs
(:class:`LoadWatch`). At start (:func:`busy_at_start`, once per process, over :data:`START_LOOK` seconds) it
decides the layout (:func:`available_cpus`) and whether waits look; while running, each update looks again
(the update's threads, the waits).

Where ``/proc/stat`` cannot be read (not Linux), nothing is busy elsewhere: the affinity mask decides, as before.
"""
from __future__ import annotations

import os
import time
from typing import Iterable, Optional

from ppo_dict.core.machine import _read, cpu_budget, stat_fields

#: Seconds the start looks at the CPUs.
START_LOOK = 0.2
#: CPUs busy elsewhere from which a run takes them as taken (below: noise, a daemon waking up).
BUSY = 0.5

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
        return max(0.0, (busy - last[0] - (mine - last[2])) / elapsed)


def busy_elsewhere(interval: float = START_LOOK) -> float:
    """CPUs of this process's affinity mask that other processes keep busy, over ``interval`` seconds now."""
    watch = LoadWatch()
    watch.look()
    time.sleep(interval)
    return watch.look() or 0.0


def busy_at_start() -> float:
    """:func:`busy_elsewhere`, measured once per process (the first ask): what the layout and the waits are planned by."""
    global _at_start
    if _at_start is None:
        _at_start = busy_elsewhere()
    return _at_start


def available_cpus() -> tuple[int, str]:
    """:func:`~ppo_dict.core.machine.cpu_budget` less the CPUs busy with other work at start (at least one), and why."""
    count, source = cpu_budget()
    busy = busy_at_start()
    if busy < BUSY:
        return count, source
    return max(1, count - round(busy)), f"{source}; {busy:.1f} busy with other work"
