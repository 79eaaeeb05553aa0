"""The policy's work in one rollout step: the same floats as ``ActorCritic.forward``, with little overhead.

sb3's ``ActorCriticPolicy.forward`` builds a distribution object per step and calls every layer
through ``nn.Module.__call__``; on small networks that Python work costs more than the arithmetic.
:class:`PolicyStep` runs the same torch operations, on the same shapes, in the same order, so every
float is the same (``tests/test_rollout_step.py`` compares it with ``forward`` bit for bit, and the
parity suite compares whole runs with sb3), but:

* layers run their own ``forward`` (no module hooks), and the features extractor only where it is
  not a plain flatten;
* what depends only on the parameters (the Gaussian's scale, its variance and log) is computed
  once per rollout in :meth:`PolicyStep.refresh`, with the ops and shapes sb3 uses every step;
* the sample's noise, the actions and the log-probs are written into preallocated tensors (on the
  CPU, the rollout storage's own rows).

The torch-RNG draws per step are unchanged: ``normal_`` (Box) or ``multinomial`` (Discrete) over
the whole ``(n_envs, ...)`` batch, one ``multinomial`` per entry in order (MultiDiscrete, and
MultiBinary under sb3-contrib's masking: ``n`` two-way categoricals); gSDE draws none (its
exploration matrices are drawn by the collector, at sb3's cadence), and its state-dependent scale
is computed per step as sb3 does, with ``std**2`` (parameters only) once per rollout.

Unmasked MultiBinary actions (one ``bernoulli``) take ``ActorCritic.forward`` itself, then the
outputs are copied into the rows: the same floats by construction, with the distribution objects'
overhead.
"""
from __future__ import annotations

import math
import time
from typing import Callable, Optional

import numpy as np
import torch
from gymnasium import spaces
from torch import nn
from torch.nn import functional as F

from ppo_dict.masking import HUGE_NEG, mask_sizes, masked_logits
from ppo_dict.policy import ActorCritic, FlattenExtractor
from ppo_dict.storage import TensorObs

#: ``(actions, values, log_probs)`` to write a step's outputs into.
Out = tuple[torch.Tensor, torch.Tensor, torch.Tensor]
#: ``math.log(math.sqrt(2 * math.pi))``, the constant torch's ``Normal.log_prob`` subtracts.
LOG_SQRT_2PI = math.log(math.sqrt(2 * math.pi))


def layers_of(sequential: nn.Sequential) -> list[Callable[[torch.Tensor], torch.Tensor]]:
    """What each layer's ``forward`` computes, without ``Module.__call__`` and its hooks: ``F.linear``
    with the layer's own parameter objects (updated in place by the optimizer) for a Linear."""
    return [linear(layer) if isinstance(layer, nn.Linear) else layer.forward for layer in sequential]


def linear(layer: nn.Linear) -> Callable[[torch.Tensor], torch.Tensor]:
    weight, bias = layer.weight, layer.bias
    return lambda x: F.linear(x, weight, bias)


def run(layers: list[Callable[[torch.Tensor], torch.Tensor]], x: torch.Tensor) -> torch.Tensor:
    for layer in layers:
        x = layer(x)
    return x


