"""Env worker processes that write straight into shared-memory rollout storage.

Worker w owns envs ``[w*E, (w+1)*E)`` and steps them in turn with :class:`EnvRunner`, the same
code the in-process pool runs, so both pools give identical numbers. For a Godot game the worker
launches and owns the game processes whose agents are its columns and steps them with
``envs.godot.pool.GodotRunner`` (EnvRunner's interface); they die with it (``PR_SET_PDEATHSIG``). The env-written storage
fields live in one ``ctx.RawArray`` (an unlinked file under /dev/shm on Linux: nothing can leak,
even after SIGKILL), handed to each worker when it starts; the worker rebuilds the same numpy views.

Control is a tiny pickled message per worker per step over a ``ctx.Pipe``: main sends
``("step", t)``, the worker steps its envs and answers ``("ok", None)`` or an error report.
Both sides block in ``poll(2)`` (no CPU while idle): main on every pipe and every worker's
process sentinel with the step timeout, a worker on its pipe and its parent's sentinel, so a
worker exits as soon as the main process dies. There are no ``ctx.Queue``/``Lock``/``Event``:
under forkserver/spawn their named semaphores outlive a SIGKILLed process group in /dev/shm.

Message protocol (main -> worker): ``("step", t)``, ``("reset", seeds, options)``,
``("call", kind, env_ids, name, args, kwargs)`` for get_attr/set_attr/env_method/env_is_wrapped,
``("close",)``. Worker -> main: ``("ready",)`` once its envs are built, ``("ok", payload)`` per
command, or :data:`ErrorReport` and exit.
"""
from __future__ import annotations

import contextlib
import math
import multiprocessing
import multiprocessing.connection
import os
import pickle
import select
import signal
import sys
import time
import traceback
import weakref
from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence

import gymnasium as gym
from gymnasium import spaces

from envs import EnvSpec, is_godot, make_env
from ppo_dict.config import MP_METHODS
from ppo_dict.env_pool import EnvRunner, env_seeds
from ppo_dict.errors import EnvWorkerError, WorkerDiedError, WorkerTimeoutError
from ppo_dict.shared_memory import SharedLayout, check_shared_memory, plan_layout, view_alloc
from ppo_dict.storage import RolloutStorage


#: Seconds workers get to exit after "close" before they are terminated, then killed.
CLOSE_GRACE = 1.0
#: ``("error", worker_idx, env_idx, command, exc_type, message, traceback_text)``; env_idx is -1
#: when the failure was not inside an env call.
ErrorReport = tuple[str, int, int, str, str, str, str]
EnvFactory = Callable[[int], gym.Env]


class PoolClosedError(RuntimeError):
    """The pool was closed (by ``close()`` or after a worker failure) and cannot be used."""


# ---------------------------------------------------------------------------------------------
# The worker process


def _limit_threads() -> None:
    """One thread per worker for every numeric library: W workers already fill the cores."""
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ[var] = "1"
    if "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(1)
    if "cv2" in sys.modules:
        sys.modules["cv2"].setNumThreads(1)


@dataclass(frozen=True)
class WorkerArgs:
    """Everything a worker needs, pickled once at process start (the RawArray by fd passing)."""

    worker_idx: int
    env_ids: tuple[int, ...]
    factory: EnvFactory
    buffer: Any
    layout: SharedLayout
    observation_space: spaces.Space
    action_space: spaces.Space
    n_steps: int
    n_envs: int
    record_infos: bool


