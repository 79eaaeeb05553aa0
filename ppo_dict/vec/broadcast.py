"""One store starts a step in every worker: a control page in shared memory, and futexes for the waits.

Handing a step to W workers over pipes costs W writes (system calls, and a wake-up each where the
worker sleeps) on the main process's serial path. Here the main process writes the step's header and
then one word, :data:`SEQ`; each worker, looking at that word, starts at once; each answers by storing
the same number in its own ``done`` word (each on a cache line of its own, so that W workers finishing
together do not fight over one line). A waiting process first looks (``spin`` seconds, where it has a
core to look from: :func:`~ppo_dict.vec.group.default_spin`), then sleeps in ``futex(2)`` on the word it
waits for; whoever changes a word wakes the sleepers of that word only where one says it sleeps.

Memory order. On x86-64 (TSO) stores become visible in program order and loads are not reordered with
loads, so a worker that sees the new :data:`SEQ` sees the header and every array the main process wrote
before it (the step's random draws, the statistics), and the main process that sees a worker's ``done``
sees every row that worker wrote before it. Each Python statement is a call into C code that the
compiler cannot move a store across. Two cases are not covered by TSO alone, and :func:`fence` (a locked
read-modify-write: acquiring and releasing a lock) orders them: large copies that glibc makes with
non-temporal stores (weakly ordered: fenced before each ``done`` and each :data:`SEQ`), and the
store-then-load of "I sleep" against "did it change" (a sleeper and a waker could each miss the other's
store: each fences between its store and its load, so at least one of them sees the other). Elsewhere
(not x86-64) :func:`available` is False and the pool hands steps over its pipes, whose system calls order
memory in the kernel.

A dead peer is still seen: sleeps are futex waits with a timeout (:data:`NAP`), after which a worker
looks at its pipe and its parent's sentinel and the main process at its workers' pipes and sentinels.
"""

from __future__ import annotations

import ctypes
import platform
import threading
import time
from typing import Any, Callable, Optional

import numpy as np

#: Bytes of a cache line: each word that several processes write sits on a line of its own.
LINE = 64
#: Word indices (uint32) of the control page: the step counter workers watch, main's wake word.
SEQ, MAIN_WAKE, MAIN_ASLEEP = 0, 32, 33  # lines 0 and 2 (16 words a line)
#: How long workers look before they nap, in microseconds + 1 (0: each worker's own setting), set by the main process
#: as the load on the CPUs changes (``ShmEnvPool.adapt``).
SPIN_US = 34
#: The header (int64) after the counter: :data:`HEADER` values at line 1.
HEADER, HEADER_AT = 8, 1
#: Per worker w, at line ``WORKERS_AT + w``: its done word, its failed flag, its "asleep" flag (uint32).
WORKERS_AT, DONE, FAILED, ASLEEP = 3, 0, 1, 2
#: Seconds a sleeping process waits before it looks at pipes and sentinels again (a dead peer is seen this soon).
NAP = 0.05
#: x86-64 Linux futex system call and operations (shared mappings: not FUTEX_PRIVATE).
SYS_FUTEX, FUTEX_WAIT, FUTEX_WAKE = 202, 0, 1

_FENCE = threading.Lock()
_libc: Any = None


def available() -> bool:
    """Whether this machine hands steps over by the shared page: x86-64 Linux (TSO, ``futex(2)``)."""
    return platform.system() == "Linux" and platform.machine() in ("x86_64", "AMD64")


def page_bytes(workers: int) -> int:
    """The control page's size for ``workers`` workers."""
    return (WORKERS_AT + workers) * LINE


def fence() -> None:
    """A full memory barrier: a lock's acquire and release are locked read-modify-writes (``lock cmpxchg``),
    which order every earlier load and store, non-temporal ones included, before every later one."""
    _FENCE.acquire()
    _FENCE.release()


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


def _futex(address: int, op: int, value: int, timeout: Optional[float] = None) -> int:
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
    span = None
    if timeout is not None:
        seconds = int(timeout)
        span = ctypes.byref(_Timespec(seconds, int((timeout - seconds) * 1e9)))
    return _libc.syscall(SYS_FUTEX, ctypes.c_void_p(address), op, ctypes.c_uint32(value), span, None, 0)


