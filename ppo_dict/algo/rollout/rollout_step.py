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

The sampling is the action space's: its spec's sampler (``ppo_dict.data.actions``, ``ppo_dict.data.lean_sampling``).
The torch-RNG draws per step are unchanged: ``normal_`` (Box) or ``multinomial`` (Discrete) over
the whole ``(n_envs, ...)`` batch, one ``multinomial`` per entry in order (MultiDiscrete, and
MultiBinary under sb3-contrib's masking: ``n`` two-way categoricals); gSDE draws none (its
exploration matrices are drawn at sb3's cadence by ``ActionSpec.explore``, which the collector calls), and its
state-dependent scale is computed per step as sb3 does, with ``std**2`` (parameters only) once per rollout.

Its input is :class:`StepObsToDevice`'s (views of the storage on the CPU, a pinned copy for CUDA); its outputs land
where :func:`step_outputs` says (the storage's rows on the CPU, pinned buffers elsewhere).

A spec without a sampler (unmasked MultiBinary: one ``bernoulli``) takes ``ActorCritic.forward`` itself, then the
outputs are copied into the rows: the same floats by construction, with the distribution objects'
overhead.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable, Optional, Sequence

import numpy as np
import torch
from gymnasium import spaces
from torch import nn
from torch.nn import functional as F

from ppo_dict.algo.networks.policy import ActorCritic, FlattenExtractor
from ppo_dict.data.lean_sampling import ALL, LeanSampler, Pair, into
from ppo_dict.data.storage import OBS_KEY, RolloutStorage, TensorObs, channel_first, obs_to_tensor

#: ``(actions, values, log_probs)`` to write a step's outputs into.
Out = tuple[torch.Tensor, torch.Tensor, torch.Tensor]


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


@dataclass(frozen=True)
class RankRows:
    """A rank's envs ``[start, stop)`` of a run's global ``n_envs`` over ``torchrun`` ranks (``name``: the rank's, for
    messages)."""

    name: str
    start: int
    stop: int
    n_envs: int


class GlobalDraws(LeanSampler):
    """``sampler`` (a rank's, for its ``rows``' count) fed with its rows of the global batch's draws: every rank draws the
    global batch's random numbers (``[n_envs, ...]``, the single process's calls in its order, the generators seeded alike)
    and samples its rows with them (``ppo_dict.algo.ranks``)."""

    def __init__(self, sampler: LeanSampler, rows: RankRows, device: torch.device):
        self.sampler, self.rows = sampler, slice(rows.start, rows.stop)
        self.buffers = [torch.empty(shape, device=device) for shape in sampler.draw_shapes(rows.n_envs)]

    def refresh(self, log_std: Optional[torch.Tensor]) -> None:
        self.sampler.refresh(log_std)

    def draw_shapes(self, n_envs: int) -> list[tuple[int, ...]]:
        return self.sampler.draw_shapes(n_envs)

    def _draw(self) -> list[torch.Tensor]:
        """The global step's draws, made as the single process makes them; this rank's rows of them."""
        self.sampler.draw(self.buffers)
        return [buffer[self.rows] for buffer in self.buffers]

    def draw(self, into: Sequence[torch.Tensor]) -> None:
        for target, rows in zip(into, self._draw()):
            target.copy_(rows)

    def __call__(
        self, head: torch.Tensor, latent_pi: torch.Tensor, out: Pair, rows: Optional[slice], masks: Optional[torch.Tensor]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        actions, log_probs = self.sampler.sample(head, latent_pi, self._draw(), ALL, masks)
        return into(out, actions, log_probs)

    def sample(
        self,
        head: torch.Tensor,
        latent_pi: torch.Tensor,
        draws: Sequence[torch.Tensor],
        span: slice,
        masks: Optional[torch.Tensor],
        matrices: Optional[torch.Tensor] = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        return self.sampler.sample(head, latent_pi, draws, span, masks, matrices)


class PolicyStep:
    """Samples ``(actions, values, log_probs)`` for a batch of ``n_envs`` observations.

    Call :meth:`refresh` whenever the parameters changed (once per rollout), then call the
    object on each step's observations. Outputs: ``actions [n_envs, *action_shape]`` (unclipped),
    ``values [n_envs, 1]`` and ``log_probs [n_envs]``, in new tensors or, with ``out`` given, in
    those tensors (``actions [n_envs, action_dim]``, ``values [n_envs]``, ``log_probs [n_envs]``).
    ``ranks``: over ``torchrun`` ranks, the rank's envs of the global batch, whose draws it samples with
    (:class:`GlobalDraws`, chosen here by the run's plan).
    """

    def __init__(self, policy: ActorCritic, n_envs: int, ranks: Optional[RankRows] = None):
        self.policy, self.n_envs = policy, n_envs
        # a policy of the script's class (ppo_dict.algo.networks.own_policy): its own passes
        if getattr(policy, "own_forward", False):
            self.sampler, self._features = None, None
            return
        device = policy.value_net.weight.device
        # the action space's own sampling (ppo_dict.data.lean_sampling), or None: ActorCritic.forward itself
        self.sampler = policy.action_spec.sampler(n_envs, device, policy.action_net.weight.dtype)
        if ranks is not None and self.sampler is not None:  # the plan refuses a rank run whose policy has no sampler
            self.sampler = GlobalDraws(self.sampler, ranks, device)
        flat = isinstance(policy.pi_features_extractor, FlattenExtractor) and policy.share_features_extractor
        # nn.Flatten of a [B, n] batch (a 1-d Box) is that batch itself: skip the call
        one_dim = isinstance(policy.observation_space, spaces.Box) and len(policy.observation_space.shape) == 1
        self._features = None if not flat else (lambda x: x) if one_dim else (lambda x: x.flatten(1))
        self._pi = layers_of(policy.mlp_extractor.policy_net)
        self._vf = layers_of(policy.mlp_extractor.value_net)
        self._action_head, self._value_head = linear(policy.action_net), linear(policy.value_net)
        self._value_weight, self._value_bias = policy.value_net.weight, policy.value_net.bias
        self.refresh()

    @torch.no_grad()
    def refresh(self) -> None:
        """Recompute what depends only on the parameters (the sampler's scale), exactly as sb3 computes it each step."""
        if self.sampler is not None:
            self.sampler.refresh(getattr(self.policy, "log_std", None))

    def latents(self, obs: TensorObs) -> tuple[torch.Tensor, torch.Tensor]:
        """``ActorCritic._latents``: the actor's and the critic's last hidden layers."""
        if self._features is None:
            return self.policy._latents(obs)
        features = self._features(self.policy._preprocess(obs))
        return run(self._pi, features), run(self._vf, features)

    @torch.inference_mode()
    def __call__(
        self,
        obs: TensorObs,
        out: Optional[Out] = None,
        rows: Optional[slice] = None,
        masks: Optional[torch.Tensor] = None,
        draws: Optional[Sequence[torch.Tensor]] = None,
        matrices: Optional[torch.Tensor] = None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """One step. ``out``: ``(actions, values, log_probs)`` tensors to write into (the storage's rows).
        ``rows``: which rows of the whole batch these are: the envs of a double-buffered half (gSDE gives each its own
        exploration matrix), or a sharded step's window. ``masks``: bool ``[n_envs, mask_dim]``, the valid actions
        (policies built with ``action_masks``). ``draws``: the step's random numbers, drawn by the main process for the
        whole batch, the window's rows of them (the sharded step, ``ppo_dict.algo.rollout.shard``: every process runs this
        same call on its window; None: drawn here, sb3's own calls); ``matrices``: gSDE's exploration matrices of those
        rows."""
        if self.sampler is None:
            return self._forward(obs, out, masks)
        latent_pi, latent_vf = self.latents(obs)
        if out is None:
            values = self._value_head(latent_vf)
        else:  # F.linear of a 2-d input is this addmm (at::linear), here written into the storage's row
            values = torch.addmm(self._value_bias, latent_vf, self._value_weight.t(), out=out[1].view(-1, 1))
        head = self._action_head(latent_pi)
        if draws is not None:
            actions, log_probs = self.sampler.sample(head, latent_pi, draws, rows, masks, matrices)
        else:
            actions, log_probs = self.sampler(head, latent_pi, None if out is None else (out[0], out[2]), rows, masks)
        return actions, values, log_probs

    def _forward(
        self, obs: TensorObs, out: Optional[Out], masks: Optional[torch.Tensor] = None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``ActorCritic.forward`` (unmasked MultiBinary), its outputs copied into ``out``."""
        actions, values, log_probs = self.policy(obs, action_masks=masks)
        if out is None:
            return actions, values, log_probs
        for row, result in zip(out, (actions, values, log_probs)):
            row.copy_(result.reshape(row.shape))
        return out[0], out[1].view(-1, 1), out[2]

    @torch.inference_mode()
    def value(self, obs: TensorObs) -> torch.Tensor:
        """``ActorCritic.predict_values``: the critic only, ``[B, 1]``."""
        return self.critic(obs)

    def critic(self, obs: TensorObs) -> torch.Tensor:
        """:meth:`value` without entering inference mode (for a caller already in it, calling it often)."""
        if self._features is None:
            return self.policy.predict_values(obs)
        return self._value_head(run(self._vf, self._features(self.policy._preprocess(obs))))


class StepObsToDevice:
    """The observations of one rollout step as policy input on ``device``.

    CPU: views of the storage itself, no copy (tensors of the whole arrays are made once; a step
    indexes them); an sb3 vec env's arrays as it returned them, where its pool kept them
    (:meth:`~ppo_dict.data.storage.RolloutStorage.step_input`). CUDA: one pinned staging buffer per key, one copy into
    it and one non-blocking host-to-device copy per step; uint8 images travel as uint8 and are scaled on the GPU.
    Reusing the staging buffer is safe because every step synchronises on the actions' copy back before the next copy.
    """

    def __init__(self, storage: RolloutStorage, device: torch.device):
        self.storage, self.device = storage, device
        self.pinned: dict[str, torch.Tensor] = {}
        self.mask_staging: Optional[torch.Tensor] = None  # CUDA: the action masks' staging buffer, made at first use
        if device.type == "cuda":
            for key, (shape, dtype) in storage.obs_layout.items():
                torch_dtype = torch.from_numpy(np.empty(0, dtype=dtype)).dtype
                self.pinned[key] = torch.empty((storage.n_envs, *shape), dtype=torch_dtype).pin_memory()
        self.refresh()

    def refresh(self) -> None:
        """Tensors of the storage's current observation arrays (call again after ``own_obs_stage``)."""
        self.views = self.storage.obs_views()

    def __call__(self, t: int) -> TensorObs:
        if not self.pinned:
            returned = self.storage.step_input(t)  # an sb3 vec env's arrays: read as it returned them, as sb3 reads them
            if returned is not None:
                return obs_to_tensor(returned, self.device)
            if not self.storage.is_dict_obs:
                return self.views[OBS_KEY][t]
            return {key: view[t] for key, view in self.views.items()}
        on_device = {}
        for key, arr in self.storage.obs_at(t).items():
            staging = self.pinned[key]
            staging.copy_(torch.from_numpy(arr))
            on_device[key] = staging.to(self.device, non_blocking=True)
            if key in self.storage.channel_last_keys:
                on_device[key] = channel_first(on_device[key])
        return on_device if self.storage.is_dict_obs else on_device[OBS_KEY]

    def masks(self, masks: torch.Tensor, t: int, span: slice) -> torch.Tensor:
        """The action masks of step ``t``'s envs ``span`` on the device, bool ``[len(span), mask_dim]``.
        masks: the storage's ``action_masks`` as a tensor. CPU: the rows themselves. CUDA: through a
        pinned staging buffer and one non-blocking copy, as the observations (a plain ``.to(device)``
        from pageable memory waits for the copy)."""
        if not self.pinned:
            return masks[t, span].to(self.device)
        rows = masks[t, span]
        if self.mask_staging is None:
            self.mask_staging = torch.empty((self.storage.n_envs, rows.shape[1]), dtype=torch.bool).pin_memory()
        staging = self.mask_staging[: len(rows)]
        staging.copy_(rows)
        return staging.to(self.device, non_blocking=True)


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