def _call_envs(runner: EnvRunner, kind: str, env_ids: Sequence[int], name: str, args: tuple, kwargs: dict) -> list[Any]:
    """sb3 ``DummyVecEnv.get_attr/set_attr/env_method/env_is_wrapped`` on this worker's envs."""
    if not isinstance(runner, EnvRunner):
        raise NotImplementedError(f"{kind}({name!r}): a Godot game's agents are not gymnasium envs, so they have no attributes or methods to call")
    local = {i: env for i, env in zip(runner.env_ids, runner.envs)}
    results = []
    for i in env_ids:
        runner.active = (i, kind)
        env = local[i]
        if kind == "get_attr":
            results.append(env.get_wrapper_attr(name))
        elif kind == "set_attr":
            results.append(setattr(env, name, args[0]))
        elif kind == "env_method":
            results.append(env.get_wrapper_attr(name)(*args, **kwargs))
        elif kind == "has_attr":
            results.append(env.has_wrapper_attr(name))
        elif kind == "env_is_wrapped":
            results.append(_is_wrapped(env, args[0]))
        else:
            raise ValueError(f"unknown env call {kind!r}")
    return results


def _answer_call(runner: EnvRunner, call: tuple) -> tuple[str, Any]:
    """``("ok", results)``, or ``("raised", exception)`` for the caller to re-raise: a missing
    attribute is the caller's mistake (sb3's VecEnv probes with get_attr), not a broken env."""
    try:
        return ("ok", _call_envs(runner, *call))
    except Exception as exc:  # noqa: BLE001 (handed to the caller, who re-raises it)
        exc.add_note(f"(in env {runner.active[0]}, inside its worker process)")
        try:
            pickle.dumps(exc)
        except Exception:  # noqa: BLE001 (an unpicklable exception still deserves its message)
            exc = RuntimeError(f"{type(exc).__name__}: {exc}")
        return ("raised", exc)


def _is_wrapped(env: gym.Env, wrapper_class: type) -> bool:
    """sb3 ``env_util.is_wrapped`` without importing sb3 here."""
    while isinstance(env, gym.Wrapper):
        if isinstance(env, wrapper_class):
            return True
        env = env.env
    return False


