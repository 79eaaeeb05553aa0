"""The rollout's host work off the per-env path, for an accelerator: where a step's outputs land, and the time-limit
bootstrap of a step's cut episodes in one batch, with no wait of its own.

sb3 values each cut episode alone and reads it with ``.item()``: on a GPU one synchronisation per env
(Reacher cuts all 64 envs at once every 50 steps: 64 waits in one step). Here the terminal observations
go over in one pinned, non-blocking copy, the critic runs once on the batch and its values come back in
one non-blocking copy; the addition to the rewards is handed back as a unit of owed work
(:class:`~ppo_dict.algo.rollout.collect.OwedWork`), done once the next step's synchronisation has already waited
for the copy (or, at the rollout's end, after one wait). Not sb3's bits (a batch rounds by its size,
1.2e-7); the CPU keeps sb3's per-env order (``Collector._bootstrap_truncated``).
"""

from __future__ import annotations

from typing import Callable, Iterable, Optional

import numpy as np
import torch

from ppo_dict.algo.rollout.books import add_bootstrap
from ppo_dict.algo.rollout.rollout_step import PolicyStep
from ppo_dict.data.storage import OBS_KEY, RolloutStorage, TensorObs, channel_first


def host_buffer(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """An empty host tensor for copies to or from ``device``: page-locked for CUDA (a non-blocking copy
    needs it; torch's caching host allocator reuses the block only once the copies that used it are
    done), plain memory otherwise."""
    return torch.empty(shape, dtype=dtype, pin_memory=device.type == "cuda")


def step_outputs(
    storage: RolloutStorage, device: torch.device, batch_sizes: Iterable[int]
) -> tuple[Optional[tuple[torch.Tensor, ...]], dict[int, tuple[torch.Tensor, ...]]]:
    """``(out, pinned)``: where a rollout step writes its actions, values and log-probs. On the CPU straight into the
    storage's rows (``out``); on an accelerator they come back through pinned buffers, one set per batch size
    (``pinned``), with one synchronisation per step."""
    s = storage
    if device.type == "cpu":
        return tuple(torch.from_numpy(a) for a in (s.actions, s.values, s.log_probs)), {}
    return None, {
        n: tuple(
            torch.empty(shape, dtype=torch.from_numpy(a[0, :0]).dtype).pin_memory()
            for a, shape in ((s.actions, (n, s.action_dim)), (s.values, (n,)), (s.log_probs, (n,)))
        )
        for n in batch_sizes
    }


def terminal_batch(storage: RolloutStorage, envs: np.ndarray, device: torch.device) -> TensorObs:
    """Envs ``envs``' terminal observations as one policy batch ``[len(envs), ...]`` on ``device``.

    One gather per key into a host buffer (:func:`host_buffer`) and one non-blocking copy to the
    device: no wait. uint8 images travel as uint8 (the policy scales them on the device); channel-last
    images are seen as ``[C, H, W]`` views, as :class:`StepObsToDevice` shows a step's.
    """
    index = torch.from_numpy(np.ascontiguousarray(envs, dtype=np.int64))
    batch = {}
    for key, arr in storage.terminal_obs.items():
        source = torch.from_numpy(arr)  # [n_envs, *shape], each env's row aligned (step_major)
        gathered = torch.index_select(source, 0, index, out=host_buffer((len(envs), *source.shape[1:]), source.dtype, device))
        on_device = gathered.to(device, non_blocking=True)
        batch[key] = channel_first(on_device) if key in storage.channel_last_keys else on_device
    return batch if storage.is_dict_obs else batch[OBS_KEY]


def device_values(step: PolicyStep, obs: TensorObs) -> tuple[torch.Tensor, Optional["torch.cuda.Event"]]:
    """``(values, done)``: the critic's values of a batch, float32 ``[B]``, in a host tensor, and on CUDA
    the event after which they are there (the copy back is non-blocking: nothing waits here); None
    where they are there already."""
    with torch.inference_mode():
        values = step.critic(obs).reshape(-1)
    host = host_buffer(tuple(values.shape), values.dtype, values.device)
    host.copy_(values, non_blocking=values.device.type == "cuda")
    if values.device.type != "cuda":
        return host, None
    done = torch.cuda.Event()
    done.record(torch.cuda.current_stream(values.device))
    return host, done


def batched_bootstrap(
    step: PolicyStep,
    storage: RolloutStorage,
    rewards: np.ndarray,
    rows: np.ndarray,
    envs: np.ndarray,
    device: torch.device,
    gamma: float,
) -> Callable[[], None]:
    """Start valuing envs ``envs``' terminal observations on ``device`` (nothing waits); returns the unit that
    adds ``gamma * value`` to ``rewards[rows]`` (float32, as sb3's addition), waiting for the values if need be.
    rows: indices into ``rewards`` (one step's row of the envs stepped); envs: those envs' indices."""
    values, done = device_values(step, terminal_batch(storage, envs, device))

    def add() -> None:
        if done is not None:
            done.synchronize()  # already passed once the next step has synchronised
        add_bootstrap(rewards, rows, gamma, values.numpy())

    return add
