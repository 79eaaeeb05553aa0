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
* **The policy side.** The masked kinds of ``ppo_dict.data.actions`` (which spaces take masks, the
  categoricals a mask covers: ``mask_sizes``) and their distributions in ``ppo_dict.data.distributions``
  (sb3-contrib's ``MaskableCategorical`` and ``MaskableMultiCategoricalDistribution``).
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Any, Callable, Optional, Sequence

import numpy as np
from gymnasium import spaces

from ppo_dict.data.actions import mask_sizes, masking_space_problem

#: The attribute that marks an action space whose envs give masks (see the module doc).
MASKED = "ppo_dict_action_masks"
#: sb3-contrib's name of the env method (``sb3_contrib.common.maskable.utils.EXPECTED_METHOD_NAME``).
METHOD = "action_masks"
#: The runners' own call (``Runner.call``) that turns the envs' masks on or off: sb3-contrib's ``learn(use_masking=...)``.
ASK_MASKS = "ask_masks"


# ----------------------------------------------------------------------------------------------
# Spaces


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

    ``asking`` False (sb3-contrib's ``learn(use_masking=False)``): the envs are not asked and every
    mask written allows every action, as ``MaskableRolloutBuffer`` keeps its all-ones masks when
    ``collect_rollouts`` adds none.
    """

    def __init__(self, masks: np.ndarray, action_space: spaces.Space):
        self.masks, self.sizes = masks, mask_sizes(action_space)
        self.offsets = mask_offsets(self.sizes)
        self.methods: list[Callable[[], Any]] = []
        self.asking = True

    def bind(self, env: Any, env_idx: int) -> None:
        """Find env ``env_idx``'s ``action_masks()`` (the next local env in order)."""
        if not env.has_wrapper_attr(METHOD):
            raise ValueError(
                f"env {env_idx} has no {METHOD}() method, needed by --action_masks: define it on the env "
                "or wrap the env in sb3_contrib.common.wrappers.ActionMasker"
            )
        self.methods.append(env.get_wrapper_attr(METHOD))

    def write(self, local: int, env_idx: int, row: int, when: str) -> None:
        """Ask local env ``local`` (global ``env_idx``) for its mask and store it as ``masks[row, env_idx]``
        (all True, the env not asked, while not :attr:`asking`)."""
        if not self.asking:
            self.masks[row, env_idx] = True
            return
        mask = np.asarray(self.methods[local]())
        problem = mask_problem(mask, self.sizes, self.offsets)
        if problem:
            raise ValueError(f"env {env_idx}: {METHOD}() {when}: {problem}")
        self.masks[row, env_idx] = mask.reshape(-1)


def env_masks(env: Any, action_space: spaces.Space) -> Callable[[str], np.ndarray]:
    """What reads one env's checked mask as a batch of one, ``[1, mask_dim]`` (sb3-contrib's
    ``get_action_masks`` on a one-env vec env), given the moment for messages: its method is found
    and its buffer made once (the array is that buffer, rewritten by the next read)."""
    writer = MaskWriter(np.zeros((1, 1, sum(mask_sizes(action_space))), dtype=bool), action_space)
    writer.bind(env, 0)

    def read(when: str) -> np.ndarray:
        writer.write(0, 0, 0, when)
        return writer.masks[0]

    return read


def env_mask_problem(make: Callable[[int], Any], action_space: spaces.Space, seed: Optional[int]) -> str:
    """Why env 0 (``make(0)``) cannot give masks for ``action_space`` after its first reset (``""``: it can)."""
    env = make(0)
    try:
        env.reset(seed=seed)
        env_masks(env, action_space)("after its first reset (one env built to check it, before training)")
    except ValueError as exc:
        return str(exc)
    finally:
        env.close()
    return ""
