"""The rollout step's sampling, per kind of action space: the floats and draws of the distributions' own.

Each sampler turns the action net's output of one rollout step into ``(actions, log_probs)`` with
the torch operations sb3's distribution runs, on the same shapes, in the same order (see
``ppo_dict.algo.rollout_step``), writing into the storage's rows when given them. What depends only on
the parameters is computed in :meth:`LeanSampler.refresh`, once per rollout. Which sampler a policy
uses is its action spec's (``ppo_dict.data.actions.ActionSpec.sampler``).

The torch-RNG draws per step: ``normal_`` (Gaussian) or ``multinomial`` (categorical) over the whole
``(n_envs, ...)`` batch, one ``multinomial`` per entry in order (categoricals); gSDE draws none.
"""
from __future__ import annotations

import math
from typing import Optional

import torch

from ppo_dict.data.distributions import GSDENoise, masked_logits

#: ``(actions, log_probs)`` rows to write a step's samples into, or None for new tensors.
Pair = Optional[tuple[torch.Tensor, torch.Tensor]]
#: ``math.log(math.sqrt(2 * math.pi))``, the constant torch's ``Normal.log_prob`` subtracts.
LOG_SQRT_2PI = math.log(math.sqrt(2 * math.pi))


class LeanSampler:
    """``(actions, log_probs)`` of one rollout step's action-net output ``head [n_envs, n_outputs]``."""

    def refresh(self, log_std: Optional[torch.Tensor]) -> None:
        """Recompute what depends only on the parameters (the policy's ``log_std``, None without one)."""

    def __call__(self, head: torch.Tensor, latent_pi: torch.Tensor, out: Pair, rows: Optional[slice],
                 masks: Optional[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """``latent_pi``: the actor's last hidden layer; ``out``: rows to write into; ``rows``: the envs of a
        double-buffered half; ``masks``: bool ``[n_envs, mask_dim]`` (masked policies)."""
        raise NotImplementedError


class GaussianSampler(LeanSampler):
    """``Normal(mean, scale).rsample()`` and its ``log_prob(...).sum(1)``, torch's expressions; the
    scale ``ones_like(mean) * log_std.exp()`` ([n_envs, action_dim]), ``2 * scale**2`` (negated) and
    ``scale.log()`` once per rollout, with sb3's ops and shapes."""

    def __init__(self, n_envs: int, action_dim: int, device: torch.device):
        self.n_envs, self.action_dim = n_envs, action_dim
        self._eps = torch.empty((n_envs, action_dim), device=device)

    def refresh(self, log_std: Optional[torch.Tensor]) -> None:
        scale = torch.ones((self.n_envs, self.action_dim), device=log_std.device) * log_std.exp()
        # -(x) / (2 var) == x / -(2 var) bit for bit (negation is exact, division symmetric in sign): one op fewer per step
        self._scale, self._minus_two_var, self._log_scale = scale, -(2 * scale**2), scale.log()

    def __call__(self, mean: torch.Tensor, latent_pi: torch.Tensor, out: Pair, rows: Optional[slice],
                 masks: Optional[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        noise = self._eps.normal_() * self._scale
        actions = torch.add(mean, noise, out=None if out is None else out[0])
        # -((value - loc) ** 2) / (2 * var) - log_scale - log(sqrt(2 pi)), summed over the action dims
        log_prob = (actions - mean) ** 2 / self._minus_two_var - self._log_scale - LOG_SQRT_2PI
        return actions, torch.sum(log_prob, dim=1, out=None if out is None else out[1])


class StateDependentSampler(LeanSampler):
    """gSDE's sample and its ``log_prob(...).sum(1)`` (sb3 ``StateDependentNoiseDistribution``):
    scale ``sqrt(latent**2 @ std**2 + eps)`` (``std**2`` once per rollout), actions ``mean + noise(latent)``."""

    def __init__(self, gsde: GSDENoise):
        self.gsde = gsde

    def refresh(self, log_std: Optional[torch.Tensor]) -> None:
        self._std_squared = self.gsde.get_std(log_std) ** 2

    def __call__(self, mean: torch.Tensor, latent_pi: torch.Tensor, out: Pair, rows: Optional[slice],
                 masks: Optional[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        gsde = self.gsde
        scale = torch.sqrt(torch.mm(latent_pi**2, self._std_squared) + gsde.epsilon)
        actions = torch.add(mean, gsde.get_noise(latent_pi, rows), out=None if out is None else out[0])
        log_prob = (actions - mean) ** 2 / -(2 * scale**2) - scale.log() - LOG_SQRT_2PI
        return actions, torch.sum(log_prob, dim=1, out=None if out is None else out[1])


def into(out: Pair, actions: torch.Tensor, log_prob: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(actions, log_prob)`` copied into ``out``'s rows (int actions into the float32 row), or as they are."""
    if out is None:
        return actions, log_prob
    out[0].copy_(actions.reshape(out[0].shape))
    out[1].copy_(log_prob)
    return out[0], out[1]


def categorical(logits: torch.Tensor, out: Pair) -> tuple[torch.Tensor, torch.Tensor]:
    """``Categorical(logits=...).sample()`` and its ``log_prob``: normalised logits, softmax, one multinomial draw."""
    normalized = logits - logits.logsumexp(dim=-1, keepdim=True)
    probs = torch.softmax(normalized, dim=-1)
    actions = torch.multinomial(probs, 1, True).T.reshape(-1)
    return into(out, actions, normalized.gather(-1, actions.unsqueeze(-1)).squeeze(-1))


class CategoricalSampler(LeanSampler):
    """:func:`categorical` of the logits; ``masked``: sb3-contrib's, the logits normalised and masked first
    (``huge_neg``: the 0-d -1e8, made once)."""

    def __init__(self, masked: bool, huge_neg: torch.Tensor):
        self.masked, self.huge_neg = masked, huge_neg

    def __call__(self, head: torch.Tensor, latent_pi: torch.Tensor, out: Pair, rows: Optional[slice],
                 masks: Optional[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        return categorical(masked_logits(head, masks, self.huge_neg) if self.masked else head, out)


class CategoricalsSampler(CategoricalSampler):
    """sb3's ``MultiCategoricalDistribution`` (sb3-contrib's maskable one when masked): one
    :func:`categorical` per ``torch.split`` of the logits ``[B, sum(sizes)]`` (and of the masks),
    sampled in order; actions stacked on dim 1 ``[B, len(sizes)]``, log-probs stacked and summed ``[B]``."""

    def __init__(self, sizes: list[int], masked: bool, huge_neg: torch.Tensor):
        super().__init__(masked, huge_neg)
        self.sizes = sizes

    def __call__(self, head: torch.Tensor, latent_pi: torch.Tensor, out: Pair, rows: Optional[slice],
                 masks: Optional[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        splits = torch.split(head, self.sizes, dim=1)
        mask_splits = [None] * len(self.sizes) if masks is None else torch.split(masks.to(torch.bool), self.sizes, dim=1)
        pairs = [categorical(masked_logits(split, mask, self.huge_neg) if self.masked else split, None)
                 for split, mask in zip(splits, mask_splits)]
        return into(out, torch.stack([a for a, _ in pairs], dim=1), torch.stack([lp for _, lp in pairs], dim=1).sum(dim=1))
