"""Deadlines for the env calls the main process makes itself, and Ctrl-C that works during them.

A worker's hung env is caught by the main process's timed ``poll(2)``; the main process's own
envs (its share, ``--num_workers 0``) have nobody watching them, so a thread does.
Before each batch of env calls the pool *arms* the watchdog (:meth:`Watchdog.arm`: one tuple
stored, about 0.2 µs) with the call, the step and a deadline, and *disarms* it after. The
watchdog thread sleeps in ``select(2)`` until the deadline it last saw (or a signal byte from
``signal.set_wakeup_fd``) and checks:

* **soft stage**: the same call still armed past its deadline: it sends the main thread SIGALRM,
  whose handler raises :class:`~ppo_dict.core.errors.EnvTimeoutError` inside the env's call (a
  ``time.sleep``, a socket read, any Python code), naming the env index, call, step and env.
* **hard stage** (only where :func:`start` was told ``hard_exit``: the command line): the call
  still armed :data:`HARD_GRACE` seconds later (C code that never returns to Python, or an env
  that swallowed the error): the thread prints the error, SIGKILLs every worker process and
  ends the process with ``os._exit`` (1; 128 + signal for a stop).

Ctrl-C, SIGTERM and SIGHUP reach this thread as bytes on the wakeup fd even while the main
thread is stuck in C code. After the first one, an env call still armed :data:`STOP_GRACE`
seconds later is interrupted (:class:`~ppo_dict.core.errors.EnvCallInterrupted`, which the command
line turns into "drop this rollout, save the last update's state"), then the hard stage as
above. After a second one the process ends at once: by the main thread's own handler, else from here
(:data:`SECOND_STUCK` seconds later if the main thread is still in the same env call, at most
:data:`SECOND_GRACE` in any case).

C code that holds the GIL and never returns stops every Python thread, this one included: the
command line's guard process (:mod:`ppo_dict.vec.guard`) ends the run then, reading what is armed
from the :class:`~ppo_dict.vec.guard.Beacon` that :meth:`Watchdog.arm` writes beside ``armed``.
"""

from __future__ import annotations

import faulthandler
import os
import select
import signal
import socket
import sys
import threading
import time
import warnings
import weakref
from dataclasses import dataclass
from typing import Any, Optional

from ppo_dict.core.errors import EnvCallInterrupted, EnvTimeoutError
from ppo_dict.vec import guard
from ppo_dict.vec.guard import (
    ACTIVE,
    CALL_CODES,
    COMMAND,
    DEADLINE,
    HARD_GRACE,
    SECOND_STUCK,
    STEP_AT,  # noqa: F401
    STOP_GRACE,
    STOP_SIGNALS,
    TIMEOUT,
    Beacon,
)

#: Seconds the process may take to end after a second signal before it is ended from here.
SECOND_GRACE = 5.0
#: Seconds between looks for an env call to interrupt once a stop's grace is over.
STOP_POLL = 0.05

#: ``(deadline or None, timeout, who, command, detail)``: the env call in progress; ``who`` has
#: ``label`` and ``runner`` (whose ``active`` names the env in progress).
Armed = tuple[Optional[float], Optional[float], Any, str, Any]


def stopped_text(written: list[str]) -> str:
    """What a second stop signal left: ``without saving``, or the files the run's end had written and named on stdout
    (its final checkpoint first) before it came."""
    if not written:
        return "without saving"
    return f"after saving {', '.join(written)} (as printed); nothing after {'it' if len(written) == 1 else 'them'} was written"


def call_text(who: Any, command: str, detail: Any) -> tuple[str, int, str]:
    """What was in progress, for messages: ``("the main process's env 3 (gym_X) did not return from
    step at rollout step 7", 3, "step")``, or for a wait, ``("the workers did not answer step ...", -1, "step")``.

    ``detail``: the rollout step of a step, or a phrase saying when the call was made.
    """
    at = f" at rollout step {detail}" if isinstance(detail, int) else f" {detail}" if isinstance(detail, str) else ""
    if who.runner is None:
        return f"the workers ({who.label}) did not answer {command}{at}", -1, command
    env_idx, active = who.runner.active
    call = active or command
    if call == "reset" and isinstance(detail, list) and 0 <= env_idx < len(detail):  # reset's detail: the seeds
        at = f" (seed={detail[env_idx]})"
    return guard.main_call_text(who.label, env_idx, call, at), env_idx, call


