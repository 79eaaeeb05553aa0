"""Action distributions, built and used as sb3 builds and uses them (``common/distributions.py``).

One class per action space: :class:`DiagGaussian` (Box), :class:`StateDependentNoise` (Box with
gSDE), :class:`CategoricalDist` (Discrete), :class:`MultiCategorical` (MultiDiscrete) and
:class:`BernoulliDist` (MultiBinary). Each is a cheap wrapper made per forward pass over torch's own
distributions, with sb3's expressions: the same torch calls on the same shapes, so the same floats
and the same random draws. Which one a policy uses, and the layers that feed it, is its action
space's spec (``ppo_dict.data.actions``). Under ``--action_masks``, sb3-contrib's maskable ones:
:class:`MaskedCategorical` and :class:`MaskedMultiCategorical` (MultiBinary is the latter with
``[2] * n``), the same torch calls on the same shapes, so the same floats and draws.
"""

from __future__ import annotations

from typing import Optional, Sequence, Union

import torch
from torch.distributions import Bernoulli, Categorical, Normal

#: The logit of a masked action (sb3-contrib ``MaskableCategorical.apply_masking``'s ``HUGE_NEG``).
HUGE_NEG = -1e8

# ----------------------------------------------------------------------------------------------
# The distributions of one forward pass: sample / mode [B, ...], log_prob / entropy [B]


class SB3Methods:
    """What scripts call on sb3's ``Distribution`` (``policy.get_distribution(obs)``): ``get_actions`` and
    ``distribution``, torch's distribution (a list of them for a MultiDiscrete space, as sb3's)."""

    def sample(self) -> torch.Tensor:
        raise NotImplementedError

    def mode(self) -> torch.Tensor:
        raise NotImplementedError

    def get_actions(self, deterministic: bool = False) -> torch.Tensor:
        """sb3's: the mode, or a sample."""
        return self.mode() if deterministic else self.sample()

    @property
    def distribution(self) -> Union[Normal, Categorical, Bernoulli, list[Categorical]]:
        dist = getattr(self, "dist", None)
        return dist if dist is not None else [getattr(d, "dist", d) for d in self.dists]  # type: ignore[attr-defined]


class TorchDistribution(SB3Methods):
    """One of torch's distributions over a batch; ``summed``: its components are independent action
    dims, so log-probs and entropies are summed over dim 1 (sb3's ``sum_independent_dims``)."""

    summed = True
    dist: Union[Normal, Categorical, Bernoulli]

    def sample(self) -> torch.Tensor:
        return self.dist.sample()

    def log_prob(self, actions: torch.Tensor) -> torch.Tensor:
        log_prob = self.dist.log_prob(actions)
        return log_prob.sum(dim=1) if self.summed else log_prob

    def entropy(self) -> torch.Tensor:
        entropy = self.dist.entropy()
        return entropy.sum(dim=1) if self.summed else entropy


class DiagGaussian(TorchDistribution):
    """``Normal(mean, ones_like(mean) * log_std.exp())``, sampled with ``rsample`` (one ``normal_`` over the batch)."""

    def __init__(self, mean: torch.Tensor, log_std: torch.Tensor):
        # No argument validation: it changes no value but costs several ops per step.
        self.dist = Normal(mean, torch.ones_like(mean) * log_std.exp(), validate_args=False)

    def sample(self) -> torch.Tensor:
        return self.dist.rsample()

    def mode(self) -> torch.Tensor:
        return self.dist.mean


class CategoricalDist(TorchDistribution):
    """``Categorical(logits)``: one ``multinomial`` draw over the batch."""

    summed = False

    def __init__(self, logits: torch.Tensor):
        self.dist = Categorical(logits=logits, validate_args=False)

    def mode(self) -> torch.Tensor:
        return torch.argmax(self.dist.probs, dim=1)


class BernoulliDist(TorchDistribution):
    """sb3 ``BernoulliDistribution``: ``Bernoulli(logits)``; float 0/1 samples, ``round(probs)`` as mode."""

    def __init__(self, logits: torch.Tensor):
        self.dist = Bernoulli(logits=logits, validate_args=False)

    def mode(self) -> torch.Tensor:
        return torch.round(self.dist.probs)


class MultiCategorical(SB3Methods):
    """sb3 ``MultiCategoricalDistribution``: one Categorical per ``th.split`` of the logits (views),
    sampled one after the other, stacked on dim 1; log-probs and entropies stacked, then summed."""

    def __init__(self, logits: torch.Tensor, nvec: list[int]):
        self.dists = [Categorical(logits=split, validate_args=False) for split in torch.split(logits, nvec, dim=1)]

    def sample(self) -> torch.Tensor:
        return torch.stack([dist.sample() for dist in self.dists], dim=1)

    def mode(self) -> torch.Tensor:
        return torch.stack([torch.argmax(dist.probs, dim=1) for dist in self.dists], dim=1)

    def log_prob(self, actions: torch.Tensor) -> torch.Tensor:
        return torch.stack([d.log_prob(a) for d, a in zip(self.dists, torch.unbind(actions, dim=1))], dim=1).sum(dim=1)

    def entropy(self) -> torch.Tensor:
        return torch.stack([dist.entropy() for dist in self.dists], dim=1).sum(dim=1)