def worker_main(a: WorkerArgs, conn: multiprocessing.connection.Connection) -> None:
    """A worker's whole life: build envs, then serve commands until "close" or the parent dies."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is main's to handle; it closes us.
    _limit_threads()
    runner: Optional[EnvRunner] = None
    command, env_idx = "constructor", -1
    try:
        storage = RolloutStorage(a.observation_space, a.action_space, a.n_steps, a.n_envs, alloc=view_alloc(a.buffer, a.layout))
        spec = getattr(a.factory, "spec", None)
        if spec is not None and is_godot(spec):
            from envs.godot.pool import GodotRunner, launch_games

            env_idx = a.env_ids[0]
            runner = GodotRunner(launch_games(spec, a.env_ids), a.env_ids, storage)
        else:
            envs = []
            for env_idx in a.env_ids:
                envs.append(a.factory(env_idx))
            _limit_threads()  # again: env constructors may have imported torch or cv2
            runner = EnvRunner(envs, a.env_ids, storage, record_infos=a.record_infos)
        conn.send(("ready",))
        parent = multiprocessing.parent_process()
        poller = select.poll()
        poller.register(conn.fileno(), select.POLLIN)
        if parent is not None:
            poller.register(parent.sentinel, select.POLLIN)
        while True:
            ready = {fd for fd, _ in poller.poll()}
            if conn.fileno() not in ready:
                return  # the main process died: nobody to serve
            try:
                msg = conn.recv()
            except EOFError:
                return
            command, env_idx = msg[0], -1
            if command == "step":
                runner.step(msg[1])
                conn.send(("ok", (runner.infos, runner.reset_infos) if a.record_infos else None))
            elif command == "reset":
                runner.reset(msg[1], msg[2])
                conn.send(("ok", runner.reset_infos if a.record_infos else None))
            elif command == "call":
                conn.send(_answer_call(runner, msg[1:]))
            elif command == "close":
                return
            else:
                raise ValueError(f"unknown command {command!r}")
            runner.active = (-1, "")
    except BaseException as exc:  # noqa: B036 (report everything, including SystemExit, then exit)
        if runner is not None and runner.active[0] >= 0:
            env_idx, command = runner.active
        report = ("error", a.worker_idx, env_idx, command, type(exc).__name__, str(exc), traceback.format_exc())
        try:
            conn.send(report)
        except OSError:
            pass  # main is gone: nobody to tell
        sys.exit(1)
    finally:
        if runner is not None:
            _close_envs(runner)
        conn.close()


def _close_envs(runner: EnvRunner) -> None:
    """Close every env (a Godot runner: kill and reap its games), ignoring errors."""
    for close in [env.close for env in runner.envs] if isinstance(runner, EnvRunner) else [runner.close]:
        try:
            close()
        except Exception:  # noqa: BLE001 (closing after a failure must not hide it)
            pass


# ---------------------------------------------------------------------------------------------
# The main side: start, talk to, and stop W workers


def _stop(procs: list, conns: list, grace: float) -> None:
    """Send close, wait ``grace``, terminate, wait 1 s, kill, reap; close the pipes.

    Never reads a reply, so a worker still busy with a step cannot block it. Module-level so
    that ``weakref.finalize`` holds no reference to the pool.
    """
    for conn in conns:
        try:
            conn.send(("close",))
        except (OSError, ValueError):
            pass
    for escalate, wait_s in ((None, grace), ("terminate", 1.0), ("kill", 1.0)):
        alive = [p for p in procs if p.is_alive()]
        if not alive:
            break
        for p in alive:
            if escalate is not None:
                getattr(p, escalate)()
        # Until every one has exited or wait_s is up: connection.wait returns when the first
        # sentinel is ready, and a worker still closing its envs (reaping a Godot game) must not
        # be terminated half-way because another was quicker.
        deadline = time.monotonic() + wait_s
        while alive and time.monotonic() < deadline:
            multiprocessing.connection.wait([p.sentinel for p in alive], timeout=deadline - time.monotonic())
            alive = [p for p in alive if p.is_alive()]
    for p in procs:
        p.join(0.1)
        if p.exitcode is not None:
            p.close()
    for conn in conns:
        conn.close()


class WorkerGroup:
    """W worker processes stepping envs into one shared :class:`RolloutStorage`.

    ``label`` names the env in error messages (``gym_Reacher-v2 (Reacher-v5)``).
    """

    def __init__(
        self,
        factory: EnvFactory,
        observation_space: spaces.Space,
        action_space: spaces.Space,
        num_workers: int,
        envs_per_worker: int,
        n_steps: int,
        label: str,
        mp_method: Optional[str] = "forkserver",
        step_timeout: float = 60.0,
        start_timeout: float = 120.0,
        record_infos: bool = False,
        first_env: int = 0,
    ):
        """``first_env`` leading env columns belong to the storage but to no worker: the caller
        steps them itself (:class:`ShmEnvPool` with ``main_steps_envs``)."""
        problems = []
        if not (isinstance(num_workers, int) and num_workers >= 1):
            problems.append(f"num_workers={num_workers!r}: must be an int >= 1")
        if not (isinstance(envs_per_worker, int) and envs_per_worker >= 1):
            problems.append(f"envs_per_worker={envs_per_worker!r}: must be an int >= 1")
        if mp_method not in MP_METHODS:
            problems.append(f"mp_method={mp_method!r}: must be one of {', '.join(MP_METHODS)}")
        if not step_timeout > 0:
            problems.append(f"step_timeout={step_timeout!r}: must be > 0 seconds")
        if problems:
            raise ValueError("; ".join(problems))
        self.num_workers, self.envs_per_worker, self.first_env = num_workers, envs_per_worker, first_env
        self.num_envs = first_env + num_workers * envs_per_worker
        self.label, self.step_timeout = label, step_timeout
        self.closed = False
        self._awaiting: Optional[tuple[str, set[int], Any]] = None  # (command, pending workers, detail)

        layout = plan_layout(observation_space, action_space, n_steps, self.num_envs)
        check_shared_memory(layout.nbytes)
        ctx = multiprocessing.get_context(mp_method)
        if mp_method == "forkserver":
            # Workers fork from a server that has already imported torch, gymnasium and us
            # (no effect if this process's forkserver is already running).
            ctx.set_forkserver_preload(["__main__", __name__])
        self._buffer = ctx.RawArray("b", layout.nbytes)
        self.storage = RolloutStorage(observation_space, action_space, n_steps, self.num_envs, alloc=view_alloc(self._buffer, layout))

        self._procs: list = []
        self._conns: list = []
        self.pids: list[int] = []  # kept after close, for checks that they are gone
        # Registered before the first start, so a failure half-way still stops what started.
        self._finalizer = weakref.finalize(self, _stop, self._procs, self._conns, CLOSE_GRACE)
        try:
            for w in range(num_workers):
                ids = tuple(self.worker_envs(w))
                args = WorkerArgs(w, ids, factory, self._buffer, layout, observation_space, action_space, n_steps, self.num_envs, record_infos)
                parent_conn, child_conn = ctx.Pipe(duplex=True)
                proc = ctx.Process(target=worker_main, args=(args, child_conn), name=f"ppo_dict-env-worker-{w}", daemon=True)
                self._conns.append(parent_conn)
                proc.start()
                self._procs.append(proc)
                self.pids.append(proc.pid)
                child_conn.close()  # only the worker holds its end: its death reads as EOF here
            self._poller = select.poll()
            self._fd_owner: dict[int, tuple[int, str]] = {}
            for w, (proc, conn) in enumerate(zip(self._procs, self._conns)):
                for fd, kind in ((conn.fileno(), "pipe"), (proc.sentinel, "sentinel")):
                    self._poller.register(fd, select.POLLIN)
                    self._fd_owner[fd] = (w, kind)
            self._awaiting = ("constructor", set(range(num_workers)), None)
            self.gather(timeout=start_timeout)
        except BaseException:
            self.close(grace=0.2)
            raise

    # ------------------------------------------------------------------ talking to workers
    def worker_envs(self, w: int) -> range:
        start = self.first_env + w * self.envs_per_worker
        return range(start, start + self.envs_per_worker)

    def send(self, msg: tuple, workers: Optional[Sequence[int]] = None, detail: Any = None) -> None:
        """Send ``msg`` to ``workers`` (default all); :meth:`gather` collects the answers."""
        workers = range(self.num_workers) if workers is None else workers
        self.send_each({w: msg for w in workers}, detail)

    def send_each(self, messages: dict[int, tuple], detail: Any = None) -> None:
        """Send ``messages[w]`` to each worker w; ``detail`` (step index, reset seeds) goes into errors."""
        if self.closed:
            raise PoolClosedError(f"the env workers ({self.label}) are closed; create a new pool")
        if self._awaiting is not None:
            self.gather()  # replies of an interrupted command: drain them so none is read as ours
        self._awaiting = (next(iter(messages.values()))[0], set(messages), detail)
        for w, msg in messages.items():
            try:
                self._conns[w].send(msg)
            except OSError:
                pass  # the worker is dead; gather() reports it with its exit code

    def gather(self, timeout: Optional[float] = None) -> dict[int, Any]:
        """Wait for every pending worker's answer: ``{worker: payload}``.

        An exception raised by a ``call`` command (get_attr, env_method...) is re-raised here once
        every worker has answered; the workers stay usable. Raises (after stopping every worker) :class:`EnvWorkerError` for an env failure,
        :class:`WorkerDiedError` when a worker exits, :class:`WorkerTimeoutError` after
        ``timeout`` (default ``step_timeout``) seconds without all answers.
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
            events = self._poller.poll(max(0, math.ceil(remaining * 1000))) if remaining > 0 else []
            if not events:
                self._fail(WorkerTimeoutError(self._timeout_message(command, sorted(pending), timeout, detail)))
            for fd, _ in sorted(events, key=lambda e: self._fd_owner[e[0]][1] != "pipe"):  # pipes before sentinels
                w, kind = self._fd_owner[fd]
                conn = self._conns[w]
                if kind == "sentinel" and not conn.poll(0):
                    self._fail(self._died(w, command))
                if w not in pending and kind == "pipe" and not conn.poll(0):
                    continue
                try:
                    msg = conn.recv()
                except (EOFError, OSError):
                    self._fail(self._died(w, command))
                if msg[0] == "error":
                    self._fail(self._env_error(msg, command, detail))
                if msg[0] == "raised":
                    raised.append(msg[1])
                if w in pending:
                    pending.discard(w)
                    answers[w] = msg[1] if len(msg) > 1 else None
        self._awaiting = None
        if raised:
            raise raised[0]
        return answers

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
        envs = self.worker_envs(w)
        return WorkerDiedError(
            f"worker {w} (envs {envs.start}..{envs.stop - 1}, {self.label}, pid {proc.pid}) died with {how} during {command!r} "
            f"without reporting an error; all workers were stopped"
        )

    def _timeout_message(self, command: str, workers: list[int], timeout: float, detail: Any) -> str:
        names = ", ".join(f"worker {w} (envs {self.worker_envs(w).start}..{self.worker_envs(w).stop - 1}, pid {self._procs[w].pid})" for w in workers)
        at = f" at rollout step {detail}" if command == "step" and detail is not None else ""
        return (
            f"{names} did not answer {command!r}{at} within {timeout:g} s ({self.label}); an env is probably hung "
            f"(raise step_timeout if it is only slow); all workers were stopped"
        )

    def _env_error(self, report: ErrorReport, pending_command: str, detail: Any) -> EnvWorkerError:
        _, w, env_idx, command, exc_type, message, tb = report
        who = "the main process" if w < 0 else f"worker {w}"  # w = -1: envs the main process steps
        where = f"env {env_idx}" if env_idx >= 0 else "outside env code"
        seed = ""
        if command == "reset":
            if pending_command == "reset" and detail is not None and env_idx >= 0:
                seed = f" (seed={detail[env_idx]})"
            else:
                seed = " (auto-reset after an episode end, no seed)"
        err = EnvWorkerError(
            f"{who}, {where} ({self.label}) raised in {command}{seed}: {exc_type}: {message}\n"
            f"--- {who} traceback ---\n{tb.rstrip()}"
        )
        err.worker, err.env_index, err.command = w, env_idx, command
        err.exc_type, err.exc_message, err.worker_traceback = exc_type, message, tb
        return err

    # ------------------------------------------------------------------ lifetime
    def close(self, grace: float = CLOSE_GRACE) -> None:
        """Stop the workers: idempotent, never waits for a pending reply."""
        if self.closed:
            return
        self.closed = True
        self._awaiting = None
        self._finalizer.detach()
        _stop(self._procs, self._conns, grace)


