"""One home per action space: :class:`ActionSpec` (``ppo_dict.data.action_kind``) and its kinds, made by
:func:`action_spec`.

What ppo_dict does that depends on the kind of action space, it asks the space's spec; a new kind
of space is a subclass here (and its distribution in ``ppo_dict.data.distributions``). A spec holds:

* sb3's refusals (:meth:`ActionSpec.problem`, :func:`action_space_problem`; unknown kinds by name);
* the storage layout of one env's action (:attr:`ActionSpec.layout`, sb3's ``get_action_dim``);
* the action net and the distribution of each pass (sb3's ``proba_distribution_net`` and ``proba_distribution``;
  sb3-contrib's maskable ones for the masked kinds), whose ``mode()`` is evaluation's and the ONNX export's action;
* the rollout step's lean sampling (:meth:`ActionSpec.sampler`, ``ppo_dict.data.lean_sampling``);
* the env-side conversion (:meth:`ActionSpec.to_env`: sb3 clips Box actions to the bounds before
  ``env.step`` and stores the unclipped ones; :meth:`ActionSpec.env_module` in an exported graph);
* the training-side cast of a minibatch's actions (:meth:`ActionSpec.to_training`);
* the categoricals an invalid-action mask covers (:attr:`ActionSpec.mask_sizes`; None: no masks);
* the exploration-noise schedule of a rollout (:meth:`ActionSpec.explore`: gSDE's matrices).
"""

from __future__ import annotations

from typing import Optional, Union

import numpy as np
import torch
from gymnasium import spaces
from torch import nn

from ppo_dict.data.action_kind import ActionSpec
from ppo_dict.data.distributions import (
    HUGE_NEG,
    BernoulliDist,
    CategoricalDist,
    DiagGaussian,
    Distribution,
    GSDENoise,
    MaskedCategorical,
    MaskedDistribution,
    MaskedMultiCategorical,
    MultiCategorical,
    StateDependentNoise,
)
from ppo_dict.data.lean_sampling import (
    BernoulliSampler,
    CategoricalSampler,
    CategoricalsSampler,
    GaussianSampler,
    LeanSampler,
    StateDependentSampler,
)


class GaussianSpec(ActionSpec):
    """Box: sb3's ``DiagGaussianDistribution``, one learned log-std per action dim; clipped to the bounds for the env."""

    lean_evaluate = True

    def __init__(self, space: spaces.Box):
        super().__init__(space)
        self.low, self.high = (np.asarray(b).reshape(-1) for b in (space.low, space.high))

    def problem(self) -> str:
        if not np.all(np.isfinite(np.array([self.space.low, self.space.high]))):
            return "Continuous action space must have a finite lower and upper bound"
        return ""

    @property
    def n_outputs(self) -> int:
        return int(np.prod(self.space.shape))

    def build(self, latent_dim: int, log_std_init: float) -> tuple[nn.Linear, Optional[nn.Parameter]]:
        action_net = nn.Linear(latent_dim, self.n_outputs)
        # sb3's th.ones(n) * log_std_init, the same values; on the meta device (run/resources.py) it imports no torch._dynamo
        return action_net, nn.Parameter(torch.full((self.n_outputs,), float(log_std_init)), requires_grad=True)

    def unmasked(self, head: torch.Tensor, log_std: Optional[torch.Tensor], latent_pi: torch.Tensor) -> Distribution:
        return DiagGaussian(head, log_std)

    def sampler(self, n_envs: int, device: torch.device, dtype: torch.dtype) -> Optional[LeanSampler]:
        return GaussianSampler(n_envs, self.n_outputs, device)

    def to_env(self, actions: np.ndarray, out: Optional[np.ndarray] = None) -> np.ndarray:
        """``np.clip`` to the bounds, as sb3 (``torch.clamp`` differs on signed zeros at a bound of 0);
        ``actions``: ``[B, *shape]`` or ``[B, action_dim]`` (the storage's rows), ``out`` ``[B, action_dim]``."""
        flat = actions.reshape(len(actions), len(self.low))
        return np.clip(flat, self.low, self.high, out=out).reshape(actions.shape)

    def env_module(self) -> nn.Module:
        return ClampToBounds(self.space)


