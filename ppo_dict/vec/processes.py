"""Starting and stopping worker processes: what a failed start says, and a stop that leaves nothing running."""

from __future__ import annotations

import contextlib
import errno
import multiprocessing
import multiprocessing.connection
import os
import signal
import sys
import time
from typing import Iterator, Optional, Sequence

from ppo_dict.core.machine import Machine, stat_fields
from ppo_dict.vec.broadcast import Broadcast, wake_all
from ppo_dict.vec.channel import Channel

#: Seconds workers get to exit after "close" before they are killed (they ignore SIGTERM: ``worker.worker_main``).
CLOSE_GRACE = 1.0
#: Seconds :func:`stop_workers` waits for killed workers to exit.
KILLED_EXIT = 10.0


def stop_workers(procs: list, channels: list[Channel], grace: float, page: Optional[Broadcast] = None) -> None:
    """Send close (waking the workers that nap on the shared ``page``), wait ``grace``, kill, reap; close the pipes.

    Never reads a reply, so a worker still busy with a step cannot block it. After the kill it waits
    up to :data:`KILLED_EXIT` for the exits: SIGKILL cannot be refused, but on a loaded host a killed
    process can take over a second to exit (freeing its memory), and one left to the next check is
    reported as a stray. Module-level so that ``weakref.finalize`` holds no reference to the group.
    """
    for channel in channels:
        try:
            channel.send(("close",))
        except (OSError, ValueError):
            pass
    wake_all(page)
    for signum, wait_s in ((None, grace), (signal.SIGKILL, KILLED_EXIT)):
        alive = [p for p in procs if running(p)]
        if not alive:
            break
        for p in alive:
            if signum is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(p.pid, signum)
        # Until every one has exited or wait_s is up: connection.wait returns when the first
        # sentinel is ready, and a worker still closing its envs (reaping a Godot game) must not
        # be terminated half-way because another was quicker.
        deadline = time.monotonic() + wait_s
        while alive and time.monotonic() < deadline:
            watched = [p.sentinel for p in alive if p.is_alive()]  # the rest: orphans (running), looked at every 10 ms
            timeout = deadline - time.monotonic() if len(watched) == len(alive) else min(deadline - time.monotonic(), 0.01)
            if watched:
                multiprocessing.connection.wait(watched, timeout=timeout)
            else:
                time.sleep(max(0.0, timeout))
            alive = [p for p in alive if running(p)]
    for p in procs:
        p.join(0.1)
        if p.exitcode is not None:
            p.close()
    for channel in channels:
        channel.close()


def running(proc: multiprocessing.process.BaseProcess) -> bool:
    """Whether ``proc`` still runs. ``is_alive()`` alone is not enough with forkserver: a forkserver that dies
    (a client connection closed before it sent its file descriptors, when this process hit its open-file limit
    starting the next worker) ends every worker's status pipe, which reads as an exit, while the workers,
    now orphans, still run; those are looked at by pid: running where not a zombie and in this process's
    session (a pid the system gave another process since is not taken for the worker)."""
    if proc.is_alive():
        return True
    fields = stat_fields(proc.pid)
    return fields is not None and fields[0] != "Z" and int(fields[3]) == os.getsid(0)


@contextlib.contextmanager
def main_not_rerun() -> Iterator[None]:
    """Workers started inside do not run the main module again (spawn and forkserver children import
    it by path or name, to unpickle what it defines): for backends whose workers need nothing from
    it (their env recipes pickled by value), so that a script without ``if __name__ == "__main__":``
    (sb3's documentation's, whose DummyVecEnv starts no process) does not start itself again."""
    main = sys.modules["__main__"]
    saved = {name: main.__dict__[name] for name in ("__file__", "__spec__") if name in main.__dict__}
    main.__dict__.pop("__file__", None)
    main.__spec__ = None
    try:
        yield
    finally:
        main.__dict__.update(saved)
        if "__spec__" not in saved:
            del main.__spec__


def columns_text(columns: Sequence[int]) -> str:
    """``0..15``, or ``0..7, 16..23`` for columns in several runs."""
    runs, start = [], columns[0]
    for prev, cur in zip(columns, [*columns[1:], None]):
        if cur != prev + 1:
            runs.append(f"{start}..{prev}")
            start = cur
    return ", ".join(runs)


def start_failure_text(w: int, columns: Sequence[int], label: str, mp_method: str, exc: BaseException) -> str:
    """Why worker ``w`` could not be started and what to change, from the error and the machine's limits now."""
    machine, code = Machine.probe(), getattr(exc, "errno", None)
    if code in (errno.EMFILE, errno.ENFILE):
        advice = (
            f"too many open files: this process may open {machine.nofile_limit or 'unlimited'} (ulimit -n) and has "
            f"{machine.open_files} open; raise ulimit -n, or use fewer --num_workers"
        )
    elif code == errno.EAGAIN:
        limit = f"ulimit -u {machine.nproc_limit}, {machine.user_tasks} in use" if machine.nproc_limit else "ulimit -u"
        advice = (
            f"the system refused a new process: the process limit ({limit}) or the kernel's pid_max/threads-max "
            f"({machine.task_room} tasks left) is reached; use fewer --num_workers, or raise ulimit -u"
        )
    elif code == errno.ENOMEM or isinstance(exc, MemoryError):
        mb = "unknown" if machine.memory_available is None else f"{machine.memory_available / 2**20:.0f} MB"
        advice = f"not enough memory to start a process ({mb} available); use fewer --num_workers or smaller n_steps x n_envs"
    elif mp_method == "forkserver" and isinstance(exc, (EOFError, ConnectionError, RuntimeError)):
        advice = (
            "multiprocessing's forkserver (the process that forks the workers) exited while starting it: it exits when "
            "it cannot fork (ulimit -u), open a file (ulimit -n) or get memory, or when it is killed; use fewer "
            "--num_workers, or --mp_method spawn"
        )
    else:
        advice = "use fewer --num_workers, or another --mp_method"
    return (
        f"worker {w} (envs {columns_text(columns)}, {label}) could not be started ({mp_method}): {type(exc).__name__}: "
        f"{exc}; {advice}; the workers already started were stopped"
    )