def probe_spaces(make: Callable[[], gym.Env], what: str) -> tuple[spaces.Space, spaces.Space, Optional[str]]:
    """Build one env in this process to read its spaces (storage is sized before workers start).

    Returns ``(observation_space, action_space, env id or None)``.
    """
    try:
        env = make()
    except Exception as exc:
        exc.add_note(f"while building one {what} in the main process to read its spaces (before any worker started)")
        raise
    try:
        return env.observation_space, env.action_space, getattr(env.spec, "id", None)
    finally:
        env.close()


def _main_process_runner(spec: EnvSpec, env_ids: range, storage: RolloutStorage) -> EnvRunner:
    """The runner for the env columns the main process steps itself (the same code as a worker's)."""
    if is_godot(spec):
        from envs.godot.pool import GodotRunner, launch_games

        return GodotRunner(launch_games(spec, env_ids), env_ids, storage)
    return EnvRunner([make_env(spec) for _ in env_ids], env_ids, storage)


class SpecFactory:
    """Picklable ``env index -> env`` from an :class:`EnvSpec` (imports its gym_packages).

    A worker given a Godot spec's factory launches games from ``spec`` instead of calling it.
    """

    def __init__(self, spec: EnvSpec):
        self.spec = spec

    def __call__(self, env_idx: int) -> gym.Env:
        return make_env(self.spec)


