"""Stopping a run: the stop signals' handler, and training until done or stopped, with what a stop saves.

Ctrl-C / SIGTERM / SIGHUP (the first one) stop a run within seconds, whatever it is doing: a rollout or an update in
progress is dropped at once, and the run saves the state from before that rollout (the model, Adam and the RNG
streams as the last update left them: ``checkpoint.LastUpdate``; the envs as the rollout began: the runners'
snapshots, ``ppo_dict.run.env_states``), so that ``--resume`` continues as the run that was never stopped. A signal
during the evaluation or a checkpoint write after an update lets them finish, then stops. A second signal stops at
once without writing anything more; once the run is closing (its writes done: ``StopFlag.closing``), it lets the
closing finish (the workers, the outputs, the lock) and says so; a third changes nothing.
"""

from __future__ import annotations

import signal
import sys
from typing import Any, Callable, Optional

from ppo_dict.algo.ppo import PPO
from ppo_dict.core.errors import EnvCallInterrupted, RolloutDropped, UpdateInterrupted, WorkerDiedError
from ppo_dict.run import startup
from ppo_dict.run.checkpoint import LastUpdate
from ppo_dict.run.env_states import STOP_TIMEOUT, entries_of, keep_snapshots, take_env_states
from ppo_dict.vec import EnvPool, watchdog


class StopFlag:
    """SIGINT/SIGTERM/SIGHUP handler: the first signal asks training to stop, a second one interrupts.

    ``ppo_dict.vec.watchdog`` sees the same signals (through the wakeup fd): it interrupts an env
    call still running :data:`~ppo_dict.vec.watchdog.STOP_GRACE` seconds after the first, and ends
    the process if it has not ended :data:`~ppo_dict.vec.watchdog.SECOND_GRACE` seconds after the second.
    """

    def __init__(self, quiet: bool = False) -> None:
        self.signum: Optional[int] = None
        self.quiet = quiet  # a rank of a torchrun run: rank 0 says so once every rank stopped (ppo_dict.run.ranks)
        self.phase: Callable[[], str] = lambda: ""  # "rollout" or "update" while one runs, which the signal then drops
        self.again = 0  # signals after the first
        # the run is closing (its writes done, or given up): the workers, the outputs, the lock and the interpreter's exit
        # are left to finish (a second of work; the watchdog ends the process SECOND_GRACE seconds after a second signal)
        self.closing = False

    def __call__(self, signum: int, frame: Any) -> None:
        if self.signum is not None:
            self.again += 1
            if self.again == 1 and not self.closing:
                raise KeyboardInterrupt  # second signal: unwind now, close() kills the workers
            if self.again == 1 and not self.quiet:  # a KeyboardInterrupt now would leave workers unclosed and a traceback
                said = watchdog.stopped_text(watchdog.WATCHDOG.written)
                print(
                    f"{signal.Signals(signum).name} received twice: stopped at once {said}; the run is closing its workers",
                    file=sys.stderr,
                    flush=True,
                )
            return  # a third: the second's unwinding goes on
        self.signum = signum
        name = signal.Signals(signum).name
        if not self.quiet:
            print(
                f"\n{name} received: saving the state from before the current rollout (the model as the last update left "
                f"it, the envs as the rollout began) and stopping; send it again to stop at once without saving",
                file=sys.stderr,
                flush=True,
            )
        phase = self.phase()
        if phase == "update":
            raise UpdateInterrupted(f"{name} during an update")
        if phase == "rollout":
            raise EnvCallInterrupted(f"{name} during a rollout")

    def install(self) -> None:
        for signum in startup.taken_signals():
            signal.signal(signum, self)

    @property
    def exit_code(self) -> int:
        return 0 if self.signum is None else 128 + self.signum


def learn_until_stopped(
    ppo: PPO,
    pool: EnvPool,
    stop: StopFlag,
    after_update: Callable[[PPO], None],
    should_stop: Optional[Callable[[], bool]] = None,
    say: bool = True,
) -> None:
    """``ppo.learn`` until done or stopped (``should_stop``: asked after each update; by default whether a stop
    signal came). A stop that interrupted an env call or an update (or found a worker killed by the same signal, sent
    to the process group; or, over ranks, another rank's: ``RolloutDropped``) drops the rollout in progress and its
    update: the envs' states from when that rollout began are read from the workers, the workers are stopped, and the
    model goes back to its state after the last update, to be saved with them (``say``: said so)."""
    last_update = LastUpdate(ppo)
    keep_snapshots(ppo)
    begun = [getattr(pool, "rollouts_begun", 0)]  # the rollouts whose step 0 the pool had sent when the state was kept

    def after(m: PPO) -> None:
        after_update(m)
        last_update.take(m)
        begun[0] = getattr(pool, "rollouts_begun", 0)

    try:
        ppo.learn(should_stop=should_stop or (lambda: stop.signum is not None), after_update=after)
    except (EnvCallInterrupted, WorkerDiedError) as exc:
        if isinstance(exc, RolloutDropped) and stop.signum is None:
            stop.signum = exc.signum  # another rank's stop: every rank drops the rollout
        if stop.signum is None and not watchdog.WATCHDOG.signals:
            raise
        # the envs as the dropped rollout began: the runners' snapshots of its step 0, where it was sent (each runner
        # answers after the commands before, so it has taken them); else the envs as they are, not yet stepped
        now = getattr(pool, "rollouts_begun", 0)
        states = take_env_states(ppo, rollout=now if now > begun[0] else None, timeout=STOP_TIMEOUT)
        pool.close()
        last_update.restore(ppo)
        local = None if states is None else (states, last_update.carry)
        if ppo.ranks is None:
            ppo.env_snapshot = entries_of([local])
        else:  # every rank's together, when the ranks agree on the state rank 0 saves (RankRun.stopped)
            ppo.env_local = local
        if say:
            where = "an update" if isinstance(exc, UpdateInterrupted) else "a rollout"
            print(
                f"stopped in the middle of {where} ({type(exc).__name__}: {exc}); the rollout is dropped and the state from "
                f"before it ({ppo.num_timesteps} steps{', the envs as it began' if states is not None else ''}) is saved",
                file=sys.stderr,
                flush=True,
            )
    if stop.signum is None and watchdog.WATCHDOG.signals:
        stop.signum = watchdog.WATCHDOG.signals[0]  # its handler never ran (the main thread was in C code)