class ClampToBounds(nn.Module):
    """``torch.clamp`` to a Box's bounds (in an exported graph; the same values as ``np.clip`` but on signed zeros)."""

    def __init__(self, space: spaces.Box):
        super().__init__()
        self.register_buffer("low", torch.as_tensor(space.low))
        self.register_buffer("high", torch.as_tensor(space.high))

    def forward(self, actions: torch.Tensor) -> torch.Tensor:
        return torch.clamp(actions, self.low, self.high)


class UnscaleToBounds(ClampToBounds):
    """sb3's ``unscale_action`` in an exported graph: ``low + 0.5 * (action + 1) * (high - low)``."""

    def forward(self, actions: torch.Tensor) -> torch.Tensor:
        return self.low + (0.5 * (actions + 1.0) * (self.high - self.low))


class StateDependentSpec(GaussianSpec):
    """Box with gSDE: sb3's ``StateDependentNoiseDistribution`` (features not learned); its exploration
    matrices (:class:`GSDENoise`) are drawn at sb3's cadence (:meth:`explore`). ``squash_output``: actions
    squashed into [-1, 1] by ``tanh`` and rescaled to the bounds for the env (sb3's ``unscale_action``), not clipped."""

    lean_evaluate = False

    def __init__(self, space: spaces.Box, full_std: bool = True, use_expln: bool = False, squash_output: bool = False):
        super().__init__(space)
        self.full_std, self.use_expln, self.squash = full_std, use_expln, squash_output

    def build(self, latent_dim: int, log_std_init: float) -> tuple[nn.Linear, Optional[nn.Parameter]]:
        action_net = nn.Linear(latent_dim, self.n_outputs)
        self.gsde = GSDENoise(latent_dim, self.n_outputs, self.full_std, self.use_expln)
        shape = (latent_dim, self.n_outputs) if self.full_std else (latent_dim, 1)
        log_std = nn.Parameter(torch.full(shape, float(log_std_init)), requires_grad=True)  # as DiagGaussian's, above
        self.gsde.sample_weights(log_std)
        return action_net, log_std

    def unmasked(self, head: torch.Tensor, log_std: Optional[torch.Tensor], latent_pi: torch.Tensor) -> Distribution:
        return StateDependentNoise(head, log_std, latent_pi, self.gsde, self.squash)

    def explore(self, log_std: Optional[torch.Tensor], n_envs: int, t: Optional[int] = None, sample_freq: int = -1) -> None:
        """New exploration matrices, one per env (sb3 ``collect_rollouts``): before the first step, and
        every ``sample_freq`` steps when it is positive, step 0 included (a second draw there)."""
        if t is None or (sample_freq > 0 and t % sample_freq == 0):
            with torch.no_grad():  # here, not around every call: a no_grad block costs ~5 us, a rollout step's no-op call 0.3
                self.gsde.sample_weights(log_std, batch_size=n_envs)  # type: ignore[union-attr]

    def sampler(self, n_envs: int, device: torch.device, dtype: torch.dtype) -> Optional[LeanSampler]:
        return None if self.squash else StateDependentSampler(self.gsde)

    def to_env(self, actions: np.ndarray, out: Optional[np.ndarray] = None) -> np.ndarray:
        """Squashed actions rescaled to the bounds, sb3's ``unscale_action`` expression for expression; else clipped."""
        if not self.squash:
            return super().to_env(actions, out)
        flat = actions.reshape(len(actions), len(self.low))
        unscaled = self.low + (0.5 * (flat + 1.0) * (self.high - self.low))
        if out is not None:
            out[...] = unscaled
        return unscaled.reshape(actions.shape)

    def env_module(self) -> nn.Module:
        return UnscaleToBounds(self.space) if self.squash else super().env_module()


class DiscreteSpec(ActionSpec):
    """Discrete: sb3's ``CategoricalDistribution``; stored as one integer, scored as int64 ``[B]``."""

    @property
    def layout(self) -> tuple[tuple[int, ...], np.dtype, int]:
        return (), np.dtype(self.space.dtype), 1

    @property
    def n_outputs(self) -> int:
        return int(self.space.n)

    @property
    def mask_sizes(self) -> Optional[list[int]]:
        return [int(self.space.n)]

    def unmasked(self, head: torch.Tensor, log_std: Optional[torch.Tensor], latent_pi: torch.Tensor) -> Distribution:
        return CategoricalDist(head)

    def sampler(self, n_envs: int, device: torch.device, dtype: torch.dtype) -> Optional[LeanSampler]:
        return CategoricalSampler(self.masked, huge_neg(dtype, device), self.n_outputs)

    def to_training(self, actions: torch.Tensor) -> torch.Tensor:
        return actions.long().flatten()  # sb3 PPO.train: "Convert discrete action from float to long"


