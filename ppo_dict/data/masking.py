"""Invalid-action masking as sb3-contrib 2.9.2's ``MaskablePPO`` does it (``--action_masks``).

What sb3-contrib does differently from PPO is listed in ``docs/sb3_parity.md`` section 11. Here:

* **Which runs have masks.** ``ppo_dict.vec.make_env_pool`` marks the action space of a run with
  masks (:func:`with_action_masks`: a copy carrying one attribute); the storage, built from the
  spaces alone in every process, then allocates ``action_masks`` with the env-written arrays, so
  the shared-memory layout holds it and the workers write it with no extra message.
* **The env side.** :class:`MaskWriter` asks each env for ``action_masks()`` as sb3-contrib's
  ``get_action_masks`` does through ``DummyVecEnv.env_method`` (``env.get_wrapper_attr``, so
  sb3-contrib's ``ActionMasker`` wrapper works), checks it and writes it into
  ``action_masks[t, env]`` after each reset and step.
* **The policy side.** :class:`MaskedCategorical` and :class:`MaskedMultiCategorical` are
  sb3-contrib's ``MaskableCategorical`` and ``MaskableMultiCategoricalDistribution`` (MultiBinary is
  the latter with ``[2] * n``): the same torch calls on the same shapes, so the same floats and draws.
"""
from __future__ import annotations

import copy
import dataclasses
from typing import Any, Callable, Optional, Sequence, Union

import numpy as np
import torch
from gymnasium import spaces
from torch.distributions import Categorical

#: The attribute that marks an action space whose envs give masks (see the module doc).
MASKED = "ppo_dict_action_masks"
#: sb3-contrib's name of the env method (``sb3_contrib.common.maskable.utils.EXPECTED_METHOD_NAME``).
METHOD = "action_masks"
#: The logit of a masked action (``MaskableCategorical.apply_masking``'s ``HUGE_NEG``).
HUGE_NEG = -1e8


# ----------------------------------------------------------------------------------------------
# Spaces


def masking_space_problem(space: spaces.Space) -> str:
    """Why sb3-contrib's MaskablePPO refuses ``space`` as an action space (``""`` when it takes it)."""
    if isinstance(space, spaces.Discrete):
        return ""
    if isinstance(space, spaces.MultiDiscrete) and space.nvec.ndim == 1:
        return ""
    if isinstance(space, spaces.MultiBinary) and isinstance(space.n, (int, np.integer)):
        return ""
    return f"invalid-action masks need Discrete, one-dimensional MultiDiscrete or MultiBinary(n) actions (MaskablePPO's), not {space}"


def mask_sizes(space: spaces.Space) -> list[int]:
    """The categoricals a mask covers, in order: ``[n]`` (Discrete), ``nvec`` (MultiDiscrete) or
    ``[2] * n`` (MultiBinary: entry i's pair ``[may be 0, may be 1]``). Their sum is sb3-contrib's ``mask_dims``."""
    if isinstance(space, spaces.Discrete):
        return [int(space.n)]
    if isinstance(space, spaces.MultiDiscrete):
        return [int(n) for n in space.nvec]
    return [2] * int(space.n)


def with_action_masks(space: spaces.Space) -> spaces.Space:
    """A copy of ``space`` marked as giving masks (it compares equal to ``space``, and pickles with its mark)."""
    problem = masking_space_problem(space)
    if problem:
        raise ValueError(problem)
    marked = copy.deepcopy(space)
    setattr(marked, MASKED, True)
    return marked


def mask_dim(space: spaces.Space) -> int:
    """Entries of one env's mask when ``space`` is marked (:func:`with_action_masks`), else 0."""
    return sum(mask_sizes(space)) if getattr(space, MASKED, False) else 0


def masked_backend(backend: Any) -> Any:
    """``backend`` (a dataclass with an ``action_space``: the gymnasium backend) with its action space marked."""
    if not backend.makes_gym_envs:  # its runner would leave the masks unwritten (all False)
        raise ValueError(f"action_masks=True: only gymnasium envs give action masks, not {backend.label}")
    return dataclasses.replace(backend, action_space=with_action_masks(backend.action_space))


# ----------------------------------------------------------------------------------------------
# The env side: one mask per env, checked, into storage


def mask_offsets(sizes: Sequence[int]) -> np.ndarray:
    """Where each categorical of ``sizes`` starts in a flat mask: int64 ``[len(sizes)]``."""
    return np.cumsum([0, *sizes[:-1]])