class StateDependentNoise(TorchDistribution):
    """sb3 ``StateDependentNoiseDistribution`` of one forward pass (features not learned).

    ``Normal(mean, sqrt(latent**2 @ std**2 + eps))``; a sample is ``mean + noise(latent)`` with the
    exploration matrices of ``noise`` (:class:`GSDENoise`), drawn at its own cadence, not here. With
    ``squash`` (sb3's ``squash_output``), sb3's ``TanhBijector``: samples and mode through ``tanh``, log-probs
    of their ``atanh`` (clamped within one ulp of +-1) less the squash correction, and no entropy (None: PPO's
    loss then uses ``-log_prob``).
    """

    def __init__(
        self, mean: torch.Tensor, log_std: torch.Tensor, latent: torch.Tensor, noise: "GSDENoise", squash: bool = False
    ):
        self.latent, self.noise, self.squash = latent.detach(), noise, squash  # sb3 stops the gradient into the features
        variance = torch.mm(self.latent**2, noise.get_std(log_std) ** 2)
        self.dist = Normal(mean, torch.sqrt(variance + noise.epsilon), validate_args=False)

    def sample(self) -> torch.Tensor:
        actions = self.dist.mean + self.noise.get_noise(self.latent)
        return torch.tanh(actions) if self.squash else actions

    def mode(self) -> torch.Tensor:
        return torch.tanh(self.dist.mean) if self.squash else self.dist.mean

    def log_prob(self, actions: torch.Tensor) -> torch.Tensor:
        if not self.squash:
            return super().log_prob(actions)
        eps = torch.finfo(actions.dtype).eps
        clamped = actions.clamp(min=-1.0 + eps, max=1.0 - eps)
        gaussian_actions = 0.5 * (clamped.log1p() - (-clamped).log1p())  # sb3's TanhBijector.inverse
        log_prob = self.dist.log_prob(gaussian_actions).sum(dim=1)
        log_prob -= torch.sum(torch.log(1.0 - torch.tanh(gaussian_actions) ** 2 + self.noise.epsilon), dim=1)
        return log_prob

    def entropy(self) -> Optional[torch.Tensor]:  # type: ignore[override]
        return None if self.squash else super().entropy()


Distribution = Union[DiagGaussian, StateDependentNoise, CategoricalDist, MultiCategorical, BernoulliDist]


class GSDENoise:
    """gSDE's exploration matrices and std (sb3 ``StateDependentNoiseDistribution``'s state).

    ``exploration_mat: [latent_dim, action_dim]`` and ``exploration_matrices: [batch, latent_dim,
    action_dim]`` are drawn from ``Normal(0, std)`` by :meth:`sample_weights` (sb3's ``reset_noise``):
    when the policy is built (batch 1), at each rollout's start, and every ``sde_sample_freq`` steps.
    They are not parameters and not in the state dict (as in sb3).
    """

    epsilon = 1e-6

    def __init__(self, latent_dim: int, action_dim: int, full_std: bool, use_expln: bool):
        self.latent_dim, self.action_dim = latent_dim, action_dim
        self.full_std, self.use_expln = full_std, use_expln
        self.exploration_mat: Optional[torch.Tensor] = None
        self.exploration_matrices: Optional[torch.Tensor] = None

    @property
    def latent_sde_dim(self) -> int:
        """sb3's name of the latent width the noise multiplies."""
        return self.latent_dim

    def get_std(self, log_std: torch.Tensor) -> torch.Tensor:
        """``exp(log_std)``, or sb3's ``expln``; broadcast to ``[latent_dim, action_dim]`` without ``full_std``."""
        if self.use_expln:  # the gSDE paper's expln keeps the variance above zero and grows it slowly
            below_threshold = torch.exp(log_std) * (log_std <= 0)
            safe_log_std = log_std * (log_std > 0) + self.epsilon  # zeros below 0, against NaN
            above_threshold = (torch.log1p(safe_log_std) + 1.0) * (log_std > 0)
            std = below_threshold + above_threshold
        else:
            std = torch.exp(log_std)
        if self.full_std:
            return std
        return torch.ones(self.latent_dim, self.action_dim).to(log_std.device) * std

    def sample_weights(self, log_std: torch.Tensor, batch_size: int = 1) -> None:
        """Two draws, as sb3: one matrix, then ``batch_size`` matrices (one per env)."""
        std = self.get_std(log_std)
        weights_dist = Normal(torch.zeros_like(std), std)
        self.exploration_mat = weights_dist.rsample()
        self.exploration_matrices = weights_dist.rsample((batch_size,))

    def get_noise(self, latent: torch.Tensor, rows: Optional[slice] = None) -> torch.Tensor:
        """``latent @ exploration_mat`` for one row or a batch other than the matrices' (sb3's
        ``get_noise``), else one matrix per row (``bmm``). ``rows``: the envs ``latent`` belongs
        to (a double-buffered half), each with its own matrix."""
        if rows is not None:
            return torch.bmm(latent.unsqueeze(dim=1), self.exploration_matrices[rows]).squeeze(dim=1)
        if len(latent) == 1 or len(latent) != len(self.exploration_matrices):
            return torch.mm(latent, self.exploration_mat)
        return torch.bmm(latent.unsqueeze(dim=1), self.exploration_matrices).squeeze(dim=1)