class MultiDiscreteSpec(ActionSpec):
    """MultiDiscrete: sb3's ``MultiCategoricalDistribution``, one categorical per entry of a one-row ``nvec``."""

    def problem(self) -> str:
        if self.space.nvec.ndim != 1:
            return f"Multi-dimensional {self.space} action space is not supported (sb3's buffers hold one row of nvec)"
        return ""

    @property
    def n_outputs(self) -> int:
        return sum(int(n) for n in self.space.nvec)

    @property
    def mask_sizes(self) -> Optional[list[int]]:
        return [int(n) for n in self.space.nvec] if self.space.nvec.ndim == 1 else None

    def unmasked(self, head: torch.Tensor, log_std: Optional[torch.Tensor], latent_pi: torch.Tensor) -> Distribution:
        return MultiCategorical(head, [int(n) for n in self.space.nvec])

    def sampler(self, n_envs: int, device: torch.device, dtype: torch.dtype) -> Optional[LeanSampler]:
        return CategoricalsSampler([int(n) for n in self.space.nvec], self.masked, huge_neg(dtype, device))


class MultiBinarySpec(ActionSpec):
    """MultiBinary(n): sb3's ``BernoulliDistribution`` (one ``bernoulli`` over the batch)."""

    def problem(self) -> str:
        if not isinstance(self.space.n, (int, np.integer)):
            return f"Multi-dimensional MultiBinary({self.space.n}) action space is not supported. You can flatten it instead."
        return ""

    @property
    def n_outputs(self) -> int:
        return int(self.space.n)

    @property
    def mask_sizes(self) -> Optional[list[int]]:
        """``n`` two-way categoricals: entry i's pair ``[may be 0, may be 1]``."""
        return [2] * int(self.space.n) if isinstance(self.space.n, (int, np.integer)) else None

    def unmasked(self, head: torch.Tensor, log_std: Optional[torch.Tensor], latent_pi: torch.Tensor) -> Distribution:
        return BernoulliDist(head)

    def sampler(self, n_envs: int, device: torch.device, dtype: torch.dtype) -> Optional[LeanSampler]:
        return BernoulliSampler(self.n_outputs)


class Masked:
    """sb3-contrib's ``MaskableActorCriticPolicy`` for a kind (a mixin before it): the maskable
    distribution of the spec's ``mask_sizes`` categoricals (MultiBinary as ``n`` two-way ones, ``2n``
    outputs), MaskablePPO's refusals after PPO's."""

    masked = True
    space: spaces.Space

    mask_sizes: list[int]

    def problem(self) -> str:
        return super().problem() or ("" if self.mask_sizes is not None else masks_refused(self.space))  # type: ignore[misc]

    @property
    def n_outputs(self) -> int:
        return sum(self.mask_sizes)

    def distribution(
        self,
        head: torch.Tensor,
        log_std: Optional[torch.Tensor],
        latent_pi: torch.Tensor,
        masks: Optional[torch.Tensor] = None,
    ) -> Union[Distribution, MaskedDistribution]:
        """sb3-contrib ``make_masked_proba_distribution(space).proba_distribution(logits)`` with masks applied."""
        return MaskedMultiCategorical(head, self.mask_sizes, masks)


class MaskedDiscreteSpec(Masked, DiscreteSpec):
    """Discrete under sb3-contrib: ``MaskableCategoricalDistribution``."""

    def distribution(
        self,
        head: torch.Tensor,
        log_std: Optional[torch.Tensor],
        latent_pi: torch.Tensor,
        masks: Optional[torch.Tensor] = None,
    ) -> Union[Distribution, MaskedDistribution]:
        return MaskedCategorical(head.view(-1, int(self.space.n)), masks)


class MaskedMultiDiscreteSpec(Masked, MultiDiscreteSpec):
    """MultiDiscrete under sb3-contrib: ``MaskableMultiCategoricalDistribution``."""


class MaskedMultiBinarySpec(Masked, MultiBinarySpec):
    """MultiBinary under sb3-contrib: ``MaskableBernoulliDistribution`` (``n`` two-way categoricals, one multinomial each)."""

    def sampler(self, n_envs: int, device: torch.device, dtype: torch.dtype) -> Optional[LeanSampler]:
        return CategoricalsSampler(self.mask_sizes, self.masked, huge_neg(dtype, device))