class Watchdog:
    """The deadline of the main process's env call in progress, watched by a daemon thread."""

    def __init__(self) -> None:
        self.armed: Optional[Armed] = None
        self.fired: Optional[tuple[Armed, BaseException]] = None
        self.default_timeout = 60.0
        self.hard_exit = False
        self.signals: list[int] = []  # stop signals seen, in order
        self.written: list[str] = []  # the files the run's end wrote and named on stdout (for a second signal's message)
        self._stop_at: Optional[float] = None
        # seconds after the first stop signal before an env call is interrupted; a rank of a torchrun run never interrupts
        # one (its rollout ends, then every rank stops after the same update: ppo_dict.run.ranks)
        self.stop_grace = STOP_GRACE
        self._second_seen = self._second_at = float("inf")
        self._second_armed: Optional[Armed] = None
        self._thread: Optional[threading.Thread] = None
        self._main_ident = threading.main_thread().ident
        self._rfd = self._wfd = None
        self.beacon = Beacon()
        self.guard: Any = None  # the guard process (``subprocess.Popen``)

    @property
    def beacon(self) -> Beacon:
        """What ``armed`` holds, in memory the guard process reads (process-local until :meth:`start`
        with ``hard_exit``); runners write the env in progress there."""
        return self._beacon

    @beacon.setter
    def beacon(self, beacon: Beacon) -> None:
        self._beacon, self._floats, self._ints = beacon, beacon.floats, beacon.ints

    # ------------------------------------------------------------------ the hot path (main thread)
    def arm(self, who: Any, command: str, detail: Any, timeout: Optional[float]) -> None:
        """An env call batch starts: ``timeout`` seconds (None: no deadline, e.g. waiting for workers,
        which time out themselves; a stop still interrupts it)."""
        if timeout is None:
            self.armed = (None, None, who, command, detail)
            return
        deadline = time.monotonic() + timeout
        self.armed = (deadline, timeout, who, command, detail)
        floats, ints = self._floats, self._ints
        ints[COMMAND] = CALL_CODES.get(command, 0)
        ints[STEP_AT] = detail if type(detail) is int else -1
        floats[TIMEOUT] = timeout
        floats[DEADLINE] = deadline  # last: the guard reads a deadline with its call's details beside it

    def disarm(self) -> Optional[BaseException]:
        """The call returned: the error the watchdog fired for it if the env swallowed it, else None."""
        armed, self.armed = self.armed, None
        self._floats[DEADLINE] = 0.0
        self._ints[ACTIVE] = -1
        fired = self.fired
        if fired is not None and fired[0] is armed:
            self.fired = None
            return fired[1]
        return None

    def clear(self) -> None:
        """The call raised (or a wait ended): nothing is armed or pending any more."""
        self.armed = self.fired = None
        self._floats[DEADLINE] = 0.0
        self._ints[ACTIVE] = -1

    # ------------------------------------------------------------------ lifetime
    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self, default_timeout: float, hard_exit: bool, label: str = "the envs") -> None:
        """Start the thread and the SIGALRM handler (main thread only); and, with ``hard_exit``, watch
        the stop signals through ``signal.set_wakeup_fd`` and start the guard process (``label``: the
        run's env, for its messages). Calling it again updates the settings (and starts the hard stage's
        parts where the Python API started it without them: :func:`start_for_library`)."""
        self.default_timeout, self.hard_exit = default_timeout, hard_exit
        if self.running:
            if hard_exit and self.guard is None:
                signal.set_wakeup_fd(self._wfd.fileno(), warn_on_full_buffer=False)
                self._start_guard(label)
            return
        if threading.current_thread() is not threading.main_thread():
            raise RuntimeError("the env watchdog must be started from the main thread (signal handlers run there)")
        signal.signal(signal.SIGALRM, self._on_alarm)
        rsock, wsock = socket.socketpair()
        for sock in (rsock, wsock):
            sock.setblocking(False)
        self._rfd, self._wfd = rsock, wsock
        if hard_exit:
            signal.set_wakeup_fd(wsock.fileno(), warn_on_full_buffer=False)
            self._start_guard(label)
        self._thread = threading.Thread(target=self._watch, name="ppo_dict-env-watchdog", daemon=True)
        self._thread.start()

    def _start_guard(self, label: str) -> None:
        """The guard process, for C code that holds the GIL: it reads a shared beacon (a forked child
        gets a local one again: its env calls are not this process's), and asks for this process's
        tracebacks with :data:`~ppo_dict.vec.guard.TRACEBACK_SIGNAL` before it ends it."""
        self.beacon = Beacon.shared()
        os.register_at_fork(after_in_child=self._forget_guard)
        faulthandler.register(guard.TRACEBACK_SIGNAL, file=sys.stderr, all_threads=True)
        faulthandler.enable(file=sys.stderr, all_threads=True)  # a crash (a segfault in an env's native code) says where
        self.guard = guard.start(self.beacon, self._rfd, label)

    def _forget_guard(self) -> None:
        self.beacon, self.guard = Beacon(), None

    # ------------------------------------------------------------------ the watchdog thread
    def _due(self, armed: Armed) -> tuple[float, str]:
        """When ``armed`` fires, and why (``timeout`` or ``stop``)."""
        due, why = (armed[0], "timeout") if armed[0] is not None else (float("inf"), "")
        if self._stop_at is not None and self._stop_at < due:
            due, why = self._stop_at, "stop"
        return due, why

    def _watch(self) -> None:
        poll = 1.0
        while True:
            armed = self.armed
            now = time.monotonic()
            due, why = self._due(armed) if armed is not None else (float("inf"), "")
            # After a stop signal's grace, look often: the next env call the main thread makes is interrupted.
            stopping = self._stop_at is not None and now >= self._stop_at
            wake = min(due, now + (STOP_POLL if stopping else min(poll, self.default_timeout / 4)))
            if len(self.signals) > 1:
                wake = min(wake, now + STOP_POLL)
            ready, _, _ = select.select([self._rfd], [], [], max(0.0, wake - now))
            if ready:
                self._read_signals()
            self._check_second()
            if armed is not None and self.armed is armed and why and time.monotonic() >= due:
                self._fire(armed, why)

    def _check_second(self) -> None:
        """After a second stop signal: end the process if the main thread is still in the env call it
        was in then (its handler cannot run) after :data:`SECOND_STUCK`, or in any case after
        :data:`SECOND_GRACE` (the main thread's own way out, closing the workers, takes about a second)."""
        if len(self.signals) < 2:
            return
        now = time.monotonic()
        stuck = self._second_armed is not None and self.armed is self._second_armed
        if now >= self._second_at or (stuck and now >= self._second_seen + SECOND_STUCK):
            self._exit(
                128 + self.signals[0],
                f"{signal.Signals(self.signals[1]).name} received twice: stopped at once {stopped_text(self.written)}",
            )

    def _read_signals(self) -> None:
        try:
            data = self._rfd.recv(64)
        except BlockingIOError:
            return
        for signum in data:
            if signum not in STOP_SIGNALS:
                continue
            self.signals.append(signum)
            if len(self.signals) == 1:
                self._stop_at = time.monotonic() + self.stop_grace
            elif len(self.signals) == 2:
                self._second_seen = time.monotonic()
                self._second_at = self._second_seen + SECOND_GRACE
                self._second_armed = self.armed

    def _fire(self, armed: Armed, why: str) -> None:
        """Soft stage: raise in the main thread; hard stage if the call is still armed after the grace."""
        _, timeout, who, command, detail = armed
        what, env_idx, call = call_text(who, command, detail)
        if why == "timeout":
            error: BaseException = EnvTimeoutError(guard.timeout_text(what, timeout))
            error.env_index, error.command, error.detail = env_idx, call, detail  # type: ignore[attr-defined]
        else:
            error = EnvCallInterrupted(guard.stop_text(self.signals[0], what))
        self.fired = (armed, error)
        signal.pthread_kill(self._main_ident, signal.SIGALRM)
        deadline = time.monotonic() + HARD_GRACE
        while self.armed is armed and time.monotonic() < deadline:
            if select.select([self._rfd], [], [], 0.02)[0]:
                self._read_signals()
            self._check_second()
        if self.armed is armed and self.hard_exit:
            code = 1 if why == "timeout" else 128 + self.signals[0]
            text = f"{type(error).__name__}: {error}" if why == "timeout" else str(error)
            self._exit(
                code,
                f"{text}\nThe env call did not return to Python within {HARD_GRACE:g} s more (C code?): "
                "the process was ended without saving",
            )

    def _exit(self, code: int, message: str) -> None:
        """Hard stage: say why, SIGKILL the worker processes, end the process now."""
        try:
            print(f"error: {message}", file=sys.stderr, flush=True)
        finally:
            for group in list(KILLERS):
                try:
                    group.kill()
                except Exception:  # noqa: BLE001 (ending the process matters more)
                    pass
            os._exit(code)

    def _on_alarm(self, signum: int, frame: Any) -> None:
        """SIGALRM in the main thread: raise the fired error if its call is still the one in progress
        (``fired`` stays set: :meth:`disarm` raises it again if the env swallowed it and returned)."""
        fired = self.fired
        if fired is not None and fired[0] is self.armed:
            raise fired[1]


