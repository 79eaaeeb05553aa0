"""The run worked out once from a checked config: the envs' recipe and their probed backend, the
main process's share of the envs (balanced from measured costs) and the device the policy runs on;
the pool, ``PPO`` and the evaluation take them from here.

None of it changes a number of the run: which process steps which env leaves every float as it is.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch

from ppo_dict.algo.model import resolve_device
from ppo_dict.algo.policy import build_policy
from ppo_dict.algo.rollout_step import policy_step_seconds
from ppo_dict.core.config import Config
from ppo_dict.envs import EnvSpec, contains_image
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


@dataclass(frozen=True)
class RunPlan:
    """``cfg`` (checked), its envs' ``spec`` and probed ``backend``, the envs the main process steps
    (``main_envs``; None: the layout's default), the ``device`` the policy runs on."""

    cfg: Config
    spec: EnvSpec
    backend: EnvBackend
    main_envs: Optional[int]
    device: torch.device

    def env_pool(self) -> EnvPool:
        """The env pool PPO trains with (:func:`ppo_dict.vec.make_env_pool` on this plan)."""
        return make_env_pool(self.cfg, self.backend, main_envs=self.main_envs)


def plan_run(cfg: Config, backend: Optional[EnvBackend] = None) -> RunPlan:
    """Work the run out once: check ``cfg`` (:meth:`Config.check`), its env recipe, the backend
    (``backend``: as ``checks.validate`` probed it; probed here when not given), the main
    process's balanced share (:func:`plan_main_envs`), the device (:func:`~ppo_dict.algo.model.resolve_device`)."""
    cfg.check()
    spec = env_spec(cfg)
    backend = backend or probe_env(spec)
    device = resolve_device(cfg.device, contains_image(backend.observation_space))
    return RunPlan(cfg, spec, backend, plan_main_envs(cfg, backend), device)


def build_env_pool(cfg: Config, backend: Optional[EnvBackend] = None) -> EnvPool:
    """The env pool PPO trains with, from :func:`plan_run` (for tests, benchmarks and library use)."""
    return plan_run(cfg, backend).env_pool()