class ShmEnvPool:
    """The EnvPool of :class:`ppo_dict.ppo.PPO` with W worker processes x E envs each.

    ``storage`` is shared with the workers: PPO writes ``storage.env_actions`` and calls
    ``step(t)``; the workers write ``obs[t+1]``, ``rewards[t]``, ``terminated[t]``, ``truncated[t]``,
    ``terminal_obs`` and the episode statistics. Env i is first reset with ``seed + i``.
    """

    def __init__(
        self,
        spec: EnvSpec,
        num_workers: int,
        envs_per_worker: int,
        n_steps: int,
        mp_method: str = "forkserver",
        step_timeout: float = 60.0,
        start_timeout: float = 120.0,
        main_steps_envs: bool = False,
    ):
        self.spec = spec
        # Unknown ids and bad kwargs fail here, in this process, before any worker starts.
        if is_godot(spec):  # one short-lived game; each worker then launches its own
            from envs.godot.pool import describe, probe_game

            game = probe_game(spec)
            self.observation_space, self.action_space = game.observation_space, game.action_space
            label = describe(spec)
        else:
            self.observation_space, self.action_space, _ = probe_spaces(lambda: make_env(spec), f"env {spec.name}")
            label = spec.name if spec.name.endswith(spec.gym_id) else f"{spec.name} = {spec.gym_id}"
        # The main process steps worker 0's envs itself: it would only wait while the workers
        # step, and one process fewer competes for the cores (faster on few cores, same numbers).
        in_main = envs_per_worker if main_steps_envs and num_workers > 1 else 0
        self._group = WorkerGroup(
            SpecFactory(spec), self.observation_space, self.action_space, num_workers - (in_main > 0), envs_per_worker, n_steps, label,
            mp_method=mp_method, step_timeout=step_timeout, start_timeout=start_timeout, first_env=in_main,
        )
        self.num_envs = self._group.num_envs
        self.storage = self._group.storage
        self._main_runner: Optional[EnvRunner] = None
        if in_main:
            try:
                self._main_runner = _main_process_runner(spec, range(in_main), self.storage)
            except BaseException:
                self._group.close()
                raise

    def reset(self, seed: Optional[int]) -> None:
        """Reset env i with ``seed + i`` (no seed for ``None``) and write ``obs[0]``."""
        seeds = env_seeds(seed, self.num_envs)
        self._group.send(("reset", seeds, None), detail=seeds)
        self._in_main("reset", lambda runner: runner.reset(seeds, None), detail=seeds)
        self._group.gather()

    def step(self, t: int) -> None:
        """Step every env with ``storage.env_actions``; results land in storage at step t."""
        self._group.send(("step", t), detail=t)
        self._in_main("step", lambda runner: runner.step(t), detail=t)
        self._group.gather()

    def _in_main(self, command: str, call: Callable[[EnvRunner], None], detail: Any) -> None:
        """Run ``call`` on the envs this process steps, while the workers step theirs.

        An env failure here is reported like a worker's (:class:`EnvWorkerError` naming the env,
        the command and the original exception with its traceback), after the workers answer.
        """
        runner = self._main_runner
        if runner is None:
            return
        try:
            call(runner)
        except Exception as exc:
            env_idx, active_command = runner.active
            report = ("error", -1, env_idx, active_command or command, type(exc).__name__, str(exc), traceback.format_exc())
            with contextlib.suppress(Exception):
                self._group.gather()  # the workers' answers to this command, so none is left pending
            self.close()
            raise self._group._env_error(report, command, detail) from exc
        finally:
            runner.active = (-1, "")

    @property
    def pids(self) -> list[int]:
        return self._group.pids

    @property
    def closed(self) -> bool:
        return self._group.closed

    def close(self) -> None:
        if self._main_runner is not None:
            runner, self._main_runner = self._main_runner, None
            _close_envs(runner)
        self._group.close()
