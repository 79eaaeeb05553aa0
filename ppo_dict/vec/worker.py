"""A worker process, and the messages it exchanges with the main process.

A worker receives :class:`WorkerArgs` once (the shared buffer by fd passing, the env backend
pickled), rebuilds the storage's numpy views of the shared buffer, builds its block's runner and
serves commands until "close" or until the main process dies.

Messages, main -> worker: ``("step", t)`` or ``("step", t, first, end)`` (only columns
``[first, end)``), ``("work", header)`` (a hand-over of ``ppo_dict.vec.work``, where the shared page of
``ppo_dict.vec.broadcast`` does not carry it), ``("attach", program, n)`` (a work program, pickled, and
``n`` file descriptors sent once the worker answers ``("send",)``), ``("reset", seeds, options)``,
``("call", kind, indices, name, args, kwargs)`` for get_attr/set_attr/env_method/env_is_wrapped,
``("infos", on)`` (whether step and reset answer with sb3's infos: ``runner.record_infos``), ``("close",)``. Worker ->
main: ``("ready",)`` once its envs are built, ``("ok", payload)`` per command, ``("raised", exception)`` when a call's
caller erred (the worker stays usable), or an :data:`ErrorReport`, after which the worker exits.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.connection
import os
from multiprocessing import reduction
import pickle
import select
import signal
import sys
import traceback
from dataclasses import dataclass
from typing import Any, Optional

from ppo_dict.core.errors import EnvWorkerError, NonFiniteError
from ppo_dict.data.storage import RolloutStorage
from ppo_dict.vec.backend import EnvBackend
from ppo_dict.vec.broadcast import Broadcast, WorkerSide
from ppo_dict.vec.channel import Channel, wait_for
from ppo_dict.vec.runner import Runner
from ppo_dict.vec.shared_memory import SharedLayout, view_alloc
from ppo_dict.vec.work import PHASES, StepWork, run_work

#: ``("error", worker_idx, env_idx, command, exc_type, message, traceback_text)``; env_idx is -1
#: when the failure was not inside an env call; worker_idx is -1 for envs the main process steps.
ErrorReport = tuple[str, int, int, str, str, str, str]


@dataclass(frozen=True)
class WorkerArgs:
    """Everything a worker needs, pickled once at process start (the RawArray by fd passing)."""

    worker_idx: int
    block: tuple[int, ...]
    backend: EnvBackend
    buffer: Any
    layout: SharedLayout
    n_steps: int
    n_envs: int
    spin: float  # seconds a wait for the next command looks before it sleeps (WorkerGroup.spin)
    stage_keys: tuple[str, ...] = ()  # the storage's normalised keys in shared memory (RolloutStorage)
    control: Any = None  # the shared page of hand-overs (ppo_dict.vec.broadcast), None: pipes only
    workers: int = 1  # how many workers the page has lines for


def limit_threads() -> None:
    """One thread per worker for every numeric library: W workers already fill the cores."""
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ[var] = "1"
    if "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(1)
    if "cv2" in sys.modules:
        sys.modules["cv2"].setNumThreads(1)


def error_report(worker_idx: int, runner: Optional[Runner], command: str, exc: BaseException) -> ErrorReport:
    """What failed, where: the env call in progress (``runner.active``) when there was one."""
    env_idx, active_command = runner.active if runner is not None else (-1, "")
    return ("error", worker_idx, env_idx, active_command or command, type(exc).__name__, str(exc), traceback.format_exc())


def env_worker_error(report: ErrorReport, label: str, pending_command: str, detail: Any) -> Exception:
    """The :class:`EnvWorkerError` of an :data:`ErrorReport`; ``detail`` holds the reset seeds of a reset. A
    :class:`NonFiniteError` (a worker's check of what its envs gave, ``ppo_dict.algo.rollout.shard``) stays one, as
    the main process's own check raises it."""
    _, w, env_idx, command, exc_type, message, tb = report
    if exc_type == NonFiniteError.__name__:
        return NonFiniteError(message)
    who = "the main process" if w < 0 else f"worker {w}"
    where = f"env {env_idx}" if env_idx >= 0 else "outside env code"
    seed = ""
    if command == "reset":
        if pending_command == "reset" and detail is not None and env_idx >= 0:
            seed = f" (seed={detail[env_idx]})"
        else:
            seed = " (auto-reset after an episode end, no seed)"
    err = EnvWorkerError(
        f"{who}, {where} ({label}) raised in {command}{seed}: {exc_type}: {message}\n--- {who} traceback ---\n{tb.rstrip()}"
    )
    err.worker, err.env_index, err.command = w, env_idx, command
    err.exc_type, err.exc_message, err.worker_traceback = exc_type, message, tb
    return err


def answer_call(runner: Runner, call: tuple) -> tuple[str, Any]:
    """``("ok", results)``, or ``("raised", exception)`` for the caller to re-raise: a missing
    attribute is the caller's mistake (sb3's VecEnv probes with get_attr), not a broken env."""
    try:
        return ("ok", runner.call(*call))
    except Exception as exc:  # noqa: BLE001 (handed to the caller, who re-raises it)
        exc.add_note(f"(in env {runner.active[0]}, inside its worker process)")
        try:
            pickle.dumps(exc)
        except Exception:  # noqa: BLE001 (an unpicklable exception still deserves its message)
            exc = RuntimeError(f"{type(exc).__name__}: {exc}")
        return ("raised", exc)


def open_program(
    conn: multiprocessing.connection.Connection, channel: Channel, runner: Runner, msg: tuple
) -> tuple[Optional[StepWork], Any]:
    """``("attach", program, n)``: ask for the ``n`` file descriptors, then open the unpickled program on this
    worker's columns. ``(work, None)``, or ``(None, why)`` where it cannot be opened (the main process then
    keeps the work to itself)."""
    if msg[1] is None:  # detached
        return None, None
    if msg[2]:
        channel.send(("send",))
    handles = [reduction.recv_handle(conn) for _ in range(msg[2])]
    try:
        program = pickle.loads(msg[1])
        return program.open(runner.storage, runner.block, handles), None
    except Exception as exc:  # noqa: BLE001 (reported to the main process, which decides)
        return None, f"{type(exc).__name__}: {exc}"
    finally:
        for fd in handles:
            os.close(fd)


class Server:
    """A worker's loop (:meth:`serve`): hand-overs from the shared page, commands from the pipe."""

    def __init__(
        self, runner: Runner, conn: multiprocessing.connection.Connection, spin: float, side: Optional[WorkerSide] = None
    ):
        self.runner, self.conn, self.spin, self.side = runner, conn, spin, side
        self.parent = multiprocessing.parent_process()
        self.channel = Channel(conn)
        self.poller = select.poll()
        self.poller.register(self.channel.fd, select.POLLIN)
        if self.parent is not None:
            self.poller.register(self.parent.sentinel, select.POLLIN)
        self.work: Optional[StepWork] = None  # an attached work program's (ppo_dict.vec.work)

    def serve(self) -> None:
        """Answer commands until "close", or until the main process dies (nobody left to serve).

        With the shared page (``side``), waits for hand-overs there (``spin`` seconds of looks, then futex
        naps) and looks at the pipe after each nap or when a hand-over says so; without, waits in ``poll(2)``
        on the pipe and on the parent's sentinel, after looking for up to ``spin`` seconds
        (:func:`~ppo_dict.vec.channel.wait_for`): no CPU while idle longer.
        """
        while self.message_waiting():
            try:
                msg = self.channel.recv()
            except EOFError:
                return
            self.runner.active = (-1, msg[0])
            if not self.answer(msg):
                return
            self.runner.active = (-1, "")

    def message_waiting(self) -> bool:
        """Serve hand-overs until a message is on the pipe (True) or the main process died (False)."""
        channel, side = self.channel, self.side
        if side is None:
            return bool(channel.pending) or channel.fd in {fd for fd, _ in wait_for(self.poller, None, self.spin)}
        while not channel.pending:
            seq = side.next(self.spin, lambda: not self.poller.poll(0))  # None: a message on the pipe, or the parent died
            if seq is not None:
                header = side.header()
                if header[PHASES]:
                    run_work(self.runner, self.work, header)
                    side.finish(seq)
                    continue
            if channel.ready():
                return True
            if seq is None:
                return False  # nothing on the pipe: the main process died
        return True

    def answer(self, msg: tuple) -> bool:
        """Carry out one command and answer it; False after "close"."""
        command, runner, channel = msg[0], self.runner, self.channel
        if command == "step":  # ("step", t) or ("step", t, first column, end column)
            result = runner.step(msg[1], range(msg[2], msg[3]) if len(msg) > 2 else None)
            channel.send(("ok", result), cache=result is None)
        elif command == "work":
            result = run_work(runner, self.work, msg[1])
            channel.send(("ok", result), cache=result is None)
        elif command == "attach":
            self.work, why = open_program(self.conn, channel, runner, msg)
            channel.send(("ok", why))
        elif command == "reset":
            channel.send(("ok", runner.reset(msg[1], msg[2])))
        elif command == "call":
            channel.send(answer_call(runner, msg[1:]))
        elif command == "infos":
            runner.record_infos = msg[1]
            channel.send(("ok", None))
        elif command == "close":
            if self.work is not None:
                self.work.close()
            return False
        else:
            raise ValueError(f"unknown command {command!r}")
        return True


def worker_main(a: WorkerArgs, conn: multiprocessing.connection.Connection) -> None:
    """A worker's whole life: build envs, then serve commands; report any failure, then exit."""
    # The stop signals are main's to handle; it closes us (SIGKILL for a worker that does not exit). A stop signal sent
    # to every process of a job (SLURM, a terminal's process group) leaves the workers alive, so that main can still
    # read the envs' states for the checkpoint it writes on a stop (ppo_dict.run.env_states). A worker whose main
    # process died exits by itself (Server.serve).
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, signal.SIG_IGN)
    # A forked worker inherits main's handlers and its wakeup fd: nothing may run main's stop flag or reach main's
    # watchdog as a signal of main's.
    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGALRM, signal.SIG_DFL)
    limit_threads()
    runner: Optional[Runner] = None
    side = None if a.control is None else Broadcast(memoryview(a.control).cast("B"), a.workers).for_worker(a.worker_idx)
    command = "constructor"
    try:
        storage = RolloutStorage(
            a.backend.observation_space,
            a.backend.action_space,
            a.n_steps,
            a.n_envs,
            alloc=view_alloc(a.buffer, a.layout),
            info_keywords=a.backend.info_keywords,
            stage_keys=a.stage_keys,
        )
        runner = a.backend.make_runner(a.block, storage)
        runner.open()
        limit_threads()  # again: env constructors may have imported torch or cv2
        conn.send(("ready",))
        command = "serve"
        Server(runner, conn, a.spin, side).serve()
    except BaseException as exc:  # noqa: B036 (report everything, including SystemExit, then exit)
        if side is not None:
            side.fail()  # the main process stops waiting for this worker's hand-over, and reads the report
        try:
            conn.send(error_report(a.worker_idx, runner, command, exc))
        except OSError:
            pass  # main is gone: nobody to tell
        sys.exit(1)
    finally:
        if runner is not None:
            try:
                runner.close()
            except Exception:  # noqa: BLE001 (closing after a failure must not hide it)
                pass
        conn.close()
