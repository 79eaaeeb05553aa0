"""The run worked out once from a checked config: the envs' recipe and their probed backend and
the device the policy runs on; the pool, ``PPO`` and the evaluation take them from here. What the rollout and the update
run is the plan ``PPO`` decides once its model exists (``ppo_dict.algo.rollout.plan``); ``--dry_run`` previews it here.

None of it changes a number of the run: which process steps which env leaves every float as it is.

The device: ``--device auto`` from a measured policy step, where a CUDA device exists (without one: the CPU, as always).

Whether a GPU pays depends on the network and the batch: a small MLP's rollout step is launch- and
synchronisation-bound on a GPU and faster on the CPU; a CNN's is the other way round. Where a CUDA
device exists, :func:`measured_step_us` times a few eager rollout policy steps (observations to the
device, the step, its outputs back to the host: what a rollout step pays) at the run's batch on each
device, and :func:`choose_device` decides:

* image policies (today's rule sends them to CUDA): the faster device;
* MLP policies: the CPU, whatever the numbers say, because ``auto`` keeps sb3's bits where it can
  (nothing chosen automatically may change a bit); the line says what ``--device cuda`` would cost;
* a user who forces CUDA for an MLP policy is told the measured cost (:func:`forced_cuda_line`).

Each decision is one printed line. Measuring builds the policy on each device inside
``torch.random.fork_rng``: the run's seeded streams are as they were.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Any, Optional

import torch
from gymnasium import spaces

from ppo_dict.algo.model import build_normalizer, resolve_device
from ppo_dict.algo.ranks import Ranks
from ppo_dict.algo.networks.recurrent_policy import build_policy
from ppo_dict.algo.rollout.plan import Plan, preview_plan
from ppo_dict.algo.rollout.rollout_step import PolicyStep, RankRows, StepObsToDevice
from ppo_dict.core.config import Config
from ppo_dict.core.file_effects import written_paths
from ppo_dict.core.layout import Layout
from ppo_dict.core.ranks import RankInfo
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
    the ``layout`` of its envs over the processes (:meth:`Config.layout`; a rank's own envs over ``torchrun``), and
    there the rank's collectives (``ranks``)."""

    cfg: Config
    spec: EnvSpec
    backend: EnvBackend
    device: torch.device
    layout: Layout
    device_line: str = ""  # where a CUDA device exists: why this device, from a measured policy step ("" elsewhere)
    ranks: Optional[Ranks] = None

    def env_pool(self) -> EnvPool:
        """The env pool PPO trains with (:func:`ppo_dict.vec.make_env_pool` on this plan)."""
        return make_env_pool(self.cfg, self.backend, self.layout)


#: Eager policy steps timed per device (after as many warm-up calls): a few milliseconds for an MLP.
MEASURED_CALLS = 10


def measured_step_us(
    cfg: Config, observation_space: spaces.Space, action_space: spaces.Space, n_envs: int, device: torch.device
) -> float:
    """Median microseconds of one eager rollout policy step of ``n_envs`` envs on ``device``: the
    observations (zeros) to the device as a rollout sends them, the step, its outputs read on the host
    (on CUDA: the step's synchronisation)."""
    devices = [device] if device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices), torch.inference_mode():
        policy = build_policy(cfg, observation_space, action_space).to(device)
        storage = RolloutStorage(observation_space, action_space, n_steps=1, n_envs=n_envs)
        step, to_device = PolicyStep(policy, n_envs), StepObsToDevice(storage, device)
        masks = None
        if storage.action_masks is not None:
            storage.action_masks[...] = True
            masks = torch.from_numpy(storage.action_masks[0]).to(device)
        times = []
        for call in range(2 * MEASURED_CALLS):
            started = time.perf_counter()
            outputs = step(to_device(0), masks=masks)
            for output in outputs:
                output.cpu()
            if call >= MEASURED_CALLS:  # the first calls warm caches, allocators and kernels up
                times.append(time.perf_counter() - started)
    return 1e6 * statistics.median(times)