def mask_problem(mask: np.ndarray, sizes: Sequence[int], offsets: Optional[np.ndarray] = None) -> str:
    """What is wrong with one env's mask for categoricals ``sizes`` (``""``: nothing).

    sb3-contrib takes any array it can reshape to ``mask_dims`` and makes it boolean; here its size
    must be ``sum(sizes)``, its values booleans (or integers / floats that are 0 or 1), and it must
    allow at least one action in every categorical (else sb3-contrib samples a masked action).
    ``offsets``: :func:`mask_offsets` of ``sizes``, computed once by a caller that checks every step
    (a ``cumsum`` per call cost more than the rest of the check).
    """
    dim = sum(sizes)
    if mask.size != dim:
        return f"{mask.size} entries (shape {mask.shape}), expected {dim} = {' + '.join(map(str, sizes))}"
    if mask.dtype != np.bool_:
        if mask.dtype.kind not in "iuf" or not np.isin(mask, (0, 1)).all():
            return f"dtype {mask.dtype} with values {np.unique(mask)[:8]}: expected bool (or integers 0 and 1)"
    flat = mask.reshape(-1).astype(bool, copy=False)
    # count_nonzero, not any()/all(): this runs per env per step, and on a mask of a few entries
    # numpy's reductions cost ~1.2 us a call against ~0.3 us (the masked rollout's largest check cost)
    if len(sizes) == 1:
        return "" if np.count_nonzero(flat) else "allows no action"
    allowed = np.logical_or.reduceat(flat, mask_offsets(sizes) if offsets is None else offsets)
    if np.count_nonzero(allowed) == len(sizes):
        return ""
    return f"allows no action for entry {int(np.flatnonzero(~allowed)[0])} (of {len(sizes)})"


class MaskWriter:
    """Writes env masks into ``masks`` (``storage.action_masks``, bool ``[n_steps+1, n_envs, mask_dim]``).

    :meth:`bind` finds an env's ``action_masks`` once (as ``env.get_wrapper_attr``, the way
    ``DummyVecEnv.env_method`` reaches it); :meth:`write` calls it and stores the checked mask.
    Errors are ``ValueError``s naming the env, the step and what was wrong.
    """

    def __init__(self, masks: np.ndarray, action_space: spaces.Space):
        self.masks, self.sizes = masks, mask_sizes(action_space)
        self.offsets = mask_offsets(self.sizes)
        self.methods: list[Callable[[], Any]] = []

    def bind(self, env: Any, env_idx: int) -> None:
        """Find env ``env_idx``'s ``action_masks()`` (the next local env in order)."""
        if not env.has_wrapper_attr(METHOD):
            raise ValueError(f"env {env_idx} has no {METHOD}() method, needed by --action_masks: define it on the env "
                             "or wrap the env in sb3_contrib.common.wrappers.ActionMasker")
        self.methods.append(env.get_wrapper_attr(METHOD))

    def write(self, local: int, env_idx: int, row: int, when: str) -> None:
        """Ask local env ``local`` (global ``env_idx``) for its mask and store it as ``masks[row, env_idx]``."""
        mask = np.asarray(self.methods[local]())
        problem = mask_problem(mask, self.sizes, self.offsets)
        if problem:
            raise ValueError(f"env {env_idx}: {METHOD}() {when}: {problem}")
        self.masks[row, env_idx] = mask.reshape(-1)


def env_masks(env: Any, action_space: spaces.Space, when: str) -> np.ndarray:
    """One env's checked mask as a batch of one, ``[1, mask_dim]`` (sb3-contrib's ``get_action_masks``
    on a one-env vec env); ``when``: the moment, for messages."""
    writer = MaskWriter(np.zeros((1, 1, sum(mask_sizes(action_space))), dtype=bool), action_space)
    writer.bind(env, 0)
    writer.write(0, 0, 0, when)
    return writer.masks[0]


def env_mask_problem(make: Callable[[int], Any], action_space: spaces.Space, seed: Optional[int]) -> str:
    """Why env 0 (``make(0)``) cannot give masks for ``action_space`` after its first reset (``""``: it can)."""
    env = make(0)
    try:
        env.reset(seed=seed)
        env_masks(env, action_space, "after its first reset (one env built to check it, before training)")
    except ValueError as exc:
        return str(exc)
    finally:
        env.close()
    return ""


# ----------------------------------------------------------------------------------------------
# The policy side: sb3-contrib's maskable distributions


def masked_logits(logits: torch.Tensor, masks: Optional[torch.Tensor], huge_neg: Optional[torch.Tensor] = None) -> torch.Tensor:
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


class MaskedCategorical:
    """sb3-contrib ``MaskableCategorical`` over logits ``[B, n]``, masks bool ``[B, n]`` or None.

    torch's Categorical is built twice, as sb3-contrib builds it: once from the raw logits (which
    normalises them), once from those normalised logits, masked entries set to -1e8 (normalised
    again: not PPO's floats even without masks).
    """

    def __init__(self, logits: torch.Tensor, masks: Optional[torch.Tensor] = None):
        self.masks = None if masks is None else torch.as_tensor(masks, dtype=torch.bool, device=logits.device).reshape(logits.shape)
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


class MaskedMultiCategorical:
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


def masked_distribution(logits: torch.Tensor, space: spaces.Space, masks: Optional[torch.Tensor]) -> MaskedDistribution:
    """sb3-contrib ``make_masked_proba_distribution(space).proba_distribution(logits)`` with masks applied."""
    if isinstance(space, spaces.Discrete):
        return MaskedCategorical(logits.view(-1, int(space.n)), masks)
    return MaskedMultiCategorical(logits, mask_sizes(space), masks)
