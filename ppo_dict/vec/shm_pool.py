"""The worker pool PPO trains with: env columns in shared memory, in blocks of worker processes.

With ``main_steps_envs`` the main process steps the first ``main_envs`` columns itself (the same
runner code a worker runs) while worker processes share the rest: the main process would only
wait otherwise, and one process fewer competes for the cores. Which process steps which env
changes no number, so the shares are chosen for speed (``ppo_dict.core.layout``): in exact
rollouts every action is sampled before any env steps, so the workers wait while the main
process evaluates the policy and keeps its books, and the step ends when the last process has
stepped its envs. The main process sends every worker its command before it steps its own envs,
so its default share is a worker's less half an env per worker (:func:`~ppo_dict.core.layout.main_share`).
"""

from __future__ import annotations

import contextlib
from collections import defaultdict
from typing import Any, Callable, Optional, Sequence

from ppo_dict.core.errors import EnvTimeoutError
from ppo_dict.core.layout import Layout, layout_problems, plan_layout, split_halves
from ppo_dict.vec.backend import EnvBackend
from ppo_dict.vec.group import WorkerGroup
from ppo_dict.vec.in_main import call_in_main, open_in_main
from ppo_dict.vec.runner import Runner, Seeds, env_seeds
from ppo_dict.vec.broadcast import HEADER
from ppo_dict.vec.watchdog import WATCHDOG, Owner
from ppo_dict.vec.work import PHASES, STEP, T, Header, StepWork, WorkProgram, run_work


def worker_layout(
    backend: EnvBackend,
    layout: Optional[Layout],
    n_envs: Optional[int],
    num_workers: Optional[int],
    envs_per_worker: Optional[int],
    main_envs: Optional[int],
    main_steps_envs: bool,
    halves: bool,
) -> Layout:
    """``layout``, or where None the one the settings plan (``n_envs`` by default ``num_workers x envs_per_worker``) in
    whole units of the backend's envs; a ``ValueError`` for settings no layout honours, or a layout without worker
    processes."""
    if layout is None:
        if n_envs is None and num_workers is not None and envs_per_worker is not None:
            n_envs = num_workers * envs_per_worker
        problems = layout_problems(
            n_envs, num_workers, envs_per_worker, main_envs, main_steps_envs, halves, backend.unit, backend.label
        )
        if problems:
            raise ValueError("; ".join(problems))
        layout = plan_layout(n_envs, num_workers, envs_per_worker, main_envs, main_steps_envs, halves, backend.unit)
    if not layout.processes:
        raise ValueError(
            f"{layout.text()}: the worker pool needs worker processes (ppo_dict.vec.InProcessEnvPool steps envs here)"
        )
    return layout


