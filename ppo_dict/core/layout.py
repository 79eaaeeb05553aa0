"""Which process steps which env columns: a run's layout, worked out once from its settings and the CPUs.

Every usable CPU steps envs by default (docs/speed.md, "Layouts"): the CPUs are those
of this process's affinity mask, at most its cgroup's CPU quota (:func:`~ppo_dict.core.machine.cpu_budget`), less
those other processes keep busy at start (:func:`~ppo_dict.core.load.available_cpus`: two CPU burners beside a
2-CPU run leave it one, and every env steps in this process, as sb3's DummyVecEnv steps them),
and any ``n_envs`` is split over them, unevenly where it does not divide (256 envs on 16 CPUs: 15
worker processes of 17 or 16 envs, and 9 in this process). Env i is env i wherever it steps (its
seed, its storage column), so no layout changes a number of the run.

The settings, and what each fixes (``num_workers`` counts this process's share as one, as the
pool always has: ``--num_workers 2`` is one worker process beside this one):

* ``num_workers 0``: every env in this process.
* nothing of the three: ``num_workers`` = the usable CPUs, one kept by this process (which runs
  the policy and steps a share, :func:`main_share`); all of them where this process steps no env
  (``--double_buffer``, ``--main_steps_envs False``). One env (or one Godot game) steps in this
  process: a worker would only make it wait.
* ``n_envs`` and ``num_workers``: the envs split over them as evenly as whole units allow, this
  process's share by :func:`main_share`.
* ``envs_per_worker``: equal shares, ``n_envs = num_workers x envs_per_worker`` (this process's
  one of them); with ``n_envs`` alone, ``num_workers = n_envs / envs_per_worker``.
* ``main_envs``: this process's share, the rest split over the worker processes.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Iterator, Optional, Sequence

from ppo_dict.core.load import GONE_AFTER, available_cpus

#: Envs this process's share gives up per worker process it commands (:func:`main_share`).
WAKE_COST_ENVS = 0.5


def size(columns: range) -> int:
    """``len(columns)``, past ``sys.maxsize`` too."""
    return max(0, columns.stop - columns.start)


@dataclass(frozen=True)
class Columns(Sequence[int]):
    """A worker process's env columns, in order: contiguous runs, held as ranges (one run; a
    double-buffered worker's: a part of each half)."""

    runs: tuple[range, ...]

    @property
    def count(self) -> int:
        """The columns (``len``, for counts past ``sys.maxsize``: a plan refused for its size)."""
        return sum(map(size, self.runs))

    def __len__(self) -> int:
        return self.count

    def __iter__(self) -> Iterator[int]:
        return itertools.chain.from_iterable(self.runs)

    def __contains__(self, column: object) -> bool:
        return any(column in run for run in self.runs)

    def __getitem__(self, index):  # type: ignore[override]
        if isinstance(index, slice):
            return tuple(self)[index]
        if index < 0:
            index += self.count
        for run in self.runs:
            if 0 <= index < size(run):
                return run[index]
            index -= size(run)
        raise IndexError("column index out of range")


