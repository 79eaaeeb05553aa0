"""The guard process: ends the command line's run when an env call holds the GIL and never returns.

The watchdog thread (:mod:`ppo_dict.vec.watchdog`) protects the main process's own envs from any
hang that lets a Python thread run. C code that holds the GIL and never returns stops every
Python thread, the watchdog's too; only another process can see it. So the command line starts
this one (a plain ``python guard.py``: standard library only, a few MB, asleep in ``poll(2)``)
and shares a :class:`Beacon` with it: 64 bytes of memory (``memfd``: no /dev/shm entry) where
the main process writes what the watchdog keeps (the armed call's deadline, timeout, command and
rollout step, and the env in progress), about 0.5 µs per batch of env calls plus one integer
per env call. The guard also holds a duplicate of the watchdog's wakeup socket, on which
Python's C-level signal handler writes a byte per signal: it *peeks* there (never reads) to see
stop signals that the watchdog thread has not taken.

The guard acts only where the watchdog could not, :data:`MARGIN` seconds after the watchdog's
own last moment:

* an armed call still armed ``step_timeout + HARD_GRACE + MARGIN`` seconds after it began;
* a stop signal (Ctrl-C, SIGTERM, SIGHUP) left untaken ``STOP_GRACE + HARD_GRACE + MARGIN``
  seconds, a second one ``SECOND_STUCK + MARGIN`` seconds.

Then it asks the main process for its threads' Python tracebacks (``faulthandler`` on
:data:`TRACEBACK_SIGNAL`, a C handler that needs no GIL), prints the error naming the env, its
index, the call and the rollout step, and SIGKILLs the main process and its descendants (the
workers, their games): nothing is written, the last checkpoint stays whole, and no process or
shared memory is left (the storage is anonymous). The main process's exit status is then 137
(SIGKILL), the only status a process that cannot run any code can be given from outside.
The guard ends as soon as the main process does.

This module is a leaf: the watchdog imports its texts and constants, and the guard process runs
it by path, without importing ppo_dict (which would import torch).
"""

from __future__ import annotations

import mmap
import os
import select
import signal
import socket
import subprocess
import sys
import time
from typing import Optional

#: Seconds the watchdog's hard stage waits after the soft one (or after a stop interrupt) before ``os._exit``.
HARD_GRACE = 2.0
#: Seconds an env call may go on after the first Ctrl-C/SIGTERM/SIGHUP before it is interrupted.
STOP_GRACE = 2.0
#: Seconds after a second signal before the process is ended if the main thread is still in the same env call.
SECOND_STUCK = 1.0
#: Seconds the guard gives the watchdog thread beyond its own deadlines before acting instead of it.
MARGIN = 1.0
#: The signals that stop a run (the command line's handlers).
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
#: The main process dumps its threads' tracebacks (``faulthandler.register``) on this signal.
TRACEBACK_SIGNAL = signal.SIGUSR2

#: The env calls a beacon can name, by code (0: none or another call).
CALLS = (
    "",
    "step",
    "reset",
    "action_masks",
    "constructor",
    "get_attr",
    "set_attr",
    "env_method",
    "has_attr",
    "env_is_wrapped",
    "close",
    "render",
)
CALL_CODES = {name: code for code, name in enumerate(CALLS)}
STEP, RESET, ACTION_MASKS, CONSTRUCTOR = (CALL_CODES[name] for name in ("step", "reset", "action_masks", "constructor"))
#: ``Beacon.active`` holds ``env index * ACTIVE_SCALE + call code`` (-1: no env call in progress).
ACTIVE_SCALE = 16

# The beacon's slots: float64 in ``floats``, int64 in ``ints`` (8 bytes each, the same 64 bytes).
DEADLINE, TIMEOUT = 0, 1  # floats: time.monotonic() of the armed call's deadline (0: none armed), its timeout
COMMAND, STEP_AT, ACTIVE = 2, 3, 4  # ints: the armed command's code, its rollout step (-1: none), the env in progress
SIZE = 64


