"""The rollout step's sampling, per kind of action space: the floats and draws of the distributions' own.

Each sampler turns the action net's output of one rollout step into ``(actions, log_probs)`` with
the torch operations sb3's distribution runs, on the same shapes, in the same order (see
``ppo_dict.algo.rollout.rollout_step``), writing into the storage's rows when given them. What depends only on
the parameters is computed in :meth:`LeanSampler.refresh`, once per rollout, for the whole batch. Which
sampler a policy uses is its action spec's (``ppo_dict.data.actions.ActionSpec.sampler``).

The torch-RNG draws per step: ``normal_`` (Gaussian), ``multinomial`` (categorical: one per entry in
order) or ``bernoulli`` (MultiBinary) over the whole ``(n_envs, ...)`` batch; gSDE draws none.

Two ways to run a step:

* :meth:`LeanSampler.__call__`, the central step: sb3's own draws (``normal_``, ``multinomial``,
  ``bernoulli``), over the whole batch, in this process.
* :meth:`LeanSampler.draw` then :meth:`LeanSampler.sample`, the sharded step (``ppo_dict.algo.rollout.shard``): the
  main process draws the step's random numbers into tensors of :meth:`LeanSampler.draw_shapes`, with
  the same generator calls in the same order, and each process samples a window of rows from its
  rows of them. ``multinomial(p, 1, True)`` is ``argmax(p / q)`` with ``q`` one ``exponential_`` draw
  of ``p``'s shape (torch's own one-sample path), and ``bernoulli(p)`` is ``u < p`` with ``u`` one
  ``uniform_`` draw: the same numbers and the same generator state after, which the start probe
  (``ppo_dict.algo.rollout.shard_probe``) checks on the run's own shapes before the sharded step is used.
"""

from __future__ import annotations

import math
from typing import Optional, Sequence

import torch
from torch.nn import functional as F

from ppo_dict.data.distributions import GSDENoise, masked_logits

#: ``(actions, log_probs)`` rows to write a step's samples into, or None for new tensors.
Pair = Optional[tuple[torch.Tensor, torch.Tensor]]
#: ``math.log(math.sqrt(2 * math.pi))``, the constant torch's ``Normal.log_prob`` subtracts.
LOG_SQRT_2PI = math.log(math.sqrt(2 * math.pi))
#: Every row of the whole batch.
ALL = slice(None)


