"""The run worked out once from a checked config: the envs' recipe and their probed backend and
the device the policy runs on; the pool, ``PPO`` and the evaluation take them from here. What the rollout and the update
run is the plan ``PPO`` decides once its model exists (``ppo_dict.algo.rollout.plan``); ``--dry_run`` previews it here.

None of it changes a number of the run: which process steps which env leaves every float as it is.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

import torch

from ppo_dict.algo.device_choice import measured_device
from ppo_dict.algo.model import build_normalizer, resolve_device
from ppo_dict.algo.networks.recurrent_policy import build_policy
from ppo_dict.algo.rollout.plan import Plan, preview_plan
from ppo_dict.algo.rollout.rollout_step import RankRows
from ppo_dict.core.config import Config
from ppo_dict.core.file_effects import written_paths
from ppo_dict.core.layout import Layout
from ppo_dict.core.seeding import thread_count
from ppo_dict.run.checks import RunCheck
from ppo_dict.run.resources import MB
from ppo_dict.data.masking import masked_backend
from ppo_dict.data.storage import RolloutStorage, stage_keys_of
from ppo_dict.envs import EnvSpec, contains_image
from ppo_dict.vec import EnvPool, env_spec, make_env_pool, pool_backend
from ppo_dict.vec.backend import EnvBackend
from ppo_dict.vec.group import columns_text


@dataclass(frozen=True)
class RunPlan:
    """``cfg`` (checked), its envs' ``spec`` and probed ``backend``, the ``device`` the policy runs on,
    the ``layout`` of its envs over the processes (:meth:`Config.layout`)."""

    cfg: Config
    spec: EnvSpec
    backend: EnvBackend
    device: torch.device
    layout: Layout
    device_line: str = ""  # where a CUDA device exists: why this device, from a measured policy step ("" elsewhere)

    def env_pool(self) -> EnvPool:
        """The env pool PPO trains with (:func:`ppo_dict.vec.make_env_pool` on this plan)."""
        return make_env_pool(self.cfg, self.backend, self.layout)


def device_notice(device: torch.device, how: str = "--device cpu") -> str:
    """One line when results on ``device`` will not be bit-exact with sb3 on the CPU ("" on the CPU);
    ``how``: what the user types to stay on the CPU."""
    if device.type == "cpu":
        return ""
    return (
        f"note: training on {device}: results are close to sb3's, not bit-exact (Adam's {device.type} kernels and "
        f"convolution algorithms round differently); {how} reproduces sb3 on the CPU bit for bit"
    )


def plan_run(cfg: Config, backend: Optional[EnvBackend] = None) -> RunPlan:
    """Work the run out once: check ``cfg`` (:meth:`Config.check`), its env recipe, the backend
    (``backend``: as ``checks.validate`` probed it; probed here when not given), the device
    (:func:`~ppo_dict.algo.model.resolve_device`)."""
    cfg.check()
    spec = env_spec(cfg)
    backend = pool_backend(cfg, backend)
    images = contains_image(backend.observation_space)
    device, line = measured_device(
        cfg, backend.observation_space, backend.action_space, cfg.num_envs, images, resolve_device(cfg.device, images)
    )
    return RunPlan(cfg, spec, backend, device, cfg.layout(backend.unit), line)


def build_env_pool(cfg: Config, backend: Optional[EnvBackend] = None) -> EnvPool:
    """The env pool PPO trains with, from :func:`plan_run` (for tests, benchmarks and library use)."""
    return plan_run(cfg, backend).env_pool()


def dry_run_plan(
    cfg: Config, backend: EnvBackend, layout: Layout, device: torch.device, ranks: Optional[RankRows] = None
) -> Plan:
    """``--dry_run``'s plan (``ppo_dict.algo.rollout.plan.preview_plan``): decided as the start decides it, on storage
    rows laid out as the run's (one rollout step of them: each step's row is laid out alike), with the run's policy
    built from its seed on a fork of the generator (the run's own draws stay as they are), in this process alone;
    ``ranks``: a rank's envs (``layout``: its own) over ``torchrun``."""
    backend = masked_backend(backend) if cfg.action_masks else backend
    space = backend.observation_space
    stage_keys = stage_keys_of(space, cfg.normalize, cfg.norm_obs)
    storage = RolloutStorage(
        space, backend.action_space, 1, layout.n_envs, info_keywords=cfg.info_keywords, stage_keys=stage_keys
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0 if cfg.seed is None else cfg.seed)
        policy = build_policy(cfg, space, backend.action_space)
    normalizer = build_normalizer(cfg, space, layout.n_envs)
    with thread_count(cfg.torch_threads):  # the run's rollout threads (the workers': one each)
        return preview_plan(cfg, storage, backend.label, layout, policy, normalizer, device, ranks)


def main_share_notice(cfg: Config, layout: Layout) -> str:
    """The start line naming the envs the main process steps itself beside worker processes ("" where it steps
    none, and where there is no worker process: every env in this process is sb3's own DummyVecEnv layout,
    which the layout line says). A crash there (a segfault in an env's native code) ends the whole run,
    where a worker's crash is a ``WorkerDiedError``."""
    n_envs, share = layout.n_envs, layout.main
    if not share or not layout.processes:
        return ""
    which = f"all {n_envs} envs" if share == n_envs else f"envs {columns_text(range(share))} of {n_envs}"
    return (
        f"the main process steps {which} itself: a crash in one of them (a segfault in native code) ends the run, and "
        f"--resume auto continues it from its last checkpoint; --main_steps_envs False steps every env in a worker "
        f"process instead, where a crash is a WorkerDiedError"
    )


def resume_line(backend: Any) -> str:
    """What a checkpoint holds of the envs, and so what a resume does with them (``ppo_dict.run.env_states``)."""
    problem = getattr(backend, "state_problem", "")
    if problem:
        return (
            f"resume: the envs restart from a reset on a resume (episodes in flight are cut): their state cannot be saved "
            f"({problem})"
        )
    return (
        "resume: checkpoints hold every env's state; a resumed run continues the episodes in flight, as the run never stopped"
    )


def dry_run_text(
    cfg: Config, check: RunCheck, hyperparams: str = "", ranks: Optional[RankRows] = None, local: Optional[Layout] = None
) -> str:
    """``--dry_run``'s report: what the checked run would be (``hyperparams``: where its hyperparameters come
    from, said after its policy; then the plan's lines, as the start says them), and what it would ask of the machine.
    ``ranks``, ``local``: over ``torchrun``, this rank's envs and layout, which its plan is decided on."""
    needs, machine, backend = check.needs, check.machine, check.backend
    n_envs = cfg.num_envs
    memory = needs.shared + needs.private + needs.model + needs.activations + needs.worker_memory
    available = "unknown" if machine.memory_available is None else f"{machine.memory_available / MB:.0f} MB"
    shm = "" if not needs.shared or machine.shm_free is None else f" (/dev/shm: {machine.shm_free / MB:.0f} MB free)"
    parameters = "not measured" if needs.parameters is None else f"{needs.parameters:,} parameters"
    rollouts = -(-cfg.total_timesteps // cfg.rollout_size)
    return "\n".join(
        [
            "dry run: the config passes every check; nothing was started",
            f"env: {backend.label}; observations {backend.observation_space}; actions {backend.action_space}",
            f"layout: {cfg.layout(backend.unit).text(cfg.mp_method)}",
            f"rollout: n_steps {cfg.n_steps} x {n_envs} envs = {cfg.rollout_size} transitions; minibatches of "
            f"{cfg.minibatch_size}, {cfg.n_epochs} epochs; {cfg.total_timesteps} steps = {rollouts} rollouts",
            f"policy: {cfg.model}{' (GRU cells)' if cfg.recurrent and cfg.rnn_type == 'gru' else ''}, {parameters}, on "
            f"{check.device}; torch threads {cfg.torch_threads} (update: {cfg.update_threads or 'auto'})",
            *filter(None, [hyperparams]),
            *dry_run_plan(cfg, check.backend, local or cfg.layout(backend.unit), check.device, ranks).lines(),
            f"memory: about {memory / MB:.0f} MB of {available} available: rollout storage {needs.shared / MB:.1f} MB "
            f"shared{shm} and {needs.private / MB:.1f} MB here, policy and Adam {needs.model / MB:.1f} MB, activations "
            f"{needs.activations / MB:.1f} MB, workers {needs.worker_memory / MB:.0f} MB",
            f"processes: about {needs.tasks} processes and threads ({cfg.layout(backend.unit).usable_cpus}), "
            f"{needs.files} more open files (ulimit -n {machine.nofile_limit or 'unlimited'})",
            resume_line(backend),
            f"seed: {'drawn at start' if cfg.seed is None else cfg.seed}; run directory: "
            f"{cfg.run_dir or 'runs/<env>__<seed>__<time>'} (not created)",
            f"writes: {'; '.join(written_paths(cfg))}",
        ]
    )
