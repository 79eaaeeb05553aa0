"""The main process's side of the worker processes: start W of them, talk to them, stop them.

Worker w owns the env columns ``blocks[w]`` of one shared :class:`RolloutStorage`, whose env-written fields live in one
``ctx.RawArray`` (an unlinked file under /dev/shm on Linux: nothing can leak, even after SIGKILL). A rollout step is
handed to every worker at once by one store in a shared page (:mod:`ppo_dict.vec.broadcast`,
:meth:`WorkerGroup.publish`), each answering in its own word of it; other commands are a tiny pickled message per worker
over a ``ctx.Pipe`` (``ppo_dict.vec.worker`` lists them), written and read by a :class:`~ppo_dict.vec.channel.Channel`
(one system call a message; a step's frame encoded once). The main process waits on the page, and on every pipe and
every worker's process sentinel, with a timeout; there are no ``ctx.Queue``/``Lock``/``Event``: under forkserver/spawn
their named semaphores outlive a SIGKILLed process group in /dev/shm.
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
import multiprocessing
import multiprocessing.connection
import select
import signal
import time
import weakref
from multiprocessing import reduction
from typing import Any, Callable, Optional, Sequence

from ppo_dict.core.config import MP_METHODS
from ppo_dict.core.errors import PoolClosedError, WorkerDiedError, WorkerStartError, WorkerTimeoutError
from ppo_dict.core.load import BUSY, busy_at_start
from ppo_dict.core.machine import physical_cores
from ppo_dict.data.storage import RolloutStorage
from ppo_dict.vec import broadcast
from ppo_dict.vec.backend import EnvBackend
from ppo_dict.vec.channel import Channel, encode, frame_of, wait_for
from ppo_dict.vec.processes import CLOSE_GRACE, columns_text, main_not_rerun, start_failure_text, stop_workers  # noqa: F401
from ppo_dict.vec.shared_memory import check_shared_memory, plan_layout, view_alloc
from ppo_dict.vec.watchdog import KILLERS
from ppo_dict.vec.work import Header
from ppo_dict.vec.worker import WorkerArgs, env_worker_error, worker_main

#: Seconds a waiting process looks before it sleeps where every process has a physical core (``spin_wait_us`` 1000:
#: :func:`default_spin`).
SPIN_WAIT = 0.001


def default_spin(processes: int) -> float:
    """How long waits look before they sleep (:func:`~ppo_dict.vec.channel.wait_for`) for ``processes``
    worker processes beside this one: :data:`SPIN_WAIT` where each of them and
    this process have a physical core of their own, else 0: a look would take a core that a process
    with work needs (three processes on two cores, zero-work env: 0.75-0.81x as fast with looks at
    256 envs, 1.14-1.93x at 64), and where other processes keep CPUs busy (:func:`~ppo_dict.core.load.busy_at_start`)."""
    return SPIN_WAIT if processes + 1 <= physical_cores() and busy_at_start() < BUSY else 0.0


def layout_problems(blocks: Any, mp_method: Any, step_timeout: Any, spin_wait_us: Any = None) -> list[str]:
    """What is wrong with a worker layout given from Python (the CLI's config is checked before)."""
    problems = []
    if not (
        isinstance(blocks, (list, tuple))
        and blocks
        and all(len(b) >= 1 and all(isinstance(i, int) for i in b) for b in blocks)
    ):
        problems.append(f"blocks={blocks!r}: must be a non-empty list of non-empty sequences of env columns, one per worker")
    if mp_method not in MP_METHODS:
        problems.append(f"mp_method={mp_method!r}: must be one of {', '.join(MP_METHODS)}")
    if not step_timeout > 0:
        problems.append(f"step_timeout={step_timeout!r}: must be > 0 seconds")
    if spin_wait_us is not None and not (isinstance(spin_wait_us, (int, float)) and 0 <= spin_wait_us <= 1e6):
        problems.append(f"spin_wait_us={spin_wait_us!r}: must be None or in [0, 1000000] microseconds")
    return problems


def worker_context(mp_method: Optional[str]) -> Any:
    """The start method's multiprocessing context. Under ``forkserver`` workers fork from a server that has already
    imported torch, gymnasium and us (no effect if this process's forkserver is already running)."""
    ctx = multiprocessing.get_context(mp_method)
    if mp_method == "forkserver":
        ctx.set_forkserver_preload(["__main__", worker_main.__module__])
    return ctx


class WorkerGroup:
    """One worker process per block of env columns of ``backend``, all in one shared :class:`RolloutStorage`.

    ``blocks[w]`` are worker w's columns, in order; the storage has ``n_envs`` columns (default:
    up to the largest in a block), and columns in no block are the caller's to step
    (:class:`~ppo_dict.vec.shm_pool.ShmEnvPool` with ``main_steps_envs``). ``spin_wait_us``:
    microseconds a worker waiting for its next command, and this process waiting for the answers,
    look without sleeping first (:func:`~ppo_dict.vec.channel.wait_for`; 0: sleep at once; None:
    :func:`default_spin`); :attr:`spin` holds it in seconds.
    """

    def __init__(
        self,
        backend: EnvBackend,
        blocks: Sequence[Sequence[int]],
        n_steps: int,
        mp_method: Optional[str] = "forkserver",
        step_timeout: float = 60.0,
        start_timeout: float = 120.0,
        n_envs: Optional[int] = None,
        spin_wait_us: Optional[float] = None,
        stage_keys: tuple[str, ...] = (),
        handovers: bool = True,
    ):
        problems = layout_problems(blocks, mp_method, step_timeout, spin_wait_us)
        if problems:
            raise ValueError("; ".join(problems))
        self.blocks, self.num_workers = [tuple(b) for b in blocks], len(blocks)
        self.num_envs = n_envs if n_envs is not None else max(max(b) for b in self.blocks) + 1
        #: the worker that owns each column (-1: none, the caller steps it)
        self.owner = [-1] * self.num_envs
        for w, block in enumerate(self.blocks):
            for i in block:
                self.owner[i] = w
        self.label, self.step_timeout = backend.label, step_timeout
        self.spin = self.settled_spin = default_spin(len(self.blocks)) if spin_wait_us is None else spin_wait_us / 1e6
        self.closed = False
        #: seconds spent handing commands to the workers (a write each: where a worker sleeps, its wake-up's
        #: cost to this process; on a host with fewer CPUs than processes, the woken worker can take this CPU)
        self.sending = 0.0
        self._awaiting: Optional[tuple[str, set[int], Any]] = None  # (command, pending workers, detail)
        ctx = worker_context(mp_method)
        layout = self._shared_storage(ctx, backend, n_steps, stage_keys)
        self._control, self.page = self._handover_page(ctx, handovers)
        self._procs: list = []
        self._channels: list[Channel] = []  # the main process's line to each worker
        self.pids: list[int] = []  # kept after close, for checks that they are gone
        # Registered before the first start, so a failure half-way still stops what started.
        self._finalizer = weakref.finalize(self, stop_workers, self._procs, self._channels, CLOSE_GRACE, self.page)
        KILLERS.add(self)  # the watchdog's last resort SIGKILLs them before it ends this process
        try:
            args_of = functools.partial(self._worker_args, backend, layout, n_steps, tuple(stage_keys))
            self._start(ctx, mp_method, args_of, rerun_main=getattr(backend, "needs_main", True))
            self._awaiting = ("constructor", set(range(self.num_workers)), None)
            self.gather(timeout=start_timeout)
        except BaseException:
            self.close(grace=0.2)
            raise

    def _shared_storage(self, ctx: Any, backend: EnvBackend, n_steps: int, stage_keys: tuple[str, ...]) -> Any:
        """The rollout storage in memory every process shares (its size checked against the system's first); returns
        its layout, which the workers map."""
        layout = plan_layout(
            backend.observation_space, backend.action_space, n_steps, self.num_envs, backend.info_keywords, stage_keys
        )
        check_shared_memory(layout.nbytes)
        self._buffer = ctx.RawArray("b", layout.nbytes)
        alloc = view_alloc(self._buffer, layout)
        self.storage = RolloutStorage(
            backend.observation_space,
            backend.action_space,
            n_steps,
            self.num_envs,
            alloc=alloc,
            info_keywords=backend.info_keywords,
            stage_keys=stage_keys,
        )
        return layout

    def _worker_args(self, backend: EnvBackend, layout: Any, n_steps: int, stage_keys: tuple[str, ...], w: int) -> WorkerArgs:
        """What worker ``w`` starts with: its envs, the backend that makes them, the shared memory and its layout."""
        return WorkerArgs(
            w,
            tuple(self.worker_envs(w)),
            backend,
            self._buffer,
            layout,
            n_steps,
            self.num_envs,
            self.spin,
            stage_keys,
            self._control,
            self.num_workers,
        )

    def _handover_page(self, ctx: Any, handovers: bool) -> tuple[Any, Optional[broadcast.Broadcast]]:
        """``(buffer, page)``: the shared page of hand-overs (ppo_dict.vec.broadcast) where ``handovers`` asks for it and
        this machine orders memory as it needs; else ``(None, None)``: pipes."""
        control = ctx.RawArray("b", broadcast.page_bytes(self.num_workers)) if handovers and broadcast.available() else None
        return control, None if control is None else broadcast.Broadcast(memoryview(control).cast("B"), self.num_workers)

    def _start(self, ctx: Any, mp_method: str, args_of: Any, rerun_main: bool = True) -> None:
        """Start every worker (``rerun_main``: see :func:`main_not_rerun`), and watch each one's pipe and process
        sentinel. A worker that cannot be started is a :class:`WorkerStartError` (the caller stops those already started)."""
        for w in range(self.num_workers):
            child_conn = None
            try:
                parent_conn, child_conn = ctx.Pipe(duplex=True)
                proc = ctx.Process(
                    target=worker_main, args=(args_of(w), child_conn), name=f"ppo_dict-env-worker-{w}", daemon=True
                )
                self._channels.append(Channel(parent_conn))
                with contextlib.nullcontext() if rerun_main else main_not_rerun():
                    proc.start()
            except Exception as exc:  # OSError (EAGAIN, ENOMEM, EMFILE), or the forkserver's EOF / broken pipe
                if child_conn is not None:
                    child_conn.close()
                raise WorkerStartError(start_failure_text(w, self.worker_envs(w), self.label, mp_method, exc)) from exc
            self._procs.append(proc)
            self.pids.append(proc.pid)
            child_conn.close()  # only the worker holds its end: its death reads as EOF here
        self._poller = select.poll()
        self._fd_owner: dict[int, tuple[int, str]] = {}
        for w, (proc, channel) in enumerate(zip(self._procs, self._channels)):
            for fd, kind in ((channel.fd, "pipe"), (proc.sentinel, "sentinel")):
                self._poller.register(fd, select.POLLIN)
                self._fd_owner[fd] = (w, kind)

    # ------------------------------------------------------------------ talking to workers
    def worker_envs(self, w: int) -> tuple[int, ...]:
        return self.blocks[w]

    def send(self, msg: tuple, workers: Optional[Sequence[int]] = None, detail: Any = None, cache: bool = False) -> None:
        """Send ``msg`` to ``workers`` (default all); :meth:`gather` collects the answers.
        ``cache``: a message of ints, strings and None sent again and again (a step), encoded once."""
        workers = range(self.num_workers) if workers is None else workers
        frame = frame_of(msg) if cache else encode(msg)
        self._write({w: frame for w in workers}, msg[0], detail)

    def send_each(self, messages: dict[int, tuple], detail: Any = None) -> None:
        """Send ``messages[w]`` to each worker w; ``detail`` (step index, reset seeds) goes into errors."""
        command = next(iter(messages.values()), ("",))[0]
        self._write({w: encode(msg) for w, msg in messages.items()}, command, detail)

    def drain(self, timeout: Optional[float] = None) -> None:
        """Read the answers of a command an exception interrupted (a stop), waiting at most ``timeout`` seconds
        (default ``step_timeout``), so that none is read as the next command's."""
        if self._awaiting is not None:
            self.gather(timeout)

    def _write(self, frames: dict[int, bytes], command: str, detail: Any) -> None:
        if self.closed:
            raise PoolClosedError(f"the env workers ({self.label}) are closed; create a new pool")
        if self._awaiting is not None:
            self.gather()  # replies of an interrupted command: drain them so none is read as ours
        if not frames:
            return  # no worker owns what was asked: gather() has nothing to wait for
        self._awaiting = (command, set(frames), detail)
        channels, started = self._channels, time.perf_counter()
        for w, frame in frames.items():
            try:
                channels[w].write(frame)
            except OSError:
                pass  # the worker is dead; gather() reports it with its exit code
        broadcast.wake_all(self.page)  # workers napping on the page look at their pipes
        self.sending += time.perf_counter() - started

    # ------------------------------------------------------------------ hand-overs on the shared page
    def publish(self, header: Header) -> int:
        """Hand ``header`` to every worker by the shared page (:attr:`page` must exist); its number, for :meth:`wait`."""
        if self.closed:
            raise PoolClosedError(f"the env workers ({self.label}) are closed; create a new pool")
        if self._awaiting is not None:
            self.gather()  # replies of an interrupted command
        started = time.perf_counter()
        seq = self.page.publish(header)
        self.sending += time.perf_counter() - started
        return seq

    def wait(self, seq: int, command: str, detail: Any = None, idle: Optional[Callable[[], bool]] = None) -> None:
        """Wait until every worker finished hand-over ``seq``; ``idle``: work to do meanwhile. A failed worker's
        report (on its pipe), a dead worker or ``step_timeout`` seconds raise as :meth:`gather` does."""
        pending = set(range(self.num_workers))

        def check() -> None:
            for fd, _ in sorted(self._poller.poll(0), key=lambda e: self._fd_owner[e[0]][1] != "pipe"):
                w, kind = self._fd_owner[fd]
                msg = self._receive(w, kind, command, pending)
                if msg is not None and msg[0] == "error":
                    self._fail(env_worker_error(msg, self.label, command, detail))

        if not self.page.wait(seq, time.monotonic() + self.step_timeout, self.spin, check, idle):
            late = sorted(int(w) for w in self.page.pending(seq))
            self._fail(WorkerTimeoutError(self._timeout_message(command, late, self.step_timeout, detail)))

    def attach(self, program: Optional[bytes], handles: Sequence[int]) -> dict[int, Optional[str]]:
        """Send each worker a work program (``ppo_dict.vec.work``, pickled) and the file descriptors ``handles``;
        ``{worker: None}`` where it opened, else why not."""
        self.send(("attach", program, len(handles)))
        if handles:
            self.gather()  # each worker asks for the descriptors
            for proc, channel in zip(self._procs, self._channels):
                for fd in handles:
                    reduction.send_handle(channel.conn, fd, proc.pid)
            self._awaiting = ("attach", set(range(self.num_workers)), None)
        return self.gather()

    def gather(self, timeout: Optional[float] = None, idle: Optional[Callable[[], bool]] = None) -> dict[int, Any]:
        """Wait for every pending worker's answer: ``{worker: payload}``; ``idle``: work to do meanwhile
        (:func:`~ppo_dict.vec.channel.wait_for`).

        An exception raised by a ``call`` command (get_attr, env_method...) is re-raised here once
        every worker has answered; the workers stay usable. Raises (after stopping every worker)
        :class:`EnvWorkerError` for an env failure, :class:`WorkerDiedError` when a worker exits,
        :class:`WorkerTimeoutError` after ``timeout`` (default ``step_timeout``) seconds without all answers.
        """
        if self._awaiting is None:
            return {}
        command, pending, detail = self._awaiting
        timeout = self.step_timeout if timeout is None else timeout
        deadline = time.monotonic() + timeout
        answers: dict[int, Any] = {}
        raised: list[Exception] = []  # exceptions of get_attr/env_method calls, re-raised here
        while pending:
            remaining = deadline - time.monotonic()
            events = wait_for(self._poller, max(0, math.ceil(remaining * 1000)), self.spin, idle) if remaining > 0 else []
            if not events:
                self._fail(WorkerTimeoutError(self._timeout_message(command, sorted(pending), timeout, detail)))
            for fd, _ in sorted(events, key=lambda e: self._fd_owner[e[0]][1] != "pipe"):  # pipes before sentinels
                w, kind = self._fd_owner[fd]
                msg = self._receive(w, kind, command, pending)
                if msg is None:
                    continue
                if msg[0] == "error":
                    self._fail(env_worker_error(msg, self.label, command, detail))
                if msg[0] == "raised":
                    raised.append(msg[1])
                if w in pending:
                    pending.discard(w)
                    answers[w] = msg[1] if len(msg) > 1 else None
        self._awaiting = None
        if raised:
            raise raised[0]
        return answers

    def _receive(self, w: int, kind: str, command: str, pending: set[int]) -> Optional[tuple]:
        """Worker w's message behind a poll event, None when there is none to read; a dead worker fails the group."""
        channel = self._channels[w]
        if kind == "sentinel" and not channel.ready():
            self._fail(self._died(w, command))
        if w not in pending and kind == "pipe" and not channel.ready():
            return None
        try:
            return channel.recv()
        except (EOFError, OSError):
            self._fail(self._died(w, command))
        return None  # unreachable: _fail raises

    def _fail(self, error: Exception) -> None:
        """Stop every worker (no grace for a hung one: it will not answer) and raise ``error``."""
        self.close(grace=0.2)
        raise error

    def _died(self, w: int, command: str) -> WorkerDiedError:
        proc = self._procs[w]
        proc.join(1.0)
        code = proc.exitcode
        how = f"exit code {code}"
        if code is not None and code < 0:
            how += f" ({signal.Signals(-code).name})"
        return WorkerDiedError(
            f"worker {w} (envs {columns_text(self.worker_envs(w))}, {self.label}, pid {proc.pid}) died with {how} during "
            f"{command!r} without reporting an error; all workers were stopped"
        )

    def _timeout_message(self, command: str, workers: list[int], timeout: float, detail: Any) -> str:
        names = ", ".join(f"worker {w} (envs {columns_text(self.worker_envs(w))}, pid {self._procs[w].pid})" for w in workers)
        at = f" at rollout step {detail}" if command == "step" and detail is not None else ""
        return (
            f"{names} did not answer {command!r}{at} within {timeout:g} s ({self.label}); an env is probably hung "
            f"(raise step_timeout if it is only slow); all workers were stopped"
        )

    # ------------------------------------------------------------------ lifetime
    def kill(self) -> None:
        """SIGKILL every worker, from any thread, without waiting (the process is about to end)."""
        if self.closed:
            return  # reaped already: their pids may belong to others now
        for pid in self.pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass

    def close(self, grace: float = CLOSE_GRACE) -> None:
        """Stop the workers: idempotent, never waits for a pending reply."""
        if self.closed:
            return
        self.closed = True
        self._awaiting = None
        self._finalizer.detach()
        stop_workers(self._procs, self._channels, grace, self.page)