class ShmEnvPool:
    """The env pool of :class:`ppo_dict.algo.ppo.PPO`: ``layout``'s worker processes, and the main
    process's share of the columns.

    ``storage`` is shared with the workers: PPO writes ``storage.env_actions`` and calls
    ``step(t)``; the workers write ``env_obs[t+1]``, ``env_rewards[t]``, ``terminated[t]``,
    ``truncated[t]``, the terminal observations and the episode statistics. Env i is first
    reset with ``seed + i``. ``spin_wait_us``: how long the workers and this process look for each
    other's messages before they sleep (:class:`~ppo_dict.vec.group.WorkerGroup`). ``infos`` and
    ``reset_infos``: each env's last sb3 infos while :meth:`record_infos` is on (the workers send
    them back with their answers, pickled: only while someone reads them).
    """

    def __init__(
        self,
        backend: EnvBackend,
        num_workers: Optional[int] = None,
        envs_per_worker: Optional[int] = None,
        n_steps: int = 1,
        mp_method: str = "forkserver",
        step_timeout: float = 60.0,
        start_timeout: float = 120.0,
        main_steps_envs: bool = False,
        main_envs: Optional[int] = None,
        halves: bool = False,
        spin_wait_us: Optional[float] = None,
        n_envs: Optional[int] = None,
        layout: Optional[Layout] = None,
        stage_keys: tuple[str, ...] = (),
        handovers: bool = True,
    ):
        """``layout``: which process steps which column (:func:`~ppo_dict.core.layout.plan_layout`); when not given,
        planned from ``n_envs`` (default ``num_workers x envs_per_worker``), ``num_workers``, ``envs_per_worker``,
        ``main_envs`` (the main process's columns: only with ``main_steps_envs`` and more than one worker), ``halves``
        (every worker owns part of each half of the columns, :attr:`halves`, so that each half steps on every core:
        double-buffered rollouts; the main process steps none then), in whole units of the backend's envs.
        ``stage_keys``: the observation keys whose normalised arrays the storage keeps in shared memory too;
        ``handovers``: steps are handed over by the shared page where the machine allows (else pipes). Raises
        ``ValueError`` for settings no layout honours."""
        self.backend = backend
        self.observation_space, self.action_space = backend.observation_space, backend.action_space
        self.layout = layout = worker_layout(
            backend, layout, n_envs, num_workers, envs_per_worker, main_envs, main_steps_envs, halves
        )
        # rollouts whose step 0 was sent (each runner snapshots its envs there: ppo_dict.run.env_states)
        self.rollouts_begun = 0
        n_envs, in_main = layout.n_envs, layout.main
        self.main_envs = in_main
        self.halves = split_halves(n_envs, backend.unit)
        self._group = WorkerGroup(
            backend,
            list(layout.blocks),
            n_steps,
            mp_method=mp_method,
            step_timeout=step_timeout,
            start_timeout=start_timeout,
            n_envs=n_envs,
            spin_wait_us=spin_wait_us,
            stage_keys=stage_keys,
            handovers=handovers,
        )
        self.num_envs = self._group.num_envs
        self.storage = self._group.storage
        self._workers_of: dict[range, list[int]] = {}
        self._main_runner: Optional[Runner] = None
        self.step_timeout = step_timeout
        self._waiting = Owner(backend.label)  # armed while waiting for the workers: a stop interrupts it
        self._recording, self._pending_main = False, None  # infos kept; what this process's envs answered the last step_async
        self.infos, self.reset_infos = [{} for _ in range(self.num_envs)], [{} for _ in range(self.num_envs)]
        self._work: Optional[StepWork] = None  # this process's share of an attached work program
        if in_main:
            self._main_runner = self._open_main(range(in_main), start_timeout)

    def _open_main(self, block: range, start_timeout: float) -> Runner:
        """The runner of the envs this process steps, its envs built (every worker stopped if that fails)."""
        runner = self.backend.make_runner(block, self.storage)
        self._owner = Owner(self.backend.label, runner)

        def cleanup(error: BaseException) -> None:
            runner.close()
            self._group.close()

        try:
            open_in_main(self._owner, start_timeout, cleanup)
        except BaseException as exc:
            if not isinstance(exc, Exception):  # KeyboardInterrupt: call_in_main cleans up only after errors
                cleanup(exc)
            raise
        return runner

    def reset(self, seed: Seeds, options: Optional[Sequence[dict[str, Any]]] = None) -> None:
        """Reset env i with ``seed + i`` (no seed for ``None``; a list: each env's seed), ``options[i]``
        when given, and write ``env_obs[0]``."""
        seeds = env_seeds(seed, self.num_envs)
        self._group.send(("reset", seeds, options), detail=seeds)
        mine = self._in_main("reset", lambda runner: runner.reset(seeds, options), detail=seeds)
        answers = self._gather("reset", None)
        if self._recording:
            self._keep(mine, answers, (self.reset_infos,))

    #: stepping waits for other processes: a caller's ``idle`` work can fill the wait
    waits = True

    def step(self, t: int, rollout: bool = True, idle: Optional[Callable[[], bool]] = None) -> None:
        """Step every env with ``storage.env_actions``; results land in storage at step t (``rollout``:
        errors name t as the rollout step; False for a vec env's step). ``idle``: work to do while the
        workers step, once this process's own envs have stepped, a unit a call (False: nothing left)."""
        if self.handovers:
            self.work((STEP, t), idle, rollout)
            return
        self.rollouts_begun += rollout and t == 0
        detail = t if rollout else None
        self._group.send(("step", t), detail=detail, cache=True)
        mine = self._in_main("step", lambda runner: runner.step(t), detail=detail)
        answers = self._gather("step", detail, idle)
        if self._recording:
            self._keep(mine, answers, (self.infos, self.reset_infos))

    @property
    def handovers(self) -> bool:
        """Whether steps go to the workers by the shared page (no infos crossing back: not while they are recorded)."""
        return self._group.page is not None and not self._recording

    def work(self, header: Header, idle: Optional[Callable[[], bool]] = None, rollout: bool = True) -> None:
        """One hand-over (``ppo_dict.vec.work``) to every worker and to this process's own columns: the attached
        work's parts around the envs' step where ``header`` asks for it; returns once every process is done.
        ``idle``: work to do while the workers work, a unit a call."""
        header = (*header, *(0,) * (HEADER - len(header)))  # every field given (the page keeps the last hand-over's otherwise)
        self.rollouts_begun += rollout and bool(header[PHASES] & STEP) and header[T] == 0
        detail = header[T] if rollout else None
        command = "step" if header[PHASES] & STEP else "policy"
        if self.handovers:
            seq = self._group.publish(header)
            self._in_main(command, lambda runner: run_work(runner, self._work, header), detail=detail)
            WATCHDOG.arm(self._waiting, command, detail, None)
            try:
                self._group.wait(seq, command, detail, idle)
            finally:
                WATCHDOG.clear()
            return
        self._group.send(("work", header), detail=detail, cache=True)
        mine = self._in_main(command, lambda runner: run_work(runner, self._work, header), detail=detail)
        answers = self._gather(command, detail, idle)
        if self._recording and header[PHASES] & STEP:
            self._keep(mine, answers, (self.infos, self.reset_infos))

    def attach(self, program: WorkProgram, pickled: bytes, handles: Sequence[int]) -> dict[int, Optional[str]]:
        """Give every worker the work ``pickled`` (``program`` pickled, with the file descriptors ``handles``)
        and open ``program`` on this process's own columns: ``{worker: None}`` where it opened, else why not.
        Any worker that could not open it leaves the work unattached everywhere (:meth:`detach`)."""
        answers = self._group.attach(pickled, handles)
        if self._main_runner is not None:
            self._work = program.open(self.storage, range(self.main_envs), handles)
        if any(answers.values()):
            self.detach()
        return answers

    def detach(self) -> None:
        """Drop the attached work (a hand-over that asks for its parts then runs none of them)."""
        self._work = None
        self._group.attach(None, ())

    def _keep(self, mine: Any, answers: dict[int, Any], into: tuple[list, ...]) -> None:
        """Each env's infos from the runners' answers (``(infos, reset_infos)`` or ``reset_infos``, in block order)."""
        blocks = [(range(self.main_envs), mine)] + [(self._group.blocks[w], answer) for w, answer in answers.items()]
        for block, answer in blocks:
            if answer is None:
                continue
            for target, values in zip(into, answer if len(into) > 1 else (answer,)):
                for i, value in zip(block, values):
                    target[i] = value

    def record_infos(self, on: bool) -> None:
        """Whether steps and resets keep sb3's infos in :attr:`infos` and :attr:`reset_infos` (each
        worker then pickles a dict per env step into its answer)."""
        if on == self._recording:
            return
        self._recording = on
        if self._main_runner is not None:
            self._main_runner.record_infos = on
        self._group.send(("infos", on))
        self._gather("infos", None)

    def call(
        self,
        kind: str,
        indices: Sequence[int],
        name: str = "",
        args: tuple = (),
        kwargs: Optional[dict] = None,
        timeout: Optional[float] = None,
        per_env: Optional[Sequence[Any]] = None,
    ) -> list[Any]:
        """sb3's ``get_attr``/``set_attr``/``env_method``/``env_is_wrapped``/``has_attr`` on envs ``indices``
        (Python list indices already resolved), in their order, each where its env lives (and the runners' own calls:
        ``Runner.call``). ``timeout``: seconds for the workers' answers (default ``step_timeout``), the answers of a
        command a stop interrupted included. ``per_env``: a value for each of ``indices``, of which each process gets
        its own envs' as the first of ``args``."""
        by_worker: dict[int, list[tuple[int, int]]] = defaultdict(list)  # worker (-1: this process) -> [(position, env)]
        for position, env in enumerate(indices):
            by_worker[self._group.owner[env]].append((position, env))
        mine = by_worker.pop(-1, [])

        def args_of(calls: list[tuple[int, int]]) -> tuple:
            return args if per_env is None else ([per_env[position] for position, _ in calls], *args)

        self._group.drain(timeout)
        self._group.send_each(
            {
                w: ("call", kind, [env for _, env in calls], name, args_of(calls), kwargs or {})
                for w, calls in by_worker.items()
            }
        )
        results: list[Any] = [None] * len(indices)
        error = None
        try:
            if mine:
                answers = self._main_runner.call(kind, [env for _, env in mine], name, args_of(mine), kwargs or {})
                for (position, _), value in zip(mine, answers):
                    results[position] = value
        except Exception as exc:  # noqa: BLE001 (re-raised once the workers have answered)
            error = exc
        answers = self._group.gather(timeout)
        if error is not None:
            raise error
        for w, calls in by_worker.items():
            for (position, _), value in zip(calls, answers[w]):
                results[position] = value
        return results

    def step_async(self, t: int, columns: range, rollout: bool = True) -> None:
        """Start stepping the envs in ``columns`` (the workers owning any of them); :meth:`step_wait`
        waits for them. Envs the main process steps are stepped here, before it returns
        (``rollout``: as :meth:`step`)."""
        self.rollouts_begun += rollout and t == 0 and columns.start == 0
        workers = self._workers_of.get(columns)
        if workers is None:
            workers = self._workers_of[columns] = [
                w for w, block in enumerate(self._group.blocks) if any(i in columns for i in block)
            ]
        detail = t if rollout else None
        self._group.send(("step", t, columns.start, columns.stop), workers=workers, detail=detail, cache=True)
        self._pending_main = self._in_main("step", lambda runner: runner.step(t, columns), detail=detail)

    def step_wait(self) -> None:
        """Wait for the envs :meth:`step_async` started."""
        answers = self._gather("step", None)
        if self._recording:
            self._keep(self._pending_main, answers, (self.infos, self.reset_infos))

    def _gather(self, command: str, detail: Any, idle: Optional[Callable[[], bool]] = None) -> dict[int, Any]:
        """The workers' answers (they time out themselves); a stop signal may interrupt the wait."""
        WATCHDOG.arm(self._waiting, command, detail, None)
        try:
            return self._group.gather(idle=idle)
        finally:
            WATCHDOG.clear()

    def _in_main(self, command: str, call: Callable[[Runner], Any], detail: Any) -> Any:
        """Run ``call`` on the envs this process steps, while the workers step theirs
        (:func:`call_in_main`: failures and hangs reported like a worker's, every worker stopped); its result."""
        runner = self._main_runner
        if runner is None:
            return None
        return call_in_main(self._owner, command, lambda: call(runner), detail, self.step_timeout, self._fail)

    def _fail(self, error: BaseException) -> None:
        """An env of this process failed: collect the workers' answers to the command (unless it hung:
        the workers may be waiting as long), so none is left pending, then stop everything."""
        if not isinstance(error, EnvTimeoutError):
            with contextlib.suppress(Exception):
                self._group.gather()
        self.close()

    @property
    def blocks(self) -> list[tuple[int, ...]]:
        """Each worker process's columns."""
        return self._group.blocks

    @property
    def pids(self) -> list[int]:
        return self._group.pids

    def adapt(self, busy_elsewhere: bool) -> None:
        """Waits that look only while no other process keeps the CPUs busy (``ppo_dict.core.load``): with a CPU
        held elsewhere, a look takes the CPU the process it waits for needs (their first setting otherwise)."""
        group = self._group
        group.spin = 0.0 if busy_elsewhere else group.settled_spin
        if group.page is not None:
            group.page.set_spin(group.spin)

    @property
    def spin(self) -> float:
        """Seconds a wait looks before it sleeps (``spin_wait_us`` as the group settled it)."""
        return self._group.spin

    @property
    def sending(self) -> float:
        """Seconds spent handing commands to the workers so far (:attr:`WorkerGroup.sending`)."""
        return self._group.sending

    @property
    def closed(self) -> bool:
        return self._group.closed

    def close(self) -> None:
        if self._main_runner is not None:
            runner, self._main_runner = self._main_runner, None
            with contextlib.suppress(Exception):
                runner.close()
        self._group.close()