class Beacon:
    """64 bytes the main process writes and its guard reads: ``floats`` and ``ints`` are views of them.

    ``fd``: a memfd shared with the guard (:meth:`shared`), or None for process-local memory
    (every process that is not the command line's main process: writes cost the same and go nowhere).
    """

    def __init__(self, fd: Optional[int] = None, attach: bool = False):
        self.fd = fd
        self._memory = mmap.mmap(fd, SIZE) if fd is not None else bytearray(SIZE)
        self.floats = memoryview(self._memory).cast("d")
        self.ints = memoryview(self._memory).cast("q")
        if not attach:  # the guard attaches to the main process's beacon: writing here would erase a call in progress
            self.ints[STEP_AT] = self.ints[ACTIVE] = -1

    @classmethod
    def shared(cls) -> "Beacon":
        fd = os.memfd_create("ppo_dict-guard", os.MFD_CLOEXEC)
        os.ftruncate(fd, SIZE)
        return cls(fd)


def main_call_text(label: str, env_idx: int, call: str, at: str) -> str:
    """``the main process's env 3 (gym_X) did not return from step at rollout step 7``; where the
    env is not known (``env_idx`` -1): ``an env of the main process (gym_X) did not return ...``."""
    env = f"the main process's env {env_idx}" if env_idx >= 0 else "an env of the main process"
    return f"{env} ({label}) did not return from {call}{at}"


def timeout_text(what: str, timeout: float) -> str:
    """The message of an :class:`EnvTimeoutError` for a call in the main process (``what``: :func:`main_call_text`)."""
    return (
        f"{what} within {timeout:g} s; an env is probably hung (raise step_timeout if it is only slow); "
        "every env and worker was stopped"
    )


def stop_text(signum: int, what: str) -> str:
    """A stop signal that found an env call still running after :data:`STOP_GRACE`."""
    return f"{signal.Signals(signum).name}: {what} within {STOP_GRACE:g} s: interrupted"


def start(beacon: Beacon, wakeup: socket.socket, label: str) -> subprocess.Popen:
    """Start the guard of this process (the command line's main process) over ``beacon`` and a
    duplicate of the watchdog's wakeup socket ``wakeup``; ``label`` names the run's envs."""
    if beacon.fd is None:
        raise ValueError("the guard reads a shared beacon (Beacon.shared())")
    wake = os.dup(wakeup.fileno())
    try:
        return subprocess.Popen(
            [sys.executable, "-I", os.path.abspath(__file__), str(os.getpid()), str(beacon.fd), str(wake), label],
            pass_fds=(beacon.fd, wake),
            stdin=subprocess.DEVNULL,
            close_fds=True,
        )
    finally:
        os.close(wake)


