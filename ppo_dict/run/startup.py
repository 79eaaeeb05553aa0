"""Ctrl-C while a command line starts: a clean exit, not a ``KeyboardInterrupt`` traceback.

Importing torch, probing the env and checking the machine take seconds before the run's own handlers
(``main_ppo.StopFlag``) are installed. Every command line (``main_ppo``, ``main_ppo_godot``, ``enjoy``,
``export_onnx``, ``sweep``) installs :func:`exit_on_stop_signals` first, before those imports (standard
library only, so that nothing slow comes before it), and calls :func:`imported` once they are done: a
first stop signal then raises ``SystemExit(128 + signal)``, which unwinds whatever was starting (a
probed env, a launched game, a checkpoint being read) through its ``finally`` blocks, exit status
130 / 143 / 129 as for a later one; a second one while that unwinds ends the process at once. Nothing
is written before a command's own handlers take over (``main_ppo``, ``sweep``) or, for a command
without any (``enjoy``, ``export_onnx``), before it ends, so there is nothing to save.

At the other end, once the interpreter's exit callbacks have run (the last of them is :func:`ignore_while_exiting`,
registered here first), the stop signals are ignored: Python gives them back their default action there, and a
signal during the rest of the exit (freeing torch's modules takes tenths of a second) would end the process by
that signal (status -2 for SIGINT, nothing said) instead of its own exit status, with everything already written
and closed.
"""

from __future__ import annotations

import atexit
import os
import signal
import sys
from typing import Any

#: The signals that stop a run: ``ppo_dict.vec.guard.STOP_SIGNALS`` (which imports nothing of ppo_dict, being run by path).
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def taken_signals() -> tuple[int, ...]:
    """The :data:`STOP_SIGNALS` this process takes: all of them, except SIGHUP where it is ignored (``nohup``
    ignores it on purpose, for the run to outlive its terminal: it stays ignored, and the run's workers
    keep it ignored too). SIGINT is taken even where it was inherited ignored: a shell without job control
    ignores it for every background job, asked or not, and Ctrl-C does not reach a background job anyway."""
    return tuple(s for s in STOP_SIGNALS if not (s == signal.SIGHUP and signal.getsignal(s) == signal.SIG_IGN))


#: what a stop signal did to a training run that was starting: the words after "SIGINT received "
TRAINING = "while starting: stopped before training began; nothing was saved"


class StopWhileStarting:
    """The start-up handler of :data:`STOP_SIGNALS`; ``seen``: the first signal taken, if any; ``stopped``:
    what the signal did, printed after its name (``"SIGINT received " + stopped``)."""

    def __init__(self, stopped: str = TRAINING) -> None:
        self.seen = 0
        self.stopped = stopped
        # while the command line's modules import, nothing has started, and an exception raised inside a C
        # extension's import comes out as that extension's ImportError (numpy's, with a traceback): exit at once
        self.importing = True

    def __call__(self, signum: int, frame: Any) -> None:
        name = signal.Signals(signum).name
        if self.seen:
            print(f"{name} received twice while starting: stopped at once", file=sys.stderr, flush=True)
            os._exit(128 + self.seen)
        self.seen = signum
        print(f"\n{name} received {self.stopped}", file=sys.stderr, flush=True)
        if self.importing:
            os._exit(128 + signum)
        raise SystemExit(128 + signum)


#: the handler :func:`exit_on_stop_signals` installed (None: none)
HANDLER: StopWhileStarting | None = None


def exit_on_stop_signals(stopped: str = TRAINING) -> StopWhileStarting:
    """Install :class:`StopWhileStarting` for every stop signal (main thread, command lines only);
    ``stopped``: what a signal does to this command, said after the signal's name."""
    global HANDLER
    if HANDLER is None:  # the first exit callback registered runs last
        atexit.register(ignore_while_exiting)
    HANDLER = StopWhileStarting(stopped)
    for signum in taken_signals():
        signal.signal(signum, HANDLER)
    return HANDLER


def ignore_while_exiting() -> None:
    """The interpreter's last exit callback: ignore the stop signals for the rest of the exit, where Python would give
    them their default action back (a second Ctrl-C there would end a stopped run by SIGINT, not with status 130)."""
    for signum in taken_signals():
        signal.signal(signum, signal.SIG_IGN)


def imported() -> None:
    """The command line's modules are imported: a first stop signal from now on raises ``SystemExit``,
    which unwinds what is starting (a probed env, a launched game) through its ``finally`` blocks."""
    if HANDLER is not None:
        HANDLER.importing = False