@dataclass(frozen=True)
class Owner:
    """Whose env calls are armed: ``label`` (the env's name) and ``runner`` (``runner.active`` is
    ``(env index, call)`` of the env call in progress; None while waiting for workers)."""

    label: str
    runner: Any = None


#: The process's watchdog: pools arm it whether or not it runs (arming alone costs ~0.2 µs).
WATCHDOG = Watchdog()
#: Every live worker group (with a ``kill()``): the hard stage SIGKILLs their processes.
KILLERS: "weakref.WeakSet[Any]" = weakref.WeakSet()


def start(default_timeout: float, hard_exit: bool = False, label: str = "the envs") -> Watchdog:
    """Start :data:`WATCHDOG` (main thread only): the command line does, with ``hard_exit`` (and the guard process)."""
    WATCHDOG.start(default_timeout, hard_exit, label)
    return WATCHDOG


def start_for_library(default_timeout: float, label: str) -> bool:
    """Start :data:`WATCHDOG` for the Python API, before it builds a pool whose envs the main process steps:
    a hung ``step`` or ``reset`` there raises :class:`EnvTimeoutError` from ``learn`` as it ends the command
    line's run (the soft stage only: no hard stage, no guard process, no stop signals taken; that is the
    command line's, the user's process is the user's). Returns whether it runs.

    It installs a SIGALRM handler, so it starts only from the main thread and where the program has no
    SIGALRM handler of its own; else it warns (``RuntimeWarning``) that such a hang cannot be timed out.
    """
    if WATCHDOG.running:  # the command line's, or an earlier model's: its settings stay
        return True
    if threading.current_thread() is not threading.main_thread():
        why = "the model was built outside the main thread, where no signal handler can be installed"
    elif signal.getsignal(signal.SIGALRM) not in (signal.SIG_DFL, None):
        why = "the program has a SIGALRM handler of its own, which the watchdog would replace"
    else:
        WATCHDOG.start(default_timeout, hard_exit=False, label=label)
        return True
    warnings.warn(
        f"{label}: the main process steps envs itself, but their calls cannot be timed out ({why}): an env whose "
        "step or reset hangs there hangs learn(); main_steps_envs=False with num_workers >= 1 steps every env in a "
        "worker process, which times out after step_timeout",
        RuntimeWarning,
        stacklevel=3,
    )
    return False