class LeanSampler:
    """``(actions, log_probs)`` of one rollout step's action-net output ``head [n_envs, n_outputs]``."""

    def refresh(self, log_std: Optional[torch.Tensor]) -> None:
        """Recompute what depends only on the parameters (the policy's ``log_std``, None without one)."""

    def draw_shapes(self, n_envs: int) -> list[tuple[int, ...]]:
        """The shapes of one step's random draws for ``n_envs`` envs (float32 each), in the order they are drawn."""
        return []

    def draw(self, into: Sequence[torch.Tensor]) -> None:
        """Draw one step's random numbers into ``into`` (tensors of :meth:`draw_shapes`), with the calls
        the central step makes on the default generator, in its order."""

    def __call__(
        self, head: torch.Tensor, latent_pi: torch.Tensor, out: Pair, rows: Optional[slice], masks: Optional[torch.Tensor]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The central step. ``latent_pi``: the actor's last hidden layer; ``out``: rows to write into; ``rows``:
        the envs of a double-buffered half; ``masks``: bool ``[n_envs, mask_dim]`` (masked policies)."""
        raise NotImplementedError

    def sample(
        self,
        head: torch.Tensor,
        latent_pi: torch.Tensor,
        draws: Sequence[torch.Tensor],
        span: slice,
        masks: Optional[torch.Tensor],
        matrices: Optional[torch.Tensor] = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The sharded step of the rows ``span`` of the batch: ``head``, ``latent_pi``, ``masks`` and ``draws``
        are those rows; ``matrices``: gSDE's exploration matrices of those rows."""
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

    def draw_shapes(self, n_envs: int) -> list[tuple[int, ...]]:
        return [(n_envs, self.action_dim)]

    def draw(self, into: Sequence[torch.Tensor]) -> None:
        into[0].normal_()

    def __call__(
        self, mean: torch.Tensor, latent_pi: torch.Tensor, out: Pair, rows: Optional[slice], masks: Optional[torch.Tensor]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        return self._sample(mean, self._eps.normal_(), ALL, out)

    def sample(
        self,
        mean: torch.Tensor,
        latent_pi: torch.Tensor,
        draws: Sequence[torch.Tensor],
        span: slice,
        masks: Optional[torch.Tensor],
        matrices: Optional[torch.Tensor] = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        return self._sample(mean, draws[0], span, None)

    def _sample(self, mean: torch.Tensor, eps: torch.Tensor, span: slice, out: Pair) -> tuple[torch.Tensor, torch.Tensor]:
        noise = eps * self._scale[span]
        actions = torch.add(mean, noise, out=None if out is None else out[0])
        # -((value - loc) ** 2) / (2 * var) - log_scale - log(sqrt(2 pi)), summed over the action dims
        log_prob = (actions - mean) ** 2 / self._minus_two_var[span] - self._log_scale[span] - LOG_SQRT_2PI
        return actions, torch.sum(log_prob, dim=1, out=None if out is None else out[1])


class StateDependentSampler(LeanSampler):
    """gSDE's sample and its ``log_prob(...).sum(1)`` (sb3 ``StateDependentNoiseDistribution``):
    scale ``sqrt(latent**2 @ std**2 + eps)`` (``std**2`` once per rollout), actions ``mean + noise(latent)``."""

    def __init__(self, gsde: GSDENoise):
        self.gsde = gsde

    def refresh(self, log_std: Optional[torch.Tensor]) -> None:
        self._std_squared = self.gsde.get_std(log_std) ** 2

    def __call__(
        self, mean: torch.Tensor, latent_pi: torch.Tensor, out: Pair, rows: Optional[slice], masks: Optional[torch.Tensor]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        return self._sample(mean, latent_pi, self.gsde.get_noise(latent_pi, rows), out)

    def sample(
        self,
        mean: torch.Tensor,
        latent_pi: torch.Tensor,
        draws: Sequence[torch.Tensor],
        span: slice,
        masks: Optional[torch.Tensor],
        matrices: Optional[torch.Tensor] = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        # sb3's get_noise for a batch with a matrix per env (the whole batch's bmm), on these rows' matrices
        noise = torch.bmm(latent_pi.unsqueeze(dim=1), matrices).squeeze(dim=1)
        return self._sample(mean, latent_pi, noise, None)

    def _sample(
        self, mean: torch.Tensor, latent_pi: torch.Tensor, noise: torch.Tensor, out: Pair
    ) -> tuple[torch.Tensor, torch.Tensor]:
        scale = torch.sqrt(torch.mm(latent_pi**2, self._std_squared) + self.gsde.epsilon)
        actions = torch.add(mean, noise, out=None if out is None else out[0])
        log_prob = (actions - mean) ** 2 / -(2 * scale**2) - scale.log() - LOG_SQRT_2PI
        return actions, torch.sum(log_prob, dim=1, out=None if out is None else out[1])


def into(out: Pair, actions: torch.Tensor, log_prob: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(actions, log_prob)`` copied into ``out``'s rows (int actions into the float32 row), or as they are."""
    if out is None:
        return actions, log_prob
    out[0].copy_(actions.reshape(out[0].shape))
    out[1].copy_(log_prob)
    return out[0], out[1]


def categorical(logits: torch.Tensor, out: Pair, q: Optional[torch.Tensor] = None) -> tuple[torch.Tensor, torch.Tensor]:
    """``Categorical(logits=...).sample()`` and its ``log_prob``: normalised logits, softmax, one multinomial
    draw; ``q``: that draw's exponentials (the sharded step), ``argmax(probs / q)`` as multinomial computes it."""
    normalized = logits - logits.logsumexp(dim=-1, keepdim=True)
    probs = torch.softmax(normalized, dim=-1)
    actions = torch.multinomial(probs, 1, True).T.reshape(-1) if q is None else torch.argmax(probs / q, dim=-1)
    return into(out, actions, normalized.gather(-1, actions.unsqueeze(-1)).squeeze(-1))


class CategoricalSampler(LeanSampler):
    """:func:`categorical` of the logits; ``masked``: sb3-contrib's, the logits normalised and masked first
    (``huge_neg``: the 0-d -1e8, made once)."""

    def __init__(self, masked: bool, huge_neg: torch.Tensor, n_outputs: int = 0):
        self.masked, self.huge_neg, self.n_outputs = masked, huge_neg, n_outputs

    def draw_shapes(self, n_envs: int) -> list[tuple[int, ...]]:
        return [(n_envs, self.n_outputs)]

    def draw(self, into: Sequence[torch.Tensor]) -> None:
        for q in into:  # multinomial's one-sample path: empty_like(probs).exponential_(1)
            q.exponential_()

    def __call__(
        self, head: torch.Tensor, latent_pi: torch.Tensor, out: Pair, rows: Optional[slice], masks: Optional[torch.Tensor]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        return categorical(masked_logits(head, masks, self.huge_neg) if self.masked else head, out)

    def sample(
        self,
        head: torch.Tensor,
        latent_pi: torch.Tensor,
        draws: Sequence[torch.Tensor],
        span: slice,
        masks: Optional[torch.Tensor],
        matrices: Optional[torch.Tensor] = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        return categorical(masked_logits(head, masks, self.huge_neg) if self.masked else head, None, draws[0])


class CategoricalsSampler(CategoricalSampler):
    """sb3's ``MultiCategoricalDistribution`` (sb3-contrib's maskable one when masked): one
    :func:`categorical` per ``torch.split`` of the logits ``[B, sum(sizes)]`` (and of the masks),
    sampled in order; actions stacked on dim 1 ``[B, len(sizes)]``, log-probs stacked and summed ``[B]``."""

    def __init__(self, sizes: list[int], masked: bool, huge_neg: torch.Tensor):
        super().__init__(masked, huge_neg)
        self.sizes = sizes

    def draw_shapes(self, n_envs: int) -> list[tuple[int, ...]]:
        return [(n_envs, size) for size in self.sizes]

    def __call__(
        self, head: torch.Tensor, latent_pi: torch.Tensor, out: Pair, rows: Optional[slice], masks: Optional[torch.Tensor]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        return self._sample(head, masks, [None] * len(self.sizes), out)

    def sample(
        self,
        head: torch.Tensor,
        latent_pi: torch.Tensor,
        draws: Sequence[torch.Tensor],
        span: slice,
        masks: Optional[torch.Tensor],
        matrices: Optional[torch.Tensor] = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        return self._sample(head, masks, draws, None)

    def _sample(
        self, head: torch.Tensor, masks: Optional[torch.Tensor], draws: Sequence[Optional[torch.Tensor]], out: Pair
    ) -> tuple[torch.Tensor, torch.Tensor]:
        splits = torch.split(head, self.sizes, dim=1)
        mask_splits = [None] * len(self.sizes) if masks is None else torch.split(masks.to(torch.bool), self.sizes, dim=1)
        pairs = [
            categorical(masked_logits(split, mask, self.huge_neg) if self.masked else split, None, q)
            for split, mask, q in zip(splits, mask_splits, draws)
        ]
        return into(out, torch.stack([a for a, _ in pairs], dim=1), torch.stack([lp for _, lp in pairs], dim=1).sum(dim=1))


class BernoulliSampler(LeanSampler):
    """sb3's ``BernoulliDistribution``: ``Bernoulli(logits=head)``, one ``bernoulli`` of ``sigmoid(head)`` over
    the batch (float 0/1 samples), log-probs ``-binary_cross_entropy_with_logits`` summed over dim 1."""

    def __init__(self, n_outputs: int):
        self.n_outputs = n_outputs

    def draw_shapes(self, n_envs: int) -> list[tuple[int, ...]]:
        return [(n_envs, self.n_outputs)]

    def draw(self, into: Sequence[torch.Tensor]) -> None:
        into[0].uniform_()  # bernoulli(p)'s draws: one uniform per entry, in order

    def __call__(
        self, head: torch.Tensor, latent_pi: torch.Tensor, out: Pair, rows: Optional[slice], masks: Optional[torch.Tensor]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        return self._sample(head, None, out)

    def sample(
        self,
        head: torch.Tensor,
        latent_pi: torch.Tensor,
        draws: Sequence[torch.Tensor],
        span: slice,
        masks: Optional[torch.Tensor],
        matrices: Optional[torch.Tensor] = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        return self._sample(head, draws[0], None)

    def _sample(self, head: torch.Tensor, uniform: Optional[torch.Tensor], out: Pair) -> tuple[torch.Tensor, torch.Tensor]:
        probs = torch.sigmoid(head)  # torch's logits_to_probs(logits, is_binary=True)
        actions = torch.bernoulli(probs) if uniform is None else (uniform < probs).to(probs.dtype)
        log_prob = -F.binary_cross_entropy_with_logits(head, actions, reduction="none")
        return into(out, actions, log_prob.sum(dim=1))
