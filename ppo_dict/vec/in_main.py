"""Env calls in this process (the main process's share of the envs, the in-process pool, the eval env) under the
watchdog's deadline, and their failures reported as a worker's are: an env that raises is an
:class:`EnvWorkerError` (worker -1: "the main process"), one that hangs an :class:`EnvTimeoutError`.
"""

from __future__ import annotations

from typing import Any, Callable

from ppo_dict.core.errors import EnvTimeoutError, NonFiniteError
from ppo_dict.vec.watchdog import WATCHDOG, Owner
from ppo_dict.vec.worker import env_worker_error, error_report


def call_in_main(
    owner: Owner, command: str, call: Callable[[], Any], detail: Any, timeout: float, cleanup: Callable[[BaseException], None]
) -> Any:
    """``call()``: env calls of ``owner.runner`` in this process, under the watchdog's deadline.

    Reported as a worker's failures are, after ``cleanup(error)`` (stop the workers, close the envs):
    an env that raises gives :class:`EnvWorkerError` (worker -1: "the main process", the env, the
    command, the original exception and its traceback); one that does not return within
    ``timeout`` seconds gives :class:`EnvTimeoutError` (raised inside it by ``ppo_dict.vec.watchdog``).
    """
    WATCHDOG.arm(owner, command, detail, timeout)
    try:
        result = call()
    except Exception as exc:
        WATCHDOG.clear()
        if isinstance(exc, (EnvTimeoutError, NonFiniteError)):  # a timeout, or the work's check of what its envs gave
            cleanup(exc)
            raise
        report = error_report(-1, owner.runner, command, exc)
        cleanup(exc)
        raise env_worker_error(report, owner.label, command, detail) from exc
    except BaseException:
        WATCHDOG.clear()
        raise
    finally:
        owner.runner.active = (-1, "")
    late = WATCHDOG.disarm()
    if late is not None:  # the env caught the timeout and returned anyway
        cleanup(late)
        raise late
    return result


def open_in_main(owner: Owner, timeout: float, cleanup: Callable[[BaseException], None]) -> None:
    """Build the envs of ``owner.runner`` in this process (``runner.open()``) under the watchdog, as
    :func:`call_in_main` steps them: a constructor that raises gives :class:`EnvWorkerError` naming the
    env, one that does not return within ``timeout`` seconds :class:`EnvTimeoutError`; ``cleanup`` closes
    what was built (the runner's envs, the workers)."""
    call_in_main(owner, "constructor", owner.runner.open, "while the envs were built", timeout, cleanup)
