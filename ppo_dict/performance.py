"""How a run uses the machine: the main process's share of the envs, threads during the update,
and where the wall time goes.

None of it changes a number of the run: which process steps which env, and (where checked) how
many threads compute the update, leave every float as it is.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any, Iterator, Optional

import torch

from ppo_dict.config import Config
from ppo_dict.policy import build_policy
from ppo_dict.rollout_step import policy_step_seconds
from ppo_dict.vec import EnvPool, env_spec, make_env_pool, probe_env
from ppo_dict.vec.backend import EnvBackend
from ppo_dict.vec.shm_pool import balanced_main_envs


#: The main process's work per step besides the policy (bookkeeping, messages to the workers),
#: added to the measured policy step when balancing the envs it steps; measured in ``make bench``.
MAIN_OVERHEAD_SECONDS = 40e-6


def plan_main_envs(cfg: Config, backend: EnvBackend) -> Optional[int]:
    """How many envs the main process should step so that it finishes a step when the workers do,
    from the measured cost of one env step and of one policy step; None keeps the default layout
    (an explicit ``main_envs``, no main-process envs, or blocks of whole games)."""
    n_envs, num_workers, _ = cfg.worker_layout
    if num_workers < 2 or not cfg.main_steps_envs or cfg.main_envs is not None or backend.unit != 1 or cfg.double_buffer:
        return None
    env_seconds = backend.step_seconds(budget=0.05)
    if env_seconds <= 0:
        return None
    with torch.random.fork_rng(devices=[]):  # a throwaway policy: the run's RNG streams stay untouched
        policy = build_policy(cfg, backend.observation_space, backend.action_space)
        main_seconds = policy_step_seconds(policy, n_envs) + MAIN_OVERHEAD_SECONDS
    return balanced_main_envs(n_envs, num_workers, env_seconds, main_seconds)


def build_env_pool(cfg: Config, backend: Optional[EnvBackend] = None) -> EnvPool:
    """The env pool PPO trains with: :func:`ppo_dict.vec.make_env_pool` with the main process's
    share of the envs balanced (:func:`plan_main_envs`). ``backend``: as ``checks.validate`` probed it."""
    cfg.check()
    backend = backend or probe_env(env_spec(cfg))
    return make_env_pool(cfg, backend, main_envs=plan_main_envs(cfg, backend))


@dataclass
class Timing:
    """Where a run's wall time goes (this process's clock), summed since ``learn`` started.

    Per rollout step: ``policy`` (sampling the actions), ``envs`` (from handing the actions over
    until every env has stepped: the main process's own envs and the wait for the workers) and
    ``bookkeeping`` (episode statistics, normalisation, the time-limit bootstrap); per
    iteration: ``rollout`` (the whole collection with its GAE) and ``update``.
    """

    policy: float = 0.0
    envs: float = 0.0
    bookkeeping: float = 0.0
    rollout: float = 0.0
    update: float = 0.0
    steps: int = 0  # rollout steps (each of n_envs env steps)
    update_threads: int = 0

    def logs(self, n_envs: int) -> dict[str, float]:
        """The ``time/*`` keys besides sb3's: rates and per-step costs in microseconds."""
        per_step = 1e6 / max(self.steps, 1)
        return {
            "time/rollout_fps": int(self.steps * n_envs / max(self.rollout, 1e-9)),
            "time/rollout_seconds": round(self.rollout, 3),
            "time/update_seconds": round(self.update, 3),
            "time/policy_us": round(self.policy * per_step, 1),
            "time/envs_us": round(self.envs * per_step, 1),
            "time/bookkeeping_us": round(self.bookkeeping * per_step, 1),
            "time/update_threads": self.update_threads,
        }


#: The ``time/*`` keys of :class:`Timing` (wall-clock measurements: they differ between two runs).
TIMING_KEYS = tuple(Timing().logs(1))


@contextlib.contextmanager
def thread_count(n: int) -> Iterator[None]:
    """torch's intra-op threads set to ``n`` for a block (about a microsecond each way)."""
    previous = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def same_values(a: Any, b: Any) -> bool:
    """Exact equality of nested dicts, lists and tensors (an Adam state, a state dict)."""
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(same_values(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return isinstance(b, (list, tuple)) and len(a) == len(b) and all(same_values(x, y) for x, y in zip(a, b))
    return a == b