# ---------------------------------------------------------------------------------------- the guard process
class Guard:
    """Watches process ``pid`` through ``beacon`` and the wakeup socket ``wake`` (see the module's docstring)."""

    def __init__(self, pid: int, beacon: Beacon, wake: socket.socket, label: str):
        self.pid, self.beacon, self.wake, self.label = pid, beacon, wake, label
        self.pending_since: dict[int, float] = {}  # stop signals seen untaken: how many -> since when
        try:
            self.exited: Optional[int] = os.pidfd_open(pid)
        except (AttributeError, OSError):  # an older kernel: poll the parent instead
            self.exited = None

    def alive(self) -> bool:
        if self.exited is not None:
            return not select.select([self.exited], [], [], 0)[0]
        return os.getppid() == self.pid

    def watch(self) -> None:
        while self.alive():
            if self.exited is not None:
                select.select([self.exited], [], [], self.interval())
            else:
                time.sleep(self.interval())
            if not self.alive():
                return
            reason = self.check()
            if reason is not None and self.end(reason):
                return

    def interval(self) -> float:
        """How long to sleep: until the armed deadline's last moment, at most 0.5 s (0.05 s while a signal waits)."""
        if self.pending_since:
            return 0.05
        deadline = self.beacon.floats[DEADLINE]
        due = deadline + HARD_GRACE + MARGIN - time.monotonic() if deadline > 0 else 0.5
        return min(max(due, 0.01), 0.5)

    def untaken_signals(self) -> list[int]:
        """The stop signals written on the wakeup socket that the watchdog thread has not read."""
        try:
            data = self.wake.recv(64, socket.MSG_PEEK | socket.MSG_DONTWAIT)
        except (BlockingIOError, InterruptedError):
            return []
        return [b for b in data if b in STOP_SIGNALS]

    def check(self) -> Optional[str]:
        """The error to end the process with, or None while the watchdog can still act."""
        now = time.monotonic()
        signals = self.untaken_signals()
        for count in list(self.pending_since):
            if len(signals) < count:
                del self.pending_since[count]
        for count in range(1, len(signals) + 1):
            self.pending_since.setdefault(count, now)
        what = self.call_text()
        if len(signals) >= 2 and now - self.pending_since[2] >= SECOND_STUCK + MARGIN:
            return f"{signal.Signals(signals[1]).name} received twice: stopped at once without saving ({what})"
        if signals and now - self.pending_since[1] >= STOP_GRACE + HARD_GRACE + MARGIN:
            return stop_text(signals[0], what) + " by the guard process"
        floats = self.beacon.floats
        deadline = floats[DEADLINE]
        if deadline > 0 and now >= deadline + HARD_GRACE + MARGIN:
            time.sleep(0.01)
            if floats[DEADLINE] == deadline:  # the same call, still armed
                return f"EnvTimeoutError: {timeout_text(what, floats[TIMEOUT])}"
        return None

    def call_text(self) -> str:
        """What the main process is doing, from the beacon."""
        ints = self.beacon.ints
        command = CALLS[ints[COMMAND]] if 0 <= ints[COMMAND] < len(CALLS) else ""
        active = ints[ACTIVE]
        env_idx, call = (active // ACTIVE_SCALE, CALLS[active % ACTIVE_SCALE]) if active >= 0 else (-1, "")
        at = f" at rollout step {ints[STEP_AT]}" if ints[STEP_AT] >= 0 else ""
        if self.beacon.floats[DEADLINE] <= 0 and not command:
            return "the main process did not return to Python"
        return main_call_text(self.label, env_idx, call or command or "an env call", at)

    def end(self, reason: str) -> bool:
        """Traceback, message, then SIGKILL the main process and everything it started. False (nothing
        done) if the process came back to Python meanwhile (the signal broke a blocking call)."""
        try:
            os.kill(self.pid, TRACEBACK_SIGNAL)
        except ProcessLookupError:
            return True
        time.sleep(0.2)  # the tracebacks first, then the error
        if self.check() is None:
            return False
        descendants = descendants_of(self.pid)
        print(
            f"error: {reason}\nThe call holds Python's lock and never returns (C code?): no thread of the main process "
            f"can run, so its guard process ended it and its child processes ({len(descendants)}) with SIGKILL "
            "(exit status 137), without saving",
            file=sys.stderr,
            flush=True,
        )
        for pid in [self.pid, *descendants]:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        return True


def descendants_of(root: int) -> list[int]:
    """Every live process below ``root`` (``/proc``), this one excepted."""
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(name))
    found, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            if child != os.getpid():
                found.append(child)
                todo.append(child)
    return found


def run_guard(argv: list[str]) -> None:
    """``guard.py PID BEACON_FD WAKEUP_FD LABEL``: the guard process's entry point."""
    for signum in STOP_SIGNALS:  # Ctrl-C reaches the whole process group; the main process decides
        signal.signal(signum, signal.SIG_IGN)
    pid, beacon_fd, wake_fd, label = int(argv[0]), int(argv[1]), int(argv[2]), argv[3]
    wake = socket.socket(fileno=wake_fd)
    Guard(pid, Beacon(beacon_fd, attach=True), wake, label).watch()


if __name__ == "__main__":
    run_guard(sys.argv[1:])
