"""The update off the CPU: PPO's minibatch loop without host work per minibatch (``--device cuda``).

On a GPU each ``.item()`` is a synchronisation that drains the launch queue, and sb3's loop
(:func:`ppo_dict.algo.training.update.run_epochs`) reads six per minibatch (four logged figures, approx_kl, the
finiteness check); its indices come from numpy and go over per epoch; Adam's foreach path launches a
dozen kernels per step. Here the same algorithm (losses, clipping, target_kl stop, refusal of a
non-finite step) runs with the indices drawn on the device, the figures summed there and read once
per update, and torch's fused Adam. Not sb3's bits (no GPU run is), so never on the CPU's exact path;
``tests/test_cuda_path.py`` runs it on the CPU against the exact loop.
"""

from __future__ import annotations

import math
from typing import Callable, Optional

import numpy as np
import torch
from torch import nn
from torch.optim.adam import adam as adam_functional

from ppo_dict.algo.networks.policy import ActorCritic
from ppo_dict.algo.training.update import (
    GradientStep,
    LossTerms,
    UpdateLog,
    UpdateSettings,
    loss_terms,
    ppo_update,
    prepare_update,
    update_logs,
)
from ppo_dict.core.errors import NonFiniteError
from ppo_dict.data.storage import RolloutStorage


class FusedAdamStep(GradientStep):
    """The device loop's gradient step (:func:`run_device_epochs`): the same zero_grad and clipping (both on
    the device already: the norm stays a tensor), then torch's fused Adam: one kernel for every parameter
    on CUDA instead of the foreach path's dozen launches, and ``found_inf`` (the flag torch's GradScaler
    hands it) to skip a step on the device without reading anything back. Not sb3's bits (the fused kernel
    rounds its own way), so never on the exact path.

    The param groups are left alone (no ``fused`` flag is written: a checkpoint or sb3 zip stays what sb3
    saves). Adam's ``step`` counts live on the device during an update, as fused Adam needs them, and go
    back to the CPU where torch's default Adam keeps them after it (:meth:`finish`: one copy per update).
    """

    @classmethod
    def of(cls, policy: nn.Module, optimizer: torch.optim.Optimizer) -> Optional["FusedAdamStep"]:
        """The step, or None where the fused path does not apply (another optimizer, or Adam settings,
        or hooks on its step): those keep the exact loop."""
        step = cls(policy, optimizer)
        hooks = optimizer._optimizer_step_pre_hooks or optimizer._optimizer_step_post_hooks
        return step if step.adam_groups and not hooks else None

    def adam_step(self, skip: Optional[torch.Tensor] = None) -> None:
        """``optimizer.step()`` unless ``skip`` (float 0-d on the device, 1.0: leave parameters, moments and step counts
        as they are)."""
        state = self.optimizer.state
        with torch.no_grad():
            for group in self.adam_groups:
                params = [p for p in group["params"] if p.grad is not None]  # as torch's Adam: no gradient, no step
                for p in params:
                    if len(state[p]) == 0:  # torch's Adam._init_group for fused: the count on the parameter's device
                        state[p].update(
                            step=torch.zeros((), dtype=torch.float32, device=p.device),
                            exp_avg=torch.zeros_like(p, memory_format=torch.preserve_format),
                            exp_avg_sq=torch.zeros_like(p, memory_format=torch.preserve_format),
                        )
                    elif state[p]["step"].device != p.device:
                        state[p]["step"] = state[p]["step"].to(p.device, torch.float32, non_blocking=True)
                beta1, beta2 = group["betas"]
                adam_functional(
                    params,
                    [p.grad for p in params],
                    [state[p]["exp_avg"] for p in params],
                    [state[p]["exp_avg_sq"] for p in params],
                    [],
                    [state[p]["step"] for p in params],
                    fused=True,
                    found_inf=skip,
                    amsgrad=False,
                    beta1=beta1,
                    beta2=beta2,
                    lr=group["lr"],
                    weight_decay=group["weight_decay"],
                    eps=group["eps"],
                    maximize=group["maximize"],
                )

    def finish(self) -> None:
        """Adam's step counts back on the CPU, where torch's default (non-fused) Adam keeps them: one copy for all."""
        states = [state for state in self.optimizer.state.values() if "step" in state and state["step"].device.type != "cpu"]
        if states:
            for state, count in zip(states, torch.stack([state["step"] for state in states]).cpu()):
                state["step"] = count.clone()  # a 0-d tensor of its own, as Adam makes it


