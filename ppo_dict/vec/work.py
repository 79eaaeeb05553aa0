"""What a process does with its own env columns besides stepping them: work handed to the pools from above.

The pools step envs; what else a process does with the columns it steps (the policy's rows of its
envs, their books: ``ppo_dict.algo.rollout.shard``) comes from the algorithm as a :class:`WorkProgram`, a
picklable object each worker process receives once (``ShmEnvPool.attach``) and opens on its own
storage views. ``ppo_dict.vec`` never imports the algorithm: it calls the program it is given.

A step is handed over as a :data:`Header` of ints (by the shared page of ``ppo_dict.vec.broadcast``, or
in a pipe message): its :data:`PHASES` bits say what to do, :data:`STEP` being the pools' own (step the
envs at rollout step ``header[T]``); the other bits and fields are the work's.
"""

from __future__ import annotations

from typing import Any, Optional, Protocol, Sequence

#: ``(phases, t, ...)``: a hand-over's ints (at most ``ppo_dict.vec.broadcast.HEADER``).
Header = tuple[int, ...]
#: The header's fields the pools read: which phases, the rollout step to step.
PHASES, T = 0, 1
#: The phase bit the pools act on: step the envs at rollout step ``header[T]`` (between the work's two halves).
STEP = 1


class StepWork(Protocol):
    """One process's work on its own columns around a step (``header[PHASES]`` says which parts)."""

    def before(self, header: Header) -> None:
        """Before the envs step (or in place of a step: a hand-over without :data:`STEP`)."""

    def after(self, header: Header) -> None:
        """After the envs stepped (only where :data:`STEP` is set)."""

    def close(self) -> None: ...


class WorkProgram(Protocol):
    """A picklable recipe of :class:`StepWork`, opened once in every process that steps envs."""

    def open(self, storage: Any, columns: Sequence[int], handles: Sequence[int]) -> StepWork:
        """The work of ``columns`` on this process's ``storage`` views; ``handles``: the file descriptors
        sent beside the program (shared memory of its own), in this process."""


def run_work(runner: Any, work: Optional[StepWork], header: Header) -> Any:
    """One hand-over on a runner's columns: the work's first part, the envs' step where asked, the work's
    second part. Returns the runner's step result (its infos where it records them), else None."""
    result = None
    if work is not None:
        runner.active = (-1, "policy")
        work.before(header)
    if header[PHASES] & STEP:
        runner.active = (-1, "step")
        result = runner.step(header[T])
        if work is not None:
            runner.active = (-1, "policy")
            work.after(header)
    runner.active = (-1, "")
    return result