def huge_neg(dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """The 0-d -1e8 of a masked logit, made once per sampler, not per step (``ppo_dict.data.distributions.masked_logits``)."""
    return torch.tensor(HUGE_NEG, dtype=dtype, device=device)


#: Each kind of space sb3's PPO takes, in its message's order: its spec, with gSDE, with sb3-contrib's masks (None: refused).
KINDS: dict[type[spaces.Space], tuple[type[ActionSpec], Optional[type[ActionSpec]], Optional[type[ActionSpec]]]] = {
    spaces.Box: (GaussianSpec, StateDependentSpec, None),
    spaces.Discrete: (DiscreteSpec, None, MaskedDiscreteSpec),
    spaces.MultiDiscrete: (MultiDiscreteSpec, None, MaskedMultiDiscreteSpec),
    spaces.MultiBinary: (MultiBinarySpec, None, MaskedMultiBinarySpec),
}


def _kinds(space: spaces.Space) -> Optional[tuple[type[ActionSpec], Optional[type[ActionSpec]], Optional[type[ActionSpec]]]]:
    return next((kinds for kind, kinds in KINDS.items() if isinstance(space, kind)), None)


#: The action spaces sb3's PPO takes (``PPO.__init__``'s ``supported_action_spaces``), in its message's order.
SUPPORTED_ACTION_SPACES = tuple(KINDS)


def action_spec(
    space: spaces.Space,
    use_sde: bool = False,
    masked: bool = False,
    full_std: bool = True,
    use_expln: bool = False,
    squash_output: bool = False,
) -> ActionSpec:
    """The spec of ``space`` (gSDE with ``use_sde``, set by ``full_std``, ``use_expln``, ``squash_output``; sb3-contrib's
    maskable distributions with ``masked``). Raises ``ValueError`` naming a space of no supported kind, or a kind sb3
    refuses gSDE or masks for; what sb3 refuses in a space of a supported kind is the spec's :meth:`~ActionSpec.problem`."""
    kinds = _kinds(space)
    if kinds is None:
        raise ValueError(f"The algorithm only supports {SUPPORTED_ACTION_SPACES} as action spaces but {space} was provided")
    plain, state_dependent, maskable = kinds
    if use_sde and state_dependent is None:  # sb3 BaseAlgorithm.__init__
        raise ValueError("generalized State-Dependent Exploration (gSDE) can only be used with continuous actions.")
    if masked and maskable is None:
        raise ValueError(masks_refused(space))
    if squash_output and not use_sde:  # sb3 ActorCriticPolicy.__init__
        raise ValueError("squash_output=True is only available when using gSDE (use_sde=True)")
    if use_sde:
        return StateDependentSpec(space, full_std, use_expln, squash_output)
    return (maskable if masked else plain)(space)


def action_space_problem(space: spaces.Space, use_sde: bool = False, masked: bool = False) -> str:
    """Why sb3's PPO (sb3-contrib's MaskablePPO with ``masked``) refuses ``space`` (``""`` when it takes it), in its words."""
    try:
        return action_spec(space, use_sde, masked).problem()
    except ValueError as exc:
        return str(exc)


def masks_refused(space: spaces.Space) -> str:
    """sb3-contrib's MaskablePPO's refusal of ``space`` as an action space with masks."""
    return (
        f"invalid-action masks need Discrete, one-dimensional MultiDiscrete or MultiBinary(n) actions (MaskablePPO's), "
        f"not {space}"
    )


def masking_space_problem(space: spaces.Space) -> str:
    """Why sb3-contrib's MaskablePPO refuses ``space`` as an action space (``""`` when it takes it):
    a space of a kind it has masks for, whose masks its spec can lay out."""
    kinds = _kinds(space)
    if kinds is None or kinds[2] is None or kinds[2](space).mask_sizes is None:
        return masks_refused(space)
    return ""


def mask_sizes(space: spaces.Space) -> list[int]:
    """The categoricals a mask for ``space`` covers (its masked spec's :attr:`~ActionSpec.mask_sizes`): ``[n]`` (Discrete),
    ``nvec`` (MultiDiscrete) or ``[2] * n`` (MultiBinary). Raises ``ValueError`` for a space MaskablePPO takes no masks for."""
    problem = masking_space_problem(space)
    if problem:
        raise ValueError(problem)
    return action_spec(space, masked=True).mask_sizes  # type: ignore[return-value]