def run_device_epochs(
    step: FusedAdamStep,
    settings: UpdateSettings,
    size: int,
    n_updates: int,
    generator: torch.Generator,
    loss_of: Callable[[torch.Tensor], LossTerms],
) -> tuple[UpdateLog, int]:
    """:func:`run_epochs`' algorithm with no host work per minibatch, for an accelerator: indices drawn on
    the device (``torch.randperm`` with ``generator``, not sb3's numpy permutation), the logged figures
    summed on the device and read once at the end, the target_kl stop and the refusal of a non-finite
    loss or gradient norm decided on the device.

    On a GPU each ``.item()`` is a synchronisation that drains the launch queue: the exact loop pays six per minibatch
    (four logged figures, approx_kl, the finiteness check). Here a stop (approx_kl past ``1.5 * target_kl``, or a
    non-finite loss or norm) raises a flag on the device that fused Adam's ``found_inf`` obeys: that minibatch and every
    later one are computed but not applied, so the parameters are those of the exact loop's stop. The flag is read once
    per epoch, and only with a target_kl (to end the update there); without one, once at the end with the logs. The
    price: after a stop, the rest of that epoch's minibatches are computed for nothing. Returns ``(log, n_updates)`` as
    :func:`run_epochs` (each logged list holds its mean); a non-finite stop is a :class:`NonFiniteError`.
    """
    device, batch_size = generator.device, settings.batch_size
    per_epoch = -(-size // batch_size)
    halted = torch.zeros((), dtype=torch.bool, device=device)  # a stop: no later minibatch is applied
    sums = torch.zeros(4, device=device)  # policy, value, entropy losses, clip fraction over the minibatches counted
    counted = torch.zeros((), device=device)
    last_loss = torch.zeros((), device=device)
    first_bad = torch.full((3,), -1.0, device=device)  # the first non-finite minibatch: (number, loss, grad norm)
    # made once: a host scalar per minibatch would wait
    numbers = torch.arange(settings.n_epochs * per_epoch, dtype=torch.float32, device=device)
    epochs = 0
    for epoch in range(settings.n_epochs):
        kl_sum, kl_count = torch.zeros((), device=device), torch.zeros((), device=device)  # approx_kl covers the last epoch
        indices = torch.randperm(size, generator=generator, device=device)
        for number, start in enumerate(range(0, size, batch_size), epoch * per_epoch):
            terms = loss_of(indices[start : start + batch_size])
            live = (~halted).float()  # sb3 logs the minibatch that stops the update, none after it
            sums += live * torch.stack([terms.policy_loss, terms.value_loss, terms.entropy_loss, terms.clip_fraction]).detach()
            counted += live
            kl_sum, kl_count = kl_sum + live * terms.approx_kl, kl_count + live
            last_loss = torch.where(halted, last_loss, terms.loss.detach())
            if settings.target_kl is not None:
                halted = halted | (terms.approx_kl > 1.5 * settings.target_kl)  # before the step: logged, not applied
            step.zero_grad()
            terms.loss.backward()
            grad_norm = step.clip_grad_norm(settings.max_grad_norm)
            bad = ~(torch.isfinite(terms.loss) & torch.isfinite(grad_norm)) & ~halted
            first_bad = torch.where(bad, torch.stack([numbers[number], terms.loss.detach(), grad_norm]), first_bad)
            halted = halted | bad
            step.adam_step(skip=halted.float())
        epochs += 1  # once per epoch, the stopped one included
        if settings.target_kl is not None and epoch + 1 < settings.n_epochs and halted.item():  # the one read per epoch
            break
    step.finish()
    # the one read at the end
    read = torch.cat([sums / counted, (kl_sum / kl_count).reshape(1), last_loss.reshape(1), first_bad]).tolist()
    return log_from_read(read, n_updates, per_epoch), n_updates + epochs


def log_from_read(read: list[float], n_updates: int, per_epoch: int) -> UpdateLog:
    """The update's log from :func:`run_device_epochs`' one read (the four logged means, approx_kl, the last loss, the
    first non-finite minibatch's number, loss and grad norm, -1: none), or the :class:`NonFiniteError` of that minibatch."""
    if read[6] >= 0:
        number, loss, grad_norm = int(read[6]), read[7], read[8]
        name, value = ("loss", loss) if not math.isfinite(loss) else ("grad_norm", grad_norm)
        raise NonFiniteError(
            f"non-finite {name} ({value}) at update {n_updates + number // per_epoch + 1}, epoch {number // per_epoch}, "
            f"minibatch {number % per_epoch}; no optimizer step was taken from there. Lower the learning rate or check "
            f"observations and rewards."
        )
    return UpdateLog([read[0]], [read[1]], [read[2]], [read[3]], [np.float32(read[4])], torch.tensor(read[5]))


def device_ppo_update(
    policy: ActorCritic,
    optimizer: torch.optim.Optimizer,
    storage: RolloutStorage,
    settings: UpdateSettings,
    n_updates: int,
    device: torch.device,
    generator: torch.Generator,
) -> tuple[dict[str, float], int]:
    """:func:`~ppo_dict.algo.training.update.ppo_update` with :func:`run_device_epochs`: its permutations drawn with
    ``generator`` (on ``device``), seeded per update from one draw of the numpy RNG (a seed reproduces a
    run, and a resumed run continues as the numpy RNG does). Where fused Adam does not apply, sb3's loop."""
    step = FusedAdamStep.of(policy, optimizer)
    if step is None:
        return ppo_update(policy, optimizer, storage, settings, n_updates, device)
    data, rollout, evaluate = prepare_update(policy, optimizer, storage, settings, device)
    generator.manual_seed(int(np.random.randint(2**31)))
    log, n_updates = run_device_epochs(
        step,
        settings,
        storage.n_steps * storage.n_envs,
        n_updates,
        generator,
        lambda indices: loss_terms(policy, rollout.take(indices), settings, evaluate),
    )
    return update_logs(policy, log, data, settings, n_updates), n_updates