class Broadcast:
    """The control page over ``memory`` (a writable buffer of :func:`page_bytes` bytes, shared by the
    main process and its ``workers`` workers; zeros at first)."""

    def __init__(self, memory: Any, workers: int):
        self.workers = workers
        self.words = np.frombuffer(memory, dtype=np.uint32, count=page_bytes(workers) // 4)
        self.header = np.frombuffer(memory, dtype=np.int64, count=HEADER, offset=HEADER_AT * LINE)
        self.base = self.words.ctypes.data
        per_line = LINE // 4
        lines = self.words[WORKERS_AT * per_line :].reshape(workers, per_line)
        self.done, self.failed, self.asleep = lines[:, DONE], lines[:, FAILED], lines[:, ASLEEP]
        self.seq = 0  # the main process's count of hand-overs (a worker's: the last it served)

    def _address(self, word: int) -> int:
        return self.base + 4 * word

    # ------------------------------------------------------------------ the main process
    def publish(self, header: tuple[int, ...]) -> int:
        """Start a hand-over: ``header`` (up to :data:`HEADER` ints) then the counter; wakes the workers
        that sleep. Returns the hand-over's number, which each worker stores in its done word when finished."""
        self.header[: len(header)] = header
        self.seq = (self.seq + 1) & 0xFFFFFFFF
        fence()  # every array written for this step, before the counter
        self.words[SEQ] = self.seq
        fence()  # the counter, before looking who sleeps
        if self.asleep.any():
            _futex(self._address(SEQ), FUTEX_WAKE, 0x7FFFFFFF)
        return self.seq

    def set_spin(self, seconds: float) -> None:
        """How long the workers look before they nap from their next wait on."""
        self.words[SPIN_US] = int(round(seconds * 1e6)) + 1

    def pending(self, seq: int) -> np.ndarray:
        """The workers that have not finished hand-over ``seq`` (indices)."""
        return np.flatnonzero(self.done != seq)

    def finished(self, seq: int) -> bool:
        return bool((self.done == seq).all())

    def wait(
        self, seq: int, deadline: float, spin: float, check: Callable[[], None], idle: Optional[Callable[[], bool]] = None
    ) -> bool:
        """Wait until every worker finished hand-over ``seq`` (True) or ``time.monotonic()`` passes ``deadline``
        (False). ``check()`` raises for a failed or dead worker: called when a worker flags a failure and
        after each sleep. ``idle``: work to do first, a unit a call, looking between units."""
        while idle is not None:
            if self.finished(seq) or self.failed.any():
                break
            if not idle():
                break
        until = time.perf_counter() + spin
        while True:
            if self.finished(seq):
                return True
            if self.failed.any():
                check()
            if time.perf_counter() >= until:
                break
        while True:
            now = time.monotonic()
            if now >= deadline:
                return self.finished(seq)
            wake = int(self.words[MAIN_WAKE])
            self.words[MAIN_ASLEEP] = 1
            fence()  # "asleep", before looking at the done words
            if self.finished(seq):
                self.words[MAIN_ASLEEP] = 0
                return True
            _futex(self._address(MAIN_WAKE), FUTEX_WAIT, wake, min(NAP, deadline - now))
            self.words[MAIN_ASLEEP] = 0
            check()

    # ------------------------------------------------------------------ a worker
    def for_worker(self, w: int) -> "WorkerSide":
        return WorkerSide(self, w)


class WorkerSide:
    """Worker ``w``'s view of a :class:`Broadcast`: waits for hand-overs, stores its done word."""

    def __init__(self, page: Broadcast, w: int):
        self.page, self.w = page, w
        self.last = 0  # the page starts as zeros; the main process's first hand-over is 1

    def next(self, spin: float, alive: Callable[[], bool]) -> Optional[int]:
        """The next hand-over's number (looked for ``spin`` seconds, then slept for, :data:`NAP` at a time),
        or None when ``alive()``, asked after each sleep, says to stop waiting."""
        page, words = self.page, self.page.words
        seq = int(words[SEQ])
        if seq == self.last:
            set_us = int(words[SPIN_US])
            until = time.perf_counter() + (spin if not set_us else (set_us - 1) / 1e6)
            while seq == self.last and time.perf_counter() < until:
                seq = int(words[SEQ])
        while seq == self.last:
            page.asleep[self.w] = 1
            fence()  # "asleep", before looking at the counter
            seq = int(words[SEQ])
            if seq == self.last:
                _futex(page._address(SEQ), FUTEX_WAIT, self.last, NAP)
                seq = int(words[SEQ])
            page.asleep[self.w] = 0
            if seq == self.last and not alive():
                return None
        self.last = seq
        return seq

    def header(self) -> tuple[int, ...]:
        return tuple(int(v) for v in self.page.header)

    def finish(self, seq: int) -> None:
        """Hand-over ``seq`` done: every row this worker wrote, then its done word; wakes a sleeping main process."""
        page = self.page
        fence()  # the rows, before the done word
        page.done[self.w] = seq
        fence()  # the done word, before looking whether the main process sleeps
        if page.words[MAIN_ASLEEP]:
            page.words[MAIN_WAKE] = (int(page.words[MAIN_WAKE]) + 1) & 0xFFFFFFFF
            _futex(page._address(MAIN_WAKE), FUTEX_WAKE, 1)

    def fail(self) -> None:
        """This worker is failing (its report follows on its pipe): the main process stops waiting for it."""
        page = self.page
        page.failed[self.w] = 1
        fence()
        page.words[MAIN_WAKE] = (int(page.words[MAIN_WAKE]) + 1) & 0xFFFFFFFF
        _futex(page._address(MAIN_WAKE), FUTEX_WAKE, 1)


def wake_all(page: Optional[Broadcast]) -> None:
    """Publish an empty hand-over (header zeros): every worker wakes and looks at its pipe (close, a call)."""
    if page is not None:
        page.publish((0,))
