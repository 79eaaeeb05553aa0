"""Where a run's time goes per rollout step, and the bookkeeping a step owes that can wait for the envs."""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass
from typing import Callable


@dataclass
class Timing:
    """Where a run's wall time goes (this process's clock), summed since ``learn`` started.

    Per rollout step: ``policy`` (sampling the actions), ``envs`` (from handing the actions over
    until every env has stepped: the main process's own envs and the wait for the workers, less
    ``overlapped``), ``bookkeeping`` (episode statistics, normalisation, the time-limit bootstrap,
    done before the next step) and ``overlapped`` (the bookkeeping done while the workers step:
    :class:`OwedWork`); per iteration: ``rollout`` (the whole collection with its GAE) and ``update``.
    Where each process samples its own envs' actions (``ppo_dict.algo.rollout.sharded_rollout``): ``policy`` is this
    process's drawing of the step's random numbers outside the wait, ``envs`` the hand-over's span (this
    process's own rows and envs, and the wait), ``serial`` the time no process has work (the whole-batch books,
    the hand-over itself).
    """

    policy: float = 0.0
    envs: float = 0.0
    bookkeeping: float = 0.0
    rollout: float = 0.0
    update: float = 0.0
    steps: int = 0  # rollout steps (each of n_envs env steps)
    update_threads: int = 0
    overlapped: float = 0.0  # owed bookkeeping done while waiting for the envs (inside ``envs``'s span)
    # the policy where the envs are: this process's time when no process has work
    # (ppo_dict.algo.rollout.sharded_rollout)
    serial: float = 0.0
    busy_elsewhere: float = 0.0  # CPUs other processes kept busy over the last rollout (ppo_dict.core.load)

    def logs(self, n_envs: int) -> dict[str, float]:
        """The ``time/*`` keys besides sb3's: rates and per-step costs in microseconds."""
        per_step = 1e6 / max(self.steps, 1)
        return {
            "time/rollout_fps": int(self.steps * n_envs / max(self.rollout, 1e-9)),
            "time/rollout_seconds": round(self.rollout, 3),
            "time/update_seconds": round(self.update, 3),
            "time/policy_us": round(self.policy * per_step, 1),
            "time/envs_us": round((self.envs - self.overlapped) * per_step, 1),
            "time/bookkeeping_us": round(self.bookkeeping * per_step, 1),
            "time/overlapped_us": round(self.overlapped * per_step, 1),
            "time/serial_us": round(self.serial * per_step, 1),
            "time/cpus_busy_elsewhere": round(self.busy_elsewhere, 2),
            "time/update_threads": self.update_threads,
        }


#: The ``time/*`` keys of :class:`Timing` (wall-clock measurements: they differ between two runs).
TIMING_KEYS = tuple(Timing().logs(1))


class OwedWork:
    """Bookkeeping a rollout step owes that nothing reads before the rollout's end: the episode
    statistics and the time-limit bootstrap of cut episodes (``rewards[t]``, read by GAE alone).

    Exact rollouts can do it while the workers step the next step (:meth:`work` is the pool's
    ``idle``: one unit a call), instead of before the policy acts: the same operations on the same
    inputs, in the same order, so the same floats; what it reads that a worker may overwrite at the
    next step (its terminal observations, its episode row) is copied first. :meth:`settle` does
    what is left: before the rollout ends, and before any callback could look (sb3's callbacks see
    step t's statistics and bootstrapped rewards at step t + 1).
    """

    def __init__(self, timing: "Timing"):
        self.units: deque[Callable[[], None]] = deque()
        self.timing = timing

    def owe(self, unit: Callable[[], None]) -> None:
        self.units.append(unit)

    def work(self) -> bool:
        """Do the oldest unit (while the envs step: its time is counted as ``overlapped``); whether any is left."""
        if self.units:
            started = time.perf_counter()
            self.units.popleft()()
            self.timing.overlapped += time.perf_counter() - started
        return bool(self.units)

    def settle(self) -> None:
        """Do every unit owed (on the critical path: the caller counts it as ``bookkeeping``)."""
        while self.units:
            self.units.popleft()()