class PolicyStep:
    """Samples ``(actions, values, log_probs)`` for a batch of ``n_envs`` observations.

    Call :meth:`refresh` whenever the parameters changed (once per rollout), then call the
    object on each step's observations. Outputs: ``actions [n_envs, *action_shape]`` (unclipped),
    ``values [n_envs, 1]`` and ``log_probs [n_envs]``, in new tensors or, with ``out`` given, in
    those tensors (``actions [n_envs, action_dim]``, ``values [n_envs]``, ``log_probs [n_envs]``).
    """

    def __init__(self, policy: ActorCritic, n_envs: int):
        self.policy, self.n_envs = policy, n_envs
        self.sde = policy.use_sde
        self.box = isinstance(policy.action_space, spaces.Box) and not self.sde
        self.discrete = isinstance(policy.action_space, spaces.Discrete)
        self.masked = policy.masked  # sb3-contrib's categorical: the logits normalised and masked first
        # one categorical per entry: sb3's MultiDiscrete, sb3-contrib's masked MultiDiscrete and MultiBinary
        self.sizes = mask_sizes(policy.action_space) if isinstance(policy.action_space, spaces.MultiDiscrete) or (
            self.masked and isinstance(policy.action_space, spaces.MultiBinary)) else []
        self.multi = isinstance(policy.action_space, spaces.MultiBinary) and not self.sizes  # Bernoulli: forward itself
        device = policy.value_net.weight.device
        flat = isinstance(policy.pi_features_extractor, FlattenExtractor) and policy.share_features_extractor
        # nn.Flatten of a [B, n] batch (a 1-d Box) is that batch itself: skip the call
        one_dim = isinstance(policy.observation_space, spaces.Box) and len(policy.observation_space.shape) == 1
        self._features = None if not flat else (lambda x: x) if one_dim else (lambda x: x.flatten(1))
        self._pi = layers_of(policy.mlp_extractor.policy_net)
        self._vf = layers_of(policy.mlp_extractor.value_net)
        self._action_head, self._value_head = linear(policy.action_net), linear(policy.value_net)
        self._value_weight, self._value_bias = policy.value_net.weight, policy.value_net.bias
        if self.box:
            self._eps = torch.empty((n_envs, policy.action_dim), device=device)
        self._huge_neg = torch.tensor(HUGE_NEG, dtype=policy.action_net.weight.dtype, device=device)  # a masked logit
        self.refresh()

    @torch.no_grad()
    def refresh(self) -> None:
        """Recompute what depends only on the parameters, exactly as sb3 computes it each step:
        ``scale = ones_like(mean) * log_std.exp()`` ([n_envs, action_dim]), ``2 * scale**2`` (negated) and
        ``scale.log()``; with gSDE ``get_std(log_std) ** 2`` ([latent_dim, action_dim])."""
        if self.sde:
            self._std_squared = self.policy.action_head.gsde.get_std(self.policy.log_std) ** 2
        if not self.box:
            return
        log_std = self.policy.log_std
        scale = torch.ones((self.n_envs, self.policy.action_dim), device=log_std.device) * log_std.exp()
        # -(x) / (2 var) == x / -(2 var) bit for bit (negation is exact, division symmetric in sign): one op fewer per step
        self._scale, self._minus_two_var, self._log_scale = scale, -(2 * scale**2), scale.log()

    def latents(self, obs: TensorObs) -> tuple[torch.Tensor, torch.Tensor]:
        """``ActorCritic._latents``: the actor's and the critic's last hidden layers."""
        if self._features is None:
            return self.policy._latents(obs)
        features = self._features(self.policy._preprocess(obs))
        return run(self._pi, features), run(self._vf, features)

    @torch.inference_mode()
    def __call__(self, obs: TensorObs, out: Optional[Out] = None, rows: Optional[slice] = None,
                 masks: Optional[torch.Tensor] = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """One step. ``out``: ``(actions, values, log_probs)`` tensors to write into (the storage's rows).
        ``rows``: the envs of a double-buffered half (gSDE gives each its own exploration matrix).
        ``masks``: bool ``[n_envs, mask_dim]``, the valid actions (policies built with ``action_masks``)."""
        if self.multi:
            return self._forward(obs, out, masks)
        latent_pi, latent_vf = self.latents(obs)
        if out is None:
            values = self._value_head(latent_vf)
        else:  # F.linear of a 2-d input is this addmm (at::linear), here written into the storage's row
            values = torch.addmm(self._value_bias, latent_vf, self._value_weight.t(), out=out[1].view(-1, 1))
        head = self._action_head(latent_pi)
        pair = None if out is None else (out[0], out[2])
        if self.box:
            actions, log_probs = self._gaussian(head, pair)
        elif self.discrete:
            actions, log_probs = self._categorical(masked_logits(head, masks, self._huge_neg) if self.masked else head, pair)
        elif self.sizes:
            actions, log_probs = self._categoricals(head, masks, pair)
        else:
            actions, log_probs = self._state_dependent(head, latent_pi, pair, rows)
        return actions, values, log_probs

    def _gaussian(self, mean: torch.Tensor, out: Optional[tuple[torch.Tensor, torch.Tensor]]) -> tuple[torch.Tensor, torch.Tensor]:
        """``Normal(mean, scale).rsample()`` and its ``log_prob(...).sum(1)``, torch's expressions."""
        noise = self._eps.normal_() * self._scale
        actions = torch.add(mean, noise, out=None if out is None else out[0])
        # -((value - loc) ** 2) / (2 * var) - log_scale - log(sqrt(2 pi)), summed over the action dims
        log_prob = (actions - mean) ** 2 / self._minus_two_var - self._log_scale - LOG_SQRT_2PI
        return actions, torch.sum(log_prob, dim=1, out=None if out is None else out[1])

    def _categorical(self, logits: torch.Tensor, out: Optional[tuple[torch.Tensor, torch.Tensor]]) -> tuple[torch.Tensor, torch.Tensor]:
        """``Categorical(logits=...).sample()`` and its ``log_prob``: normalised logits, softmax, one multinomial draw."""
        normalized = logits - logits.logsumexp(dim=-1, keepdim=True)
        probs = torch.softmax(normalized, dim=-1)
        actions = torch.multinomial(probs, 1, True).T.reshape(-1)
        log_prob = normalized.gather(-1, actions.unsqueeze(-1)).squeeze(-1)
        if out is not None:
            out[0].copy_(actions.reshape(out[0].shape))
            out[1].copy_(log_prob)
            return out[0], out[1]
        return actions, log_prob

    def _categoricals(self, head: torch.Tensor, masks: Optional[torch.Tensor],
                      out: Optional[tuple[torch.Tensor, torch.Tensor]]) -> tuple[torch.Tensor, torch.Tensor]:
        """sb3's ``MultiCategoricalDistribution`` (sb3-contrib's maskable one when masked): one
        :meth:`_categorical` per ``torch.split`` of the logits ``[B, sum(sizes)]`` (and of the masks),
        sampled in order; actions stacked on dim 1 ``[B, len(sizes)]``, log-probs stacked and summed ``[B]``."""
        splits = torch.split(head, self.sizes, dim=1)
        mask_splits = [None] * len(self.sizes) if masks is None else torch.split(masks.to(torch.bool), self.sizes, dim=1)
        pairs = [self._categorical(masked_logits(split, mask, self._huge_neg) if self.masked else split, None)
                 for split, mask in zip(splits, mask_splits)]
        actions = torch.stack([a for a, _ in pairs], dim=1)
        log_prob = torch.stack([lp for _, lp in pairs], dim=1).sum(dim=1)
        if out is None:
            return actions, log_prob
        out[0].copy_(actions.reshape(out[0].shape))
        out[1].copy_(log_prob)
        return out[0], out[1]

    def _forward(self, obs: TensorObs, out: Optional[Out], masks: Optional[torch.Tensor] = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``ActorCritic.forward`` (MultiDiscrete, MultiBinary, masked or not), its outputs copied into ``out``."""
        actions, values, log_probs = self.policy(obs, action_masks=masks)
        if out is None:
            return actions, values, log_probs
        for row, result in zip(out, (actions, values, log_probs)):
            row.copy_(result.reshape(row.shape))
        return out[0], out[1].view(-1, 1), out[2]

    def _state_dependent(self, mean: torch.Tensor, latent: torch.Tensor, out: Optional[tuple[torch.Tensor, torch.Tensor]],
                         rows: Optional[slice]) -> tuple[torch.Tensor, torch.Tensor]:
        """gSDE's sample and its ``log_prob(...).sum(1)`` (sb3 ``StateDependentNoiseDistribution``):
        scale ``sqrt(latent**2 @ std**2 + eps)``, actions ``mean + noise(latent)``."""
        gsde = self.policy.action_head.gsde
        scale = torch.sqrt(torch.mm(latent**2, self._std_squared) + gsde.epsilon)
        actions = torch.add(mean, gsde.get_noise(latent, rows), out=None if out is None else out[0])
        log_prob = (actions - mean) ** 2 / -(2 * scale**2) - scale.log() - LOG_SQRT_2PI
        return actions, torch.sum(log_prob, dim=1, out=None if out is None else out[1])

    @torch.inference_mode()
    def value(self, obs: TensorObs) -> torch.Tensor:
        """``ActorCritic.predict_values``: the critic only, ``[B, 1]``."""
        if self._features is None:
            return self.policy.predict_values(obs)
        return self._value_head(run(self._vf, self._features(self.policy._preprocess(obs))))


def policy_step_seconds(policy: ActorCritic, n_envs: int, budget: float = 0.05) -> float:
    """Median wall seconds of one :class:`PolicyStep` on ``n_envs`` zero observations, measured
    within about ``budget`` seconds. Draws from the torch RNG: call it under ``torch.random.fork_rng``."""
    step = PolicyStep(policy, n_envs)
    obs = zero_obs(policy.observation_space, n_envs)
    times, deadline = [], time.perf_counter() + budget
    while len(times) < 200 and time.perf_counter() < deadline:
        start = time.perf_counter()
        step(obs)
        times.append(time.perf_counter() - start)
    return float(np.median(times[1:] or times))


def zero_obs(space: spaces.Space, n: int) -> TensorObs:
    """A batch of ``n`` all-zero observations of ``space`` (as stored: Discrete as ``[n, 1]``)."""
    if isinstance(space, spaces.Dict):
        return {key: zero_obs(sub, n) for key, sub in space.spaces.items()}
    shape = (1,) if isinstance(space, spaces.Discrete) else space.shape
    return torch.zeros((n, *shape), dtype=torch.from_numpy(np.zeros(0, dtype=space.dtype)).dtype)
