"""Every error ppo_dict raises on purpose, in one place.

Each message says who (worker, env index, env id), what (expected vs got) and what to do.
"""
from __future__ import annotations


class PPODictError(Exception):
    """Base class of the errors below."""


class ConfigError(PPODictError, ValueError):
    """One or more settings are invalid. ``problems`` lists every one of them."""

    def __init__(self, problems: list[str]):
        self.problems = list(problems)
        lines = "\n".join(f"  - {p}" for p in self.problems)
        super().__init__(f"{len(self.problems)} invalid setting(s):\n{lines}")


class EnvWorkerError(PPODictError, RuntimeError):
    """An environment raised inside a worker (constructor, reset or step)."""


class WorkerDiedError(PPODictError, RuntimeError):
    """A worker process exited without reporting an error."""


class WorkerTimeoutError(PPODictError, TimeoutError):
    """A worker did not answer within the step timeout."""


class NonFiniteError(PPODictError, FloatingPointError):
    """NaN or inf in an observation, reward, loss or gradient."""


class CheckpointError(PPODictError, RuntimeError):
    """A checkpoint is missing, corrupt or does not fit the configuration."""
