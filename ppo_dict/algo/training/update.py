"""The learning half of PPO: the clipped-surrogate update, as sb3 computes it (GAE before it:
``ppo_dict.algo.training.advantages``).

It is sb3's arithmetic expression for expression (``PPO.train``); the comments name the details that
bit-exactness depends on.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import numpy as np
import torch
from torch.nn import functional as F

from ppo_dict.algo.training.advantages import compute_gae, explained_variance  # noqa: F401 (GAE, asked of this module)
from ppo_dict.algo.training.gradient_step import GradientStep  # noqa: F401 (the update's optimizer step, asked of this module)
from ppo_dict.algo.networks.policy import ActorCritic
from ppo_dict.algo.rollout.rollout_step import PolicyStep
from ppo_dict.core.errors import NonFiniteError
from ppo_dict.data.lean_sampling import LOG_SQRT_2PI
from ppo_dict.data.storage import RolloutStorage, TensorObs, obs_to_tensor


@dataclass(frozen=True)
class UpdateSettings:
    """The hyper-parameters of one ``train()`` call, schedules already evaluated."""

    learning_rate: float
    clip_range: float
    clip_range_vf: Optional[float]
    n_epochs: int
    batch_size: int
    normalize_advantage: bool
    ent_coef: float
    vf_coef: float
    max_grad_norm: float
    target_kl: Optional[float]


@dataclass
class Minibatch:
    """One minibatch as tensors: observations, actions (long and flat for Discrete), and the
    rollout-time values, log-probs, advantages and returns, ``[B]`` each."""

    obs: TensorObs
    actions: torch.Tensor
    old_values: torch.Tensor
    old_log_prob: torch.Tensor
    advantages: torch.Tensor
    returns: torch.Tensor
    action_masks: Optional[torch.Tensor] = None  # bool [B, mask_dim] with --action_masks


@dataclass
class UpdateLog:
    """What ``train()`` logs: per-minibatch losses over the update, approx_kl over the last epoch."""

    pg_losses: list[float] = field(default_factory=list)
    value_losses: list[float] = field(default_factory=list)
    entropy_losses: list[float] = field(default_factory=list)
    clip_fractions: list[float] = field(default_factory=list)
    approx_kl_divs: list[np.ndarray] = field(default_factory=list)
    loss: Optional[torch.Tensor] = None


class RolloutTensors:
    """The flattened rollout as tensors on the device, made once per update.

    sb3's ``RolloutBuffer.get`` hands out numpy rows that each minibatch turns into new tensors;
    here the whole rollout is turned into tensors once (one host-to-device copy on a GPU) and a
    minibatch indexes them: the same values and dtypes (float32 actions, flat ``[B]`` values,
    log-probs, advantages and returns; observations in the buffer's dtype).
    """

    def __init__(self, data: dict[str, Any], cast: Callable[[torch.Tensor], torch.Tensor], device: torch.device):
        self.cast, self.device = cast, device  # the action spec's to_training (Discrete: int64 [B])
        self.obs = obs_to_tensor(data["observations"], device)
        self.actions = torch.as_tensor(data["actions"].astype(np.float32, copy=False), device=device)
        self.columns = [
            torch.as_tensor(data[name].reshape(-1), device=device) for name in ("values", "log_probs", "advantages", "returns")
        ]
        self.masks = torch.as_tensor(data["action_masks"], device=device) if "action_masks" in data else None

    def take(self, rows: torch.Tensor) -> Minibatch:
        """Rows ``rows`` (int64 [B], on the device) of the flattened rollout, as sb3's
        ``RolloutBuffer._get_samples`` (and sb3-contrib's ``MaskableRolloutBuffer``) hands them over."""
        obs = {k: _rows(v, rows) for k, v in self.obs.items()} if isinstance(self.obs, dict) else _rows(self.obs, rows)
        actions = _rows(self.actions, rows)
        masks = None if self.masks is None else _rows(self.masks, rows)
        return Minibatch(obs, self.cast(actions), *(_rows(column, rows) for column in self.columns), masks)


def _rows(tensor: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """``tensor[rows]``: a fresh contiguous copy of the rows. ``index_select`` gathers the same
    values in half the time of advanced indexing; a strided source keeps ``[]`` (its layout rules)."""
    return torch.index_select(tensor, 0, rows) if tensor.is_contiguous() else tensor[rows]


class GaussianEvaluate:
    """``policy.evaluate_actions`` for a diagonal Gaussian policy on flattened vector observations,
    without the module calls and the distribution objects: the trunks run through the rollout's
    lean path (:meth:`PolicyStep.latents`), then torch's ``Normal`` expressions as sb3's
    ``DiagGaussianDistribution`` evaluates them, op for op in the same order, so the autograd graph
    (and every gradient) is the same. :meth:`of` gives None where it does not apply (other action
    spaces, gSDE, other features extractors): those keep ``evaluate_actions``.
    """

    def __init__(self, policy: ActorCritic):
        self.policy, self.step = policy, PolicyStep(policy, 1)

    @classmethod
    def of(cls, policy: ActorCritic) -> Optional["GaussianEvaluate"]:
        lean = policy.action_spec.lean_evaluate and type(policy).evaluate_actions is ActorCritic.evaluate_actions
        evaluate = cls(policy) if lean else None
        return evaluate if evaluate is not None and evaluate.step._features is not None else None

    def __call__(self, obs: TensorObs, actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(values [B, 1], log_prob [B], entropy [B])``."""
        policy = self.policy
        latent_pi, latent_vf = self.step.latents(obs)
        mean = policy.action_net.forward(latent_pi)
        scale = torch.ones_like(mean) * policy.log_std.exp()  # DiagGaussian; Normal's broadcast_all keeps both as they are
        var, log_scale = scale**2, scale.log()
        log_prob = (-((actions - mean) ** 2) / (2 * var) - log_scale - LOG_SQRT_2PI).sum(dim=1)
        values = policy.value_net.forward(latent_vf)
        entropy = (NORMAL_ENTROPY_CONSTANT + torch.log(scale)).sum(dim=1)
        return values, log_prob, entropy


#: ``0.5 + 0.5 * math.log(2 * math.pi)``, as torch's ``Normal.entropy`` adds it (a float, then the tensor).
NORMAL_ENTROPY_CONSTANT = 0.5 + 0.5 * math.log(2 * math.pi)


@dataclass
class LossTerms:
    """One minibatch's loss and its logged parts, 0-d tensors on the device (nothing read to the host)."""

    loss: torch.Tensor
    policy_loss: torch.Tensor
    value_loss: torch.Tensor
    entropy_loss: torch.Tensor
    clip_fraction: torch.Tensor
    approx_kl: torch.Tensor


class Mean:
    """How one minibatch's loss terms are averaged (sb3 ``PPO.train``'s own: ``torch.mean`` over its rows), its
    advantages normalised (per minibatch, unbiased std, skipped for a single sample: sb3 GH#325) and its value loss
    taken (``F.mse_loss``). :class:`Share` and :class:`Masked` are the other two ways."""

    def mean(self, x: torch.Tensor) -> torch.Tensor:
        return torch.mean(x)

    def advantages(self, advantages: torch.Tensor, normalize: bool) -> torch.Tensor:
        if normalize and len(advantages) > 1:
            return (advantages - advantages.mean()) / (advantages.std() + 1e-8)
        return advantages

    def value_loss(self, returns: torch.Tensor, values_pred: torch.Tensor) -> torch.Tensor:
        return F.mse_loss(returns, values_pred)


@dataclass(frozen=True)
class Share(Mean):
    """This process's share of a minibatch split over ranks (``ppo_dict.algo.ranks``): its rows of a global
    minibatch of ``size`` rows, whose advantage ``(mean, std)`` (sb3's, over the global minibatch) are given
    (None: not normalised). Each mean becomes this share's part of the global mean (its sum over ``size``), so the
    ranks' parts add up to sb3's figures and their gradients to sb3's gradient."""

    size: int
    advantage_stats: Optional[tuple[torch.Tensor, torch.Tensor]]

    def mean(self, x: torch.Tensor) -> torch.Tensor:
        return x.sum() / self.size

    def advantages(self, advantages: torch.Tensor, normalize: bool) -> torch.Tensor:
        if self.advantage_stats is None:
            return advantages
        return (advantages - self.advantage_stats[0]) / (self.advantage_stats[1] + 1e-8)

    def value_loss(self, returns: torch.Tensor, values_pred: torch.Tensor) -> torch.Tensor:
        return self.mean((returns - values_pred) ** 2)


@dataclass(frozen=True)
class Masked(Mean):
    """A padded sequence minibatch (sb3-contrib's ``RecurrentPPO.train``): every mean over the real transitions
    (``mask``, bool), advantages normalised over them with no single-sample guard, the value loss a masked mean."""

    mask: torch.Tensor

    def mean(self, x: torch.Tensor) -> torch.Tensor:
        return torch.mean(x[self.mask])

    def advantages(self, advantages: torch.Tensor, normalize: bool) -> torch.Tensor:
        if not normalize:
            return advantages
        return (advantages - advantages[self.mask].mean()) / (advantages[self.mask].std() + 1e-8)

    def value_loss(self, returns: torch.Tensor, values_pred: torch.Tensor) -> torch.Tensor:
        return self.mean((returns - values_pred) ** 2)


#: sb3 PPO's own means
PLAIN = Mean()


def loss_terms(
    policy: ActorCritic,
    batch: Minibatch,
    settings: UpdateSettings,
    evaluate: Optional[GaussianEvaluate] = None,
    share: Optional[Share] = None,
) -> LossTerms:
    """sb3 ``PPO.train``'s loss of one minibatch (:func:`evaluated_loss`). ``evaluate``: the lean ``evaluate_actions``
    where it applies (:meth:`GaussianEvaluate.of`); ``share``: these rows are one rank's share of a global minibatch
    (each term its part of the global mean), None: sb3's own."""
    if evaluate is not None:
        evaluated = evaluate(batch.obs, batch.actions)
    else:
        evaluated = policy.evaluate_actions(batch.obs, batch.actions, batch.action_masks)  # MaskablePPO passes masks
    return evaluated_loss(evaluated, batch, settings, PLAIN if share is None else share)


def evaluated_loss(
    evaluated: tuple[torch.Tensor, torch.Tensor, Optional[torch.Tensor]], batch: Any, settings: UpdateSettings, over: Mean
) -> LossTerms:
    """The PPO loss of one minibatch from the policy's ``(values, log_prob, entropy)`` of its actions, expression for
    expression as sb3's ``PPO.train`` and sb3-contrib's ``RecurrentPPO.train`` (``over``: how its terms are averaged:
    :data:`PLAIN`, :class:`Share`, :class:`Masked`), and the parts they log."""
    values, log_prob, entropy = evaluated
    values = values.flatten()
    advantages = over.advantages(batch.advantages, settings.normalize_advantage)
    mean = over.mean

    ratio = torch.exp(log_prob - batch.old_log_prob)
    policy_loss_1 = advantages * ratio
    policy_loss_2 = advantages * torch.clamp(ratio, 1 - settings.clip_range, 1 + settings.clip_range)
    policy_loss = -mean(torch.min(policy_loss_1, policy_loss_2))
    with torch.no_grad():  # a logged figure, outside the graph: no autograd nodes to record
        clip_fraction = mean((torch.abs(ratio - 1) > settings.clip_range).float())

    if settings.clip_range_vf is None:
        values_pred = values
    else:  # sb3 uses only the clipped term (not baselines' max of clipped and unclipped)
        values_pred = batch.old_values + torch.clamp(
            values - batch.old_values, -settings.clip_range_vf, settings.clip_range_vf
        )
    value_loss = over.value_loss(batch.returns, values_pred)
    entropy_loss = -mean(-log_prob) if entropy is None else -mean(entropy)  # None: squashed gSDE (sb3's estimate)
    loss = policy_loss + settings.ent_coef * entropy_loss + settings.vf_coef * value_loss

    with torch.no_grad():
        log_ratio = log_prob - batch.old_log_prob
        approx_kl_div = mean((torch.exp(log_ratio) - 1) - log_ratio)
    return LossTerms(loss, policy_loss, value_loss, entropy_loss, clip_fraction, approx_kl_div)


def logged_loss(terms: LossTerms, log: UpdateLog) -> tuple[torch.Tensor, np.ndarray]:
    """A minibatch's loss terms read into ``log`` as sb3 logs them. Returns ``(loss, approx_kl)``."""
    log.pg_losses.append(terms.policy_loss.item())
    log.clip_fractions.append(terms.clip_fraction.item())
    log.value_losses.append(terms.value_loss.item())
    log.entropy_losses.append(terms.entropy_loss.item())
    log.loss = terms.loss
    return terms.loss, terms.approx_kl.cpu().numpy()


def minibatch_loss(
    policy: ActorCritic,
    batch: Minibatch,
    settings: UpdateSettings,
    log: UpdateLog,
    evaluate: Optional[GaussianEvaluate] = None,
) -> tuple[torch.Tensor, np.ndarray]:
    """:func:`loss_terms`, its parts read into ``log`` as sb3 logs them. Returns ``(loss, approx_kl)``."""
    return logged_loss(loss_terms(policy, batch, settings, evaluate), log)


def prepare_update(
    policy: ActorCritic,
    optimizer: torch.optim.Optimizer,
    storage: RolloutStorage,
    settings: UpdateSettings,
    device: torch.device,
) -> tuple[dict[str, Any], RolloutTensors, Optional[GaussianEvaluate]]:
    """What every update starts with: training mode, the learning rate into Adam, the flattened rollout
    (``data``, sb3's ``RolloutBuffer.get``) and its tensors on ``device``, the lean evaluation where it applies."""
    policy.train()
    for group in optimizer.param_groups:
        group["lr"] = settings.learning_rate
    data = storage.flat_samples()
    return data, RolloutTensors(data, policy.action_spec.to_training, device), GaussianEvaluate.of(policy)


def ppo_update(
    policy: ActorCritic,
    optimizer: torch.optim.Optimizer,
    storage: RolloutStorage,
    settings: UpdateSettings,
    n_updates: int,
    device: torch.device,
) -> tuple[dict[str, float], int]:
    """``n_epochs`` passes of minibatch PPO over the rollout (sb3 ``PPO.train``).

    Draws one ``np.random.permutation`` per started epoch from the global numpy RNG, exactly as
    sb3 does; an early stop (target_kl) draws no further permutations and skips the optimizer
    step of the minibatch that triggered it. Returns the ``train/*`` logs and the updated epoch
    counter ``n_updates``. (Off the CPU: :func:`ppo_dict.algo.training.device_update.device_ppo_update`.)
    """
    data, rollout, evaluate = prepare_update(policy, optimizer, storage, settings, device)
    buffer_size, log = storage.n_steps * storage.n_envs, UpdateLog()
    n_updates = run_epochs(
        GradientStep(policy, optimizer),
        settings,
        buffer_size,
        n_updates,
        log,
        lambda epoch: torch.from_numpy(np.random.permutation(buffer_size)).to(device),  # one per epoch, sliced per minibatch
        lambda indices: minibatch_loss(policy, rollout.take(indices), settings, log, evaluate),
    )
    return update_logs(policy, log, data, settings, n_updates), n_updates


def run_epochs(
    step: "GradientStep",
    settings: UpdateSettings,
    size: int,
    n_updates: int,
    log: UpdateLog,
    epoch_indices: Callable[[int], Any],
    loss_of: Callable[[Any], tuple[torch.Tensor, np.ndarray]],
) -> int:
    """sb3's epoch loop, for PPO and RecurrentPPO alike: per epoch, ``epoch_indices(epoch)`` (the RNG draw
    of that epoch, made only when the epoch starts), then minibatches of ``batch_size`` of them, each
    ``loss_of(indices)`` -> ``(loss, approx_kl)``; a minibatch past ``1.5 * target_kl`` is logged, not
    applied, and ends the update. Returns the epoch counter, the early-stopped epoch counted."""
    batch_size = settings.batch_size
    for epoch in range(settings.n_epochs):
        log.approx_kl_divs = []  # reset every epoch: the logged approx_kl covers the last epoch only
        indices = epoch_indices(epoch)
        stopped = False
        for start in range(0, size, batch_size):
            loss, approx_kl_div = loss_of(indices[start : start + batch_size])
            log.approx_kl_divs.append(approx_kl_div)
            if settings.target_kl is not None and approx_kl_div > 1.5 * settings.target_kl:
                stopped = True  # before the step: this minibatch is logged, not applied
                break
            step.zero_grad()
            loss.backward()
            grad_norm = step.clip_grad_norm(settings.max_grad_norm)
            _check_finite(n_updates, epoch, start // batch_size, loss=loss, grad_norm=grad_norm)
            step.adam_step()
        n_updates += 1  # once per epoch, the early-stopped one included
        if stopped:
            break
    return n_updates


def update_logs(
    policy: ActorCritic, log: UpdateLog, data: dict[str, Any], settings: UpdateSettings, n_updates: int
) -> dict[str, float]:
    """sb3's ``train/*`` record, in its order."""
    logs = {
        "train/entropy_loss": np.mean(log.entropy_losses),
        "train/policy_gradient_loss": np.mean(log.pg_losses),
        "train/value_loss": np.mean(log.value_losses),
        "train/approx_kl": np.mean(log.approx_kl_divs),
        "train/clip_fraction": np.mean(log.clip_fractions),
        "train/loss": log.loss.item(),
        "train/explained_variance": explained_variance(data["values"].flatten(), data["returns"].flatten()),
    }
    if hasattr(policy, "log_std"):
        logs["train/std"] = torch.exp(policy.log_std).mean().item()
    logs["train/n_updates"] = n_updates
    logs["train/clip_range"] = settings.clip_range
    if settings.clip_range_vf is not None:
        logs["train/clip_range_vf"] = settings.clip_range_vf
    return logs


def _check_finite(n_updates: int, epoch: int, minibatch: int, **quantities: torch.Tensor) -> None:
    """Refuse to apply an update whose loss or gradient norm is NaN/inf (sb3 would step and fail later).

    Each quantity is a single value (a 0-d tensor): one ``item()`` reads it."""
    for name, value in quantities.items():
        number = value.item()
        if not math.isfinite(number):
            raise NonFiniteError(
                f"non-finite {name} ({number}) at update {n_updates + 1}, epoch {epoch}, minibatch {minibatch}; "
                "no optimizer step was taken. Lower the learning rate or check observations and rewards."
            )
