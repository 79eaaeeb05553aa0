"""The threads an update runs on, chosen once, at the run's first update: ``cfg.update_threads``, else the physical
cores where one epoch with them gives the same bits as with ``torch_threads``, else ``torch_threads``.

Threads split GEMMs and large reductions by the tensors' shapes, which stay the same for a run; where a split changes
the rounding, the run keeps ``torch_threads``. ``ppo_dict.algo.ppo.PPO`` asks these at its first update.
"""

from __future__ import annotations

import copy
import dataclasses
import sys
from typing import Any, Callable

import numpy as np
import torch

from ppo_dict.algo.training.update import UpdateSettings
from ppo_dict.core.config import Config
from ppo_dict.core.machine import physical_cores
from ppo_dict.core.seeding import same_values, thread_count
from ppo_dict.data.storage import RolloutStorage

#: The fewest epochs whose first update tries the cores' threads: the trial is two epochs' work (one on each thread
#: count), at most a fifth of such an update; fewer epochs keep ``torch_threads``.
MIN_TRIAL_EPOCHS = 10


def update_threads(
    cfg: Config,
    device: torch.device,
    over_ranks: bool,
    settings: UpdateSettings,
    busy: bool,
    keep_the_bits: Callable[[int, int], bool],
) -> int:
    """The threads for every update: ``cfg.update_threads``, else the physical cores if one epoch with them gives the
    same bits as with ``torch_threads`` (``keep_the_bits(torch_threads, cores)``: :func:`cores_keep_the_bits`), else
    ``torch_threads``.

    No trial where other processes keep the CPUs busy (``busy``: at start or through the first rollout):
    more threads than free cores make each update slower, not faster; said once. A recurrent update's shapes change
    from one update to the next (sequence lengths, sb3-contrib's two LSTM branches, oneDNN's LSTM kernels splitting by
    them), so one trial proves nothing there: it keeps ``torch_threads``.
    """
    base, cores = cfg.torch_threads, physical_cores()
    chosen = cfg.update_threads or base
    # over ranks, every rank's update keeps torch_threads: a thread count chosen per rank could round the norms apart
    if (
        cfg.update_threads is None
        and device.type == "cpu"
        and cores > base
        and not cfg.recurrent
        and not over_ranks
        and settings.n_epochs >= MIN_TRIAL_EPOCHS
    ):
        if busy:
            if cfg.verbose:
                print(
                    f"note: other processes keep this run's CPUs busy: the update runs on {base} "
                    f"thread{'s' * (base != 1)} (torch_threads), not the {cores} cores (--update_threads {cores} to ask "
                    f"for them)",
                    file=sys.stderr,
                    flush=True,
                )
        elif keep_the_bits(base, cores):
            chosen = cores
    return chosen


def cores_keep_the_bits(
    update: Callable[..., Any],
    policy: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    storage: RolloutStorage,
    settings: UpdateSettings,
    n_updates: int,
    device: torch.device,
    base: int,
    cores: int,
) -> bool:
    """Whether one epoch of ``update`` gives the same parameters and Adam state with ``cores`` threads as with
    ``base``: run from the same snapshot (parameters, Adam, the numpy RNG) with each, the snapshot put back
    after. Two epochs' work, once per run: at most ``2 / MIN_TRIAL_EPOCHS`` of the first update."""
    one_epoch = dataclasses.replace(settings, n_epochs=1)
    snapshot = (copy.deepcopy(policy.state_dict()), copy.deepcopy(optimizer.state_dict()), np.random.get_state())
    results = []
    for threads in (cores, base):
        with thread_count(threads):
            update(policy, optimizer, storage, one_epoch, n_updates, device)
        results.append((copy.deepcopy(policy.state_dict()), copy.deepcopy(optimizer.state_dict()["state"])))
        policy.load_state_dict(snapshot[0])
        optimizer.load_state_dict(snapshot[1])
        np.random.set_state(snapshot[2])
    return same_values(*results)
