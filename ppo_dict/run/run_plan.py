"""The run worked out once from a checked config: the envs' recipe and their probed backend and
the device the policy runs on; the pool, ``PPO`` and the evaluation take them from here.

None of it changes a number of the run: which process steps which env leaves every float as it is.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch

from ppo_dict.algo.model import resolve_device
from ppo_dict.core.config import Config
from ppo_dict.envs import EnvSpec, contains_image
from ppo_dict.vec import EnvPool, env_spec, make_env_pool, probe_env
from ppo_dict.vec.backend import EnvBackend


@dataclass(frozen=True)
class RunPlan:
    """``cfg`` (checked), its envs' ``spec`` and probed ``backend``, the ``device`` the policy runs on."""

    cfg: Config
    spec: EnvSpec
    backend: EnvBackend
    device: torch.device

    def env_pool(self) -> EnvPool:
        """The env pool PPO trains with (:func:`ppo_dict.vec.make_env_pool` on this plan)."""
        return make_env_pool(self.cfg, self.backend)


def device_notice(device: torch.device, how: str = "--device cpu") -> str:
    """One line when results on ``device`` will not be bit-exact with sb3 on the CPU ("" on the CPU);
    ``how``: what the user types to stay on the CPU."""
    if device.type == "cpu":
        return ""
    return (f"note: training on {device}: results are close to sb3's, not bit-exact (Adam's {device.type} kernels and "
            f"convolution algorithms round differently); {how} reproduces sb3 on the CPU bit for bit")


def plan_run(cfg: Config, backend: Optional[EnvBackend] = None) -> RunPlan:
    """Work the run out once: check ``cfg`` (:meth:`Config.check`), its env recipe, the backend
    (``backend``: as ``checks.validate`` probed it; probed here when not given), the device
    (:func:`~ppo_dict.algo.model.resolve_device`)."""
    cfg.check()
    spec = env_spec(cfg)
    backend = backend or probe_env(spec)
    device = resolve_device(cfg.device, contains_image(backend.observation_space))
    return RunPlan(cfg, spec, backend, device)


def build_env_pool(cfg: Config, backend: Optional[EnvBackend] = None) -> EnvPool:
    """The env pool PPO trains with, from :func:`plan_run` (for tests, benchmarks and library use)."""
    return plan_run(cfg, backend).env_pool()