def choose_device(images: bool, n_envs: int, cpu_us: float, cuda_us: float, cuda: torch.device) -> tuple[torch.device, str]:
    """``--device auto``'s device from measured policy steps (microseconds at ``n_envs`` envs), and the line that says why."""
    measured = f"a policy step of {n_envs} envs took {cuda_us:.0f} us on {cuda}, {cpu_us:.0f} us on the cpu (measured)"
    if not images:
        faster = "; --device cuda would be faster per step, not bit-exact" if cuda_us < cpu_us else ""
        return torch.device("cpu"), f"device: auto keeps the cpu for an MLP policy (bit-exact with sb3): {measured}{faster}"
    if cuda_us < cpu_us:
        return cuda, f"device: auto picked {cuda} for this image policy: {measured}"
    return torch.device("cpu"), f"device: auto picked the cpu for this image policy: {measured}"


def forced_cuda_line(n_envs: int, cpu_us: float, cuda_us: float, cuda: torch.device) -> str:
    """What ``--device cuda`` costs an MLP policy per rollout step, measured (one line)."""
    ratio = cuda_us / max(cpu_us, 1e-9)
    verdict = f"{ratio:.1f}x the cpu's time" if ratio >= 1 else f"{1 / ratio:.1f}x faster than the cpu"
    return (
        f"note: device {cuda} for an MLP policy: a policy step of {n_envs} envs took {cuda_us:.0f} us there, {cpu_us:.0f} "
        f"us on the cpu (measured): {verdict}"
    )


def measured_device(
    cfg: Config, observation_space: spaces.Space, action_space: spaces.Space, n_envs: int, images: bool, resolved: torch.device
) -> tuple[torch.device, str]:
    """``(device, line)`` where measuring applies (a CUDA device here, a feed-forward policy, ``--device auto``
    or CUDA forced for an MLP policy), else ``(resolved, "")``: ``resolved`` is
    :func:`~ppo_dict.algo.model.resolve_device`'s."""
    forced_mlp = cfg.device != "auto" and resolved.type == "cuda" and not images
    if cfg.recurrent or not torch.cuda.is_available() or not (cfg.device == "auto" or forced_mlp):
        return resolved, ""
    cuda = resolved if resolved.type == "cuda" else torch.device("cuda")
    cpu_us, cuda_us = (measured_step_us(cfg, observation_space, action_space, n_envs, d) for d in (torch.device("cpu"), cuda))
    if forced_mlp:
        return resolved, forced_cuda_line(n_envs, cpu_us, cuda_us, cuda)
    return choose_device(images, n_envs, cpu_us, cuda_us, cuda)


def device_notice(device: torch.device, how: str = "--device cpu") -> str:
    """One line when results on ``device`` will not be bit-exact with sb3 on the CPU ("" on the CPU);
    ``how``: what the user types to stay on the CPU."""
    if device.type == "cpu":
        return ""
    return (
        f"note: training on {device}: results are close to sb3's, not bit-exact (Adam's {device.type} kernels and "
        f"convolution algorithms round differently); {how} reproduces sb3 on the CPU bit for bit"
    )


def plan_run(cfg: Config, backend: Optional[EnvBackend] = None, rank: Optional[RankInfo] = None) -> RunPlan:
    """Work the run out once: check ``cfg`` (:meth:`Config.check`), its env recipe, the backend
    (``backend``: as ``checks.validate`` probed it; probed here when not given), the layout (``rank``: one rank's
    envs on its CPUs over ``torchrun``, with the rank's collectives), the device
    (:func:`~ppo_dict.algo.model.resolve_device`, measured where a CUDA device exists)."""
    cfg.check()
    spec = env_spec(cfg)
    backend = pool_backend(cfg, backend)
    layout = cfg.layout(backend.unit, rank=rank)
    images = contains_image(backend.observation_space)
    device, line = measured_device(
        cfg, backend.observation_space, backend.action_space, layout.n_envs, images, resolve_device(cfg.device, images)
    )
    ranks = None if rank is None else Ranks(rank, cfg.num_envs)
    return RunPlan(cfg, spec, backend, device, layout, line, ranks)


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


def main_share_notice(layout: Layout) -> str:
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
