"""Every error the trainer raises on purpose.

The root class :class:`PPODictError` and the errors of making envs (Godot games, GL backends)
live one layer down, in ``envs/errors.py`` (``envs`` never imports the trainer); they are
re-exported here, so this module names every error class ppo_dict has. Each message says who
(worker, env index, env id), what (expected vs got) and what to do.
"""

from __future__ import annotations

from ppo_dict.envs.errors import (  # noqa: F401  (re-exported)
    GodotCrashedError,
    GodotError,
    GodotNotFoundError,
    GodotProtocolError,
    GodotTimeoutError,
    PPODictError,
    RenderBackendError,
)


class ConfigError(PPODictError, ValueError):
    """One or more settings are invalid. ``problems`` lists every one of them."""

    def __init__(self, problems: list[str]):
        self.problems = list(problems)
        lines = "\n".join(f"  - {p}" for p in self.problems)
        super().__init__(f"{len(self.problems)} invalid setting(s):\n{lines}")


class EnvWorkerError(PPODictError, RuntimeError):
    """An environment raised inside a worker (constructor, reset or step).

    Attributes: ``worker`` (-1: envs the main process steps), ``env_index``, ``command``,
    ``exc_type``, ``exc_message`` and ``worker_traceback`` of the original exception.
    """


class WorkerDiedError(PPODictError, RuntimeError):
    """A worker process exited without reporting an error."""


class WorkerStartError(PPODictError, RuntimeError):
    """A worker process could not be started (fork refused, out of memory, a limit reached, the
    forkserver gone); the message names the worker, the OS error and what to change. Every worker
    already started is stopped before it is raised."""


class WorkerTimeoutError(PPODictError, TimeoutError):
    """A worker did not answer within the step timeout."""


class EnvTimeoutError(WorkerTimeoutError):
    """An env call of the main process's own envs did not return within the step timeout.

    Attributes: ``env_index``, ``command`` (``step``, ``reset``...) and ``detail`` (the rollout
    step of a step). Raised inside the hung call by ``ppo_dict.vec.watchdog``.
    """


class EnvCallInterrupted(BaseException):
    """A stop signal (Ctrl-C, SIGTERM, SIGHUP) interrupted an env call of the main process that had
    not returned within the stop grace. A ``BaseException``, as ``KeyboardInterrupt`` is, so that an
    env's ``except Exception`` does not swallow it; the command line turns it into a clean stop."""


class UpdateInterrupted(EnvCallInterrupted):
    """A stop signal came during an update: the update is dropped (it may take tens of seconds, a job's grace is
    seconds), and the run saves its state from before the rollout that update was of."""


class RolloutDropped(EnvCallInterrupted):
    """A stop signal ended a rank's rollout (its env call interrupted, its workers ended by the same signal): every rank
    of the run drops the rollout together and goes back to the state after the last update. ``signum``: the signal."""

    def __init__(self, message: str, signum: int):
        super().__init__(message)
        self.signum = signum


class PoolClosedError(PPODictError, RuntimeError):
    """The env pool was closed (by ``close()`` or after a worker failure) and cannot be used."""


class NoAsyncCallError(PPODictError, RuntimeError):
    """``step_wait()`` without a pending ``step_async()``, or ``step_async()`` twice (gymnasium's name)."""


class NonFiniteError(PPODictError, FloatingPointError):
    """NaN or inf in an observation, reward, loss or gradient."""


class CheckpointError(PPODictError, RuntimeError):
    """A checkpoint is missing, corrupt or does not fit the configuration."""


class SweepError(PPODictError, ValueError):
    """A sweep file cannot be run (every problem listed)."""


class ExportError(PPODictError, RuntimeError):
    """A trained model cannot be written in the asked format (e.g. ONNX), with why."""


class RankError(PPODictError, RuntimeError):
    """A run over several ranks (``torchrun``) cannot go on: a rank raised, or the ranks disagree (a config one of
    them refused, a checkpoint for another rank count). The message names the rank, its host and the cause."""


class RankLostError(RankError):
    """Another rank stopped answering in a collective (it died, hung or raised): this rank ends too."""