@dataclass(frozen=True)
class Blocks(Sequence[Columns]):
    """The worker processes' columns: each of ``spans`` (the columns the workers step; the two halves
    when double-buffered) split in ``split`` contiguous parts as even as whole ``unit``s allow (the
    first parts take the remainder: 19 columns in 2 parts are 10 + 9), worker b stepping part b of
    each; workers whose parts are all empty (more workers than units of envs) are left out.

    Worked out when asked for: a plan costs as little for 10**9 envs or 10**6 workers as for 10 (every
    config checked is planned, one that will be refused for its size among them)."""

    spans: tuple[range, ...]
    split: int
    unit: int = 1

    def _part(self, span: range, b: int) -> range:
        units, extra = divmod(size(span) // self.unit, self.split)
        start = span.start + (b * units + min(b, extra)) * self.unit
        return range(start, start + (units + (b < extra)) * self.unit)

    @property
    def count(self) -> int:
        """The worker processes (``len``, for counts past ``sys.maxsize``: a plan refused for its size)."""
        if not self.split:
            return 0
        parts = (divmod(size(span) // self.unit, self.split) for span in self.spans)
        return max((self.split if units else extra for units, extra in parts), default=0)

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, b):  # type: ignore[override]
        if isinstance(b, slice):
            return tuple(self[i] for i in range(self.count)[b])
        n = self.count
        if not -n <= b < n:
            raise IndexError("worker index out of range")
        return Columns(tuple(self._part(span, b % n) for span in self.spans))

    def sizes(self) -> list[int]:
        """The distinct block sizes, largest first (each span's parts change size once, after its remainder)."""
        n = self.count
        edges = {0, n - 1} | {e + d for s in self.spans for e in [size(s) // self.unit % self.split] for d in (-1, 0)}
        return sorted({self[b].count for b in edges if 0 <= b < n}, reverse=True)


def split_halves(n_envs: int, unit: int = 1) -> tuple[range, range]:
    """The two halves of the columns that double-buffered rollouts alternate, in whole ``unit``s."""
    middle = (n_envs // unit + 1) // 2 * unit
    return range(0, middle), range(middle, n_envs)


def main_share(n_envs: int, processes: int, unit: int = 1) -> int:
    """This process's default share of ``n_envs`` beside ``processes`` worker processes: a worker's
    share less :data:`WAKE_COST_ENVS` env per worker process, in whole ``unit``s, at least none.

    In an exact rollout step this process first runs the policy (the workers wait), then wakes
    every worker (a system call and a wake-up each: 20-90 us on a VM, about half a MuJoCo env's
    step), then steps its own envs while they step theirs: it starts later than they do by about
    that much, so its share is smaller by as much. With one worker that is an even split (8 envs:
    4 + 4); 256 envs beside 15 workers: 9 here, 17 or 16 in each worker; 64 beside 15: none here.
    Solves ``m = (n_envs - m) / processes - WAKE_COST_ENVS x processes`` for m.
    """
    m = (n_envs - Fraction(WAKE_COST_ENVS) * processes * processes) / (processes + 1)  # exact: any n_envs, no float overflow
    return max(0, min(n_envs - processes * unit, unit * math.floor(m / unit + Fraction(1, 2))))


@dataclass(frozen=True)
class Layout:
    """A run's env columns by process, and why.

    Attributes:
        n_envs: env columns in all.
        main: this process steps columns ``[0, main)`` (all of them in-process).
        blocks: each worker process's columns, in order (contiguous; with ``halves``, a part of each half).
        halves: the two halves double-buffered rollouts alternate (None: exact rollouts).
        cpus, cpu_source: the usable CPUs and what bounds them (:func:`~ppo_dict.core.load.available_cpus`).
        asked: the layout settings given, as ``--flag value`` text ("": every choice was the default rule's).
    """

    n_envs: int
    main: int
    blocks: Blocks
    halves: Optional[tuple[range, range]]
    cpus: int
    cpu_source: str
    asked: str = ""

    @property
    def processes(self) -> int:
        """Worker processes (0: every env steps in this process)."""
        return self.blocks.count

    @property
    def num_workers(self) -> int:
        """The shares, as ``--num_workers`` counts them: worker processes, and this process's where it steps a share (0
        in-process)."""
        return self.processes + (1 if self.processes and self.main else 0)

    @property
    def usable_cpus(self) -> str:
        """``2 usable CPUs (affinity mask)``: the CPUs the layout was planned on, and what bounds them (the start line's
        and ``--dry_run``'s words alike)."""
        return f"{self.cpus} usable CPU{'s' * (self.cpus != 1)} ({self.cpu_source})"

    def text(self, mp_method: str = "forkserver") -> str:
        """The layout in one line, and why: ``256 envs: 15 worker processes x 17/16 envs (forkserver) + 9 in
        this process; 16 usable CPUs (affinity mask): one worker each, this process keeps one``."""
        why = f"as asked ({self.asked}); {self.usable_cpus}" if self.asked else self.usable_cpus
        if not self.processes:
            if not self.asked:
                why += ": one env (or game) steps fastest here" if self.cpus > 1 else ": no CPU for a worker"
            return f"{self.n_envs} env{'s' * (self.n_envs != 1)} in this process; {why}"
        every = self.blocks.sizes()
        sizes = "/".join(map(str, dict.fromkeys((every[0], every[-1]))))  # the largest and the smallest
        workers = f"{self.processes} worker process{'es' * (self.processes != 1)} x {sizes} env{'s' * (sizes != '1')}"
        here = f" + {self.main} in this process" if self.main else ", none in this process"
        if self.halves is not None:
            here = f" in halves {self.halves[0].stop} + {size(self.halves[1])} (double buffer), none in this process"
        if not self.asked:
            why += (
                ": a worker on each"
                if self.processes >= self.cpus
                else ": a worker on each but one, kept by this process (the policy, its share)"
                if self.processes == self.cpus - 1
                else ": fewer envs than CPUs, a worker per env"
            )
        return f"{self.n_envs} envs: {workers} ({mp_method}){here}; {why}"


def _shares(
    n_envs: Optional[int],
    num_workers: Optional[int],
    envs_per_worker: Optional[int],
    main_steps_envs: bool,
    halves: bool,
    unit: int,
    cpus: int,
) -> tuple[int, int, bool]:
    """``(n_envs, worker processes, whether this process steps a share)`` of the settings, before the
    columns are placed; 0 worker processes: every env in this process."""
    n, w, e = n_envs, num_workers, envs_per_worker
    if w is None and e is not None:  # the W x E form
        w = cpus if n is None else max(1, n // e)
    if n is None:
        n = 1 if w is None else max(1, w * (e or 1))
    in_main = main_steps_envs and not halves
    if w == 0 or (w is None and in_main and (cpus == 1 or n // unit <= 1)):
        return n, 0, True
    if w is None:
        return n, min(cpus - 1 if in_main else cpus, max(1, n // unit)), in_main
    return n, (w - 1 if in_main and w > 1 else w), in_main and w > 1


def plan_layout(
    n_envs: Optional[int],
    num_workers: Optional[int],
    envs_per_worker: Optional[int],
    main_envs: Optional[int] = None,
    main_steps_envs: bool = True,
    halves: bool = False,
    unit: int = 1,
    cpus: Optional[tuple[int, str]] = None,
) -> Layout:
    """The :class:`Layout` of these settings (the module doc says what each fixes), for envs in whole
    ``unit``s (a Godot game's agents); ``cpus``: ``(count, source)``, probed when not given.

    Assumes settings :func:`layout_problems` passes (else the result is clamped, not refused)."""
    count, source = available_cpus() if cpus is None else cpus
    asked = ", ".join(
        f"{name} {value}"
        for name, value in (("num_workers", num_workers), ("envs_per_worker", envs_per_worker), ("main_envs", main_envs))
        if value is not None
    )
    n, processes, in_main = _shares(n_envs, num_workers, envs_per_worker, main_steps_envs, halves, unit, count)
    if processes == 0:
        return Layout(n, n, Blocks((), 0, unit), None, count, source, asked)
    main = 0
    if in_main:
        chosen = (
            main_envs
            if main_envs is not None
            else envs_per_worker
            if envs_per_worker is not None
            else main_share(n, processes, unit)
        )
        main = max(0, min(chosen, n - processes * unit))
    blocks = Blocks(split_halves(n, unit) if halves else (range(main, n),), processes, unit)
    return Layout(n, main, blocks, split_halves(n, unit) if halves else None, count, source, asked)


def layout_problems(
    n_envs: Optional[int],
    num_workers: Optional[int],
    envs_per_worker: Optional[int],
    main_envs: Optional[int] = None,
    main_steps_envs: bool = True,
    halves: bool = False,
    unit: int = 1,
    what: str = "",
    cpus: Optional[int] = None,
) -> list[str]:
    """What in these settings no layout can honour, one line each (``what``: the envs' name, for the
    messages; ``cpus``: probed when not given)."""
    n, w, e, of = n_envs, num_workers, envs_per_worker, f" of {what}" if what else ""
    problems = []
    if e is not None and w != 0:
        if n is not None and w is None and n % e:
            problems.append(
                f"n_envs={n}: must be a multiple of envs_per_worker={e} (equal shares); drop envs_per_worker "
                "to split n_envs unevenly"
            )
        elif n is not None and w is not None and n != w * e:
            problems.append(
                f"n_envs={n}: must equal num_workers x envs_per_worker = {w} x {e}; drop envs_per_worker "
                f"to split n_envs unevenly over num_workers={w}"
            )
    if n is not None and w and w * unit > n:
        problems.append(
            f"num_workers={w}: more than the {n // unit} {'units' if unit > 1 else 'envs'}{of} (n_envs={n}): "
            "each worker steps at least one"
        )
    if problems or main_envs is None:
        return problems
    n, processes, in_main = _shares(n, w, e, main_steps_envs, halves, unit, available_cpus()[0] if cpus is None else cpus)
    largest = n - processes * unit
    if processes and in_main and not (isinstance(main_envs, int) and 0 <= main_envs <= largest and main_envs % unit == 0):
        problems.append(
            f"main_envs={main_envs!r}: must be a multiple of {unit} in [0, {largest}] for {n} envs{of} beside "
            f"{processes} worker process{'es' * (processes != 1)}, each keeping some"
        )
    return problems


def load_gone_note(planned: Layout, full: Layout) -> str:
    """What a run says once the other processes' load that shaped its layout at start has gone (:data:`GONE_AFTER`
    updates without it): the layout stays as planned (it changes no number, and a run stays predictable), and the
    flag that gives ``full`` (the same settings on every CPU of the budget). ``""`` where the load changed nothing
    (a layout asked for, one env)."""
    if (planned.processes, planned.main) == (full.processes, full.main):
        return ""
    return (
        f"note: the load that left this run {planned.usable_cpus} has gone (the last {GONE_AFTER} updates found the CPUs "
        f"free); the layout stays as planned; --num_workers {full.num_workers} gives a run the full layout on "
        f"{full.usable_cpus}, whatever the load at its start"
    )