# ----------------------------------------------------------------------------------------------
# sb3-contrib's maskable distributions (``--action_masks``)


def masked_logits(
    logits: torch.Tensor, masks: Optional[torch.Tensor], huge_neg: Optional[torch.Tensor] = None
) -> torch.Tensor:
    """What sb3-contrib's ``MaskableCategorical`` builds its final Categorical from: the logits as
    torch's first Categorical normalised them (``logits - logsumexp``), masked entries -1e8 (the
    Categorical made from them normalises them again). ``masks``: bool, the logits' shape, or None.
    ``huge_neg``: the 0-d -1e8 tensor (the logits' dtype and device) made once by a caller that masks
    every step (making it costs about as much as the ``where``), else made here as sb3-contrib makes it."""
    normalized = logits - logits.logsumexp(dim=-1, keepdim=True)  # torch.distributions.Categorical.__init__
    if masks is None:
        return normalized
    if huge_neg is None:
        huge_neg = torch.tensor(HUGE_NEG, dtype=normalized.dtype, device=normalized.device)
    return torch.where(masks, normalized, huge_neg)


class MaskedCategorical(SB3Methods):
    """sb3-contrib ``MaskableCategorical`` over logits ``[B, n]``, masks bool ``[B, n]`` or None.

    torch's Categorical is built twice, as sb3-contrib builds it: once from the raw logits (which
    normalises them), once from those normalised logits, masked entries set to -1e8 (normalised
    again: not PPO's floats even without masks).
    """

    def __init__(self, logits: torch.Tensor, masks: Optional[torch.Tensor] = None):
        self.masks = (
            None if masks is None else torch.as_tensor(masks, dtype=torch.bool, device=logits.device).reshape(logits.shape)
        )
        self.dist = Categorical(logits=masked_logits(logits, self.masks), validate_args=False)

    def sample(self) -> torch.Tensor:
        return self.dist.sample()

    def mode(self) -> torch.Tensor:
        return torch.argmax(self.dist.probs, dim=1)

    def log_prob(self, actions: torch.Tensor) -> torch.Tensor:
        return self.dist.log_prob(actions)

    def entropy(self) -> torch.Tensor:
        """torch's entropy unmasked; masked, ``-sum(where(masks, logits * probs, 0))`` (no clamping of the logits)."""
        if self.masks is None:
            return self.dist.entropy()
        p_log_p = self.dist.logits * self.dist.probs
        p_log_p = torch.where(self.masks, p_log_p, torch.tensor(0.0, device=p_log_p.device))
        return -p_log_p.sum(-1)


class MaskedMultiCategorical(SB3Methods):
    """sb3-contrib ``MaskableMultiCategoricalDistribution`` (and ``MaskableBernoulliDistribution``,
    ``sizes = [2] * n``): one :class:`MaskedCategorical` per ``torch.split`` of the logits and of the masks."""

    def __init__(self, logits: torch.Tensor, sizes: list[int], masks: Optional[torch.Tensor] = None):
        self.sizes = sizes
        splits = torch.split(logits.view(-1, sum(sizes)), sizes, dim=1)
        mask_splits: Sequence[Optional[torch.Tensor]] = [None] * len(sizes)
        if masks is not None:
            mask_splits = torch.split(torch.as_tensor(masks).view(-1, sum(sizes)), sizes, dim=1)
        self.dists = [MaskedCategorical(split, mask) for split, mask in zip(splits, mask_splits)]

    def sample(self) -> torch.Tensor:
        return torch.stack([dist.sample() for dist in self.dists], dim=1)

    def mode(self) -> torch.Tensor:
        return torch.stack([dist.mode() for dist in self.dists], dim=1)

    def log_prob(self, actions: torch.Tensor) -> torch.Tensor:
        actions = actions.view(-1, len(self.sizes))
        return torch.stack([d.log_prob(a) for d, a in zip(self.dists, torch.unbind(actions, dim=1))], dim=1).sum(dim=1)

    def entropy(self) -> torch.Tensor:
        return torch.stack([dist.entropy() for dist in self.dists], dim=1).sum(dim=1)


MaskedDistribution = Union[MaskedCategorical, MaskedMultiCategorical]
