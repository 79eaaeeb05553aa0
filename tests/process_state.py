"""What a run changes in its own process, put back after every test (``tests/conftest.py``), so that no test
depends on another: tests that call a command line's entry point in this process (``main_ppo.main``,
``sweep.main``, ``enjoy.main``) leave behind what a run sets for its lifetime.

* the handlers of the stop signals, SIGALRM, SIGCHLD and SIGUSR2 (the watchdog's and the stop flag's), and the
  wakeup descriptor (the watchdog's hard stage reads the stop signals through it);
* the env watchdog's settings and what it has seen (``ppo_dict.vec.watchdog.WATCHDOG``: its thread, once
  started, stays, idle, as in any process that built a model; nothing is left armed) and the start's stop handler;
* the guard process a command line's run starts beside its process (it lives as long as the process: here it is
  ended with the test, so that no process outlives the test that started it);
* torch's thread counts, the RNG streams (``random``, numpy's global one, torch's CPU generator) and the
  environment variables.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
from typing import Any, Iterator

import numpy as np
import torch

#: the signals a run takes for its lifetime
SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGALRM, signal.SIGCHLD, signal.SIGUSR2)
#: the watchdog's fields a run sets or fills
WATCHDOG_FIELDS = ("default_timeout", "hard_exit", "stop_grace", "_stop_at", "_second_seen", "_second_at", "_second_armed")


def snapshot() -> dict[str, Any]:
    """Everything :func:`restored` puts back, as plain values (two snapshots compare with ``==``, the RNG states as bytes)."""
    from ppo_dict.run import startup
    from ppo_dict.vec.watchdog import WATCHDOG

    wakeup = signal.set_wakeup_fd(-1)
    signal.set_wakeup_fd(wakeup)
    return {
        "handlers": {int(sig): signal.getsignal(sig) for sig in SIGNALS},
        "wakeup_fd": wakeup,
        "watchdog": {name: getattr(WATCHDOG, name) for name in WATCHDOG_FIELDS},
        "watchdog_seen": (list(WATCHDOG.signals), list(WATCHDOG.written), WATCHDOG.armed, WATCHDOG.fired),
        "guard": WATCHDOG.guard,
        "start_handler": startup.HANDLER,
        "threads": (torch.get_num_threads(), torch.get_num_interop_threads()),
        "random": random.getstate(),
        "numpy": np.random.get_state(legacy=False),
        "torch": torch.get_rng_state().numpy().tobytes(),
        "environ": dict(os.environ),
    }


def differences(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    """The names of what differs between two snapshots."""
    out = []
    for key in before:
        a, b = before[key], after[key]
        same = (a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)) if isinstance(a, dict) else _equal(a, b)
        if not same:
            out.append(key)
    return out


def _equal(a: Any, b: Any) -> bool:
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    if isinstance(a, np.ndarray):
        return isinstance(b, np.ndarray) and np.array_equal(a, b)
    return a is b or a == b


def restore(before: dict[str, Any]) -> None:
    """Put back what :func:`snapshot` saw."""
    from ppo_dict.run import startup
    from ppo_dict.vec.watchdog import WATCHDOG

    for sig, handler in before["handlers"].items():
        if handler is not None and signal.getsignal(sig) is not handler:
            signal.signal(sig, handler)
    if WATCHDOG.running:  # its thread stays (it cannot be stopped), and so must the handler it raises through
        signal.signal(signal.SIGALRM, WATCHDOG._on_alarm)
    signal.set_wakeup_fd(before["wakeup_fd"])
    for name, value in before["watchdog"].items():
        setattr(WATCHDOG, name, value)
    signals, written, WATCHDOG.armed, WATCHDOG.fired = before["watchdog_seen"]
    WATCHDOG.signals[:], WATCHDOG.written[:] = signals, written
    if WATCHDOG.guard is not before["guard"]:  # a run here started the guard: ended, as the process's end would end it
        started, beacon = WATCHDOG.guard, WATCHDOG.beacon
        started.kill()
        started.wait()
        WATCHDOG._forget_guard()
        if beacon.fd is not None:
            os.close(beacon.fd)
    startup.HANDLER = before["start_handler"]
    threads, interop = before["threads"]
    if torch.get_num_threads() != threads:
        torch.set_num_threads(threads)
    if torch.get_num_interop_threads() != interop:
        try:
            torch.set_num_interop_threads(interop)
        except RuntimeError:  # torch allows it once, before any parallel work: a run that set it keeps it
            pass
    random.setstate(before["random"])
    np.random.set_state(before["numpy"])
    torch.set_rng_state(torch.from_numpy(np.frombuffer(before["torch"], dtype=np.uint8).copy()))
    if dict(os.environ) != before["environ"]:
        os.environ.clear()
        os.environ.update(before["environ"])


@contextlib.contextmanager
def restored() -> Iterator[dict[str, Any]]:
    """The process as it was on entry, once the block ends (the snapshot taken on entry is yielded)."""
    before = snapshot()
    try:
        yield before
    finally:
        restore(before)
