"""``--device auto`` from a measured policy step, where a CUDA device exists (without one: the CPU, as always).

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
import torch
from gymnasium import spaces

from ppo_dict.algo.networks.recurrent_policy import build_policy
from ppo_dict.algo.rollout.rollout_step import PolicyStep
from ppo_dict.core.config import Config
from ppo_dict.data.storage import RolloutStorage
from ppo_dict.data.step_obs import StepObsToDevice

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
