"""sb3's ``model.rollout_buffer`` on the rollout storage: during a rollout, at its end, and as ``learn`` leaves it.

:class:`RolloutBufferView` reads the storage itself while a rollout runs, and what sb3's buffer holds
once ``learn`` returns from the storage and the copies :func:`keep_after_learn` made of its first rows (the
next rollout's start by then, and what a script's steps of the training envs write): after a
rollout that was trained on, the arrays sb3's ``get()`` flattened (``[n_steps * n_envs, ...]``: the
observations, actions, values, log-probs, advantages and returns, MaskablePPO's masks, RecurrentPPO's
states and episode starts) and the others as they were; after a rollout a callback stopped, the steps
it added and zeros (MaskablePPO's masks: ones) after them, as sb3's ``reset()`` left them.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Iterator, Optional

import numpy as np
import torch
from gymnasium import spaces
from stable_baselines3.common.buffers import RolloutBuffer
from stable_baselines3.common.preprocessing import get_action_dim, get_obs_shape
from stable_baselines3.common.type_aliases import DictRolloutBufferSamples, RolloutBufferSamples

from ppo_dict.algo.training.update import compute_gae
from ppo_dict.data.recurrent import STATE_NAMES
from ppo_dict.data.storage import RolloutStorage

#: an algorithm of sb3's API (``ppo_dict.api.base.Algorithm``)
Algorithm = Any
#: sb3's buffer's arrays besides the observations
ARRAYS = ("actions", "rewards", "episode_starts", "values", "log_probs", "advantages", "returns")
#: what sb3's ``RolloutBuffer.get`` flattens (sb3-contrib's maskable buffer adds the masks)
FLATTENED = ("observations", "actions", "values", "log_probs", "advantages", "returns", "action_masks")
#: what sb3-contrib's ``RecurrentRolloutBuffer.get`` flattens (its states' layer and env axes swapped first)
FLATTENED_RECURRENT = (
    "observations",
    "actions",
    "values",
    "log_probs",
    "advantages",
    "returns",
    *STATE_NAMES,
    "episode_starts",
)


@dataclass
class BufferState:
    """What the view reads besides the storage: ``pos`` (the steps added so far), ``flat`` (the arrays a
    callback's ``get()`` flattened, until the next rollout), ``first`` (copies of the rollout's first row,
    which the next one's start overwrites), ``left`` (what ``learn`` left: ``(pos, trained, copies of row 1)``,
    which a script's steps of the training envs overwrite) and ``kept`` (its arrays, made at the first read)."""

    pos: int = 0
    flat: Optional[dict[str, Any]] = None
    first: dict[str, Any] = field(default_factory=dict)
    left: Optional[tuple[int, bool, dict[str, Any]]] = None
    kept: Optional[dict[str, Any]] = None

    def new_rollout(self, storage: RolloutStorage) -> None:
        """sb3's ``rollout_buffer.reset()``: nothing added, nothing flattened; the first row kept (it is final once the
        rollout starts)."""
        self.pos, self.flat, self.left, self.kept = 0, None, None, None
        self.first = rows_of(storage, 0)

    def arrays(self, storage: RolloutStorage) -> Optional[dict[str, Any]]:
        """The arrays sb3's buffer holds once ``learn`` returned (None during a rollout), made from the storage at the
        first read."""
        if self.kept is None and self.left is not None:
            pos, trained, second = self.left
            self.kept = sb3_arrays(storage, (self.first, second), pos)
            if trained:
                for name in FLATTENED_RECURRENT if storage.lstm_states is not None else FLATTENED:
                    if name in STATE_NAMES and name in self.kept:  # a GRU's: its hidden states only
                        self.kept[name] = self.kept[name].swapaxes(1, 2)
                    if name in self.kept:
                        self.kept[name] = flatten(self.kept[name])
        return self.kept


def rows_of(storage: RolloutStorage, row: int) -> dict[str, Any]:
    """Copies of row ``row`` of the observations as the policy sees them, of MaskablePPO's masks and RecurrentPPO's states."""
    if row >= storage.n_steps:
        return {}
    rows: dict[str, Any] = {"observations": {key: arr[row].copy() for key, arr in storage.obs.items()}}
    if storage.action_masks is not None:
        rows["action_masks"] = storage.action_masks[row].astype(np.float32)
    if storage.lstm_states is not None:
        rows.update({name: storage.lstm_states.rollout(name)[row].copy() for name in storage.lstm_states.names})
    return rows


def sb3_arrays(storage: RolloutStorage, saved: tuple[dict[str, Any], ...], pos: int) -> dict[str, Any]:
    """sb3's buffer's arrays ``[n_steps, n_envs, ...]`` (copies, in its dtypes) of the rollout in storage, its rows
    0, 1... from ``saved`` (:func:`rows_of`); past ``pos`` (a stopped rollout) zeros, MaskablePPO's masks ones, as
    ``reset()`` left them."""
    obs = {key: arr[: storage.n_steps].copy() for key, arr in storage.obs.items()}
    arrays: dict[str, Any] = {name: getattr(storage, name).copy() for name in ARRAYS}
    if storage.action_masks is not None:
        arrays["action_masks"] = storage.action_masks[: storage.n_steps].astype(np.float32)
    if storage.lstm_states is not None:
        arrays.update({name: storage.lstm_states.rollout(name).copy() for name in storage.lstm_states.names})
    for row, rows in enumerate(saved):
        for key, values in rows.get("observations", {}).items():
            obs[key][row] = values
        for name in ("action_masks", *STATE_NAMES):
            if name in rows:
                arrays[name][row] = rows[name]
    arrays["observations"] = storage.as_policy_input(obs)
    if pos < storage.n_steps:
        for name, array in arrays.items():
            for part in array.values() if isinstance(array, dict) else [array]:
                part[pos:] = 1.0 if name == "action_masks" else 0.0
        for name in ("advantages", "returns"):  # GAE did not run
            arrays[name][...] = 0.0
    return arrays


def keep_after_learn(algorithm: Algorithm, storage: RolloutStorage, trained: bool) -> None:
    """What sb3's buffer holds once ``learn`` returns (module doc): the storage's rollout, less the rows a script's
    steps of the training envs may write (copied here); ``trained``: the last rollout was complete and trained on
    (else a callback stopped it at ``pos``)."""
    state: BufferState = algorithm._buffer
    if state.first:  # else no rollout ran: sb3's buffer is as the last one left it
        state.left, state.kept, state.flat = (
            (storage.n_steps if trained else state.pos, trained, rows_of(storage, 1)),
            None,
            None,
        )


def flatten(array: Any) -> Any:
    """sb3's ``swap_and_flatten``, per key of a dict."""
    if isinstance(array, dict):
        return {key: RolloutBuffer.swap_and_flatten(part) for key, part in array.items()}
    return RolloutBuffer.swap_and_flatten(array)


class RolloutBufferView:
    """sb3's ``model.rollout_buffer`` as callbacks and scripts read it (see the module doc).

    During a rollout the arrays are sb3's, ``[n_steps, n_envs, ...]``, as views of the storage
    (observations as the policy sees them: channel-first images, a dict for Dict spaces; RecurrentPPO's
    stored LSTM states, MaskablePPO's masks); ``pos``, ``full`` and ``size()`` follow the rollout as sb3's
    buffer's do (``pos``: the steps added so far, ``n_steps`` once the rollout is complete); ``gamma``,
    ``gae_lambda``, ``buffer_size``, ``n_envs``, ``observation_space``, ``action_space``, ``obs_shape``,
    ``action_dim`` and ``device`` are sb3's. ``get(batch_size)`` is sb3's generator of minibatch
    samples: one ``np.random.permutation`` of the transitions drawn from the global numpy RNG, as sb3
    draws it (the trainer's own minibatches then come from the stream after it, as sb3's do); from
    then until the next rollout the arrays it samples read ``[n_steps * n_envs, ...]``, flattened as
    sb3 flattens its own (copies: the storage stays as the trainer wrote it).
    """

    def __init__(self, algorithm: Algorithm):
        self.algorithm = algorithm
        self.state: BufferState = algorithm._buffer
        self.storage: RolloutStorage = algorithm.trainer.storage
        self.observation_space, self.action_space = algorithm.observation_space, algorithm.action_space
        self.buffer_size, self.n_envs = self.storage.n_steps, self.storage.n_envs
        self.device = algorithm.device
        self.obs_shape, self.action_dim = get_obs_shape(self.observation_space), get_action_dim(self.action_space)
        if self.storage.action_masks is not None:
            self.mask_dims = self.storage.action_masks.shape[-1]

    @property
    def gamma(self) -> float:
        """GAE's discount (sb3's buffer's: set once, with the model; assigning it changes the next rollout's GAE)."""
        return self.algorithm.trainer.gae_gamma

    @gamma.setter
    def gamma(self, value: float) -> None:
        self.algorithm.trainer.gae_gamma = float(value)

    @property
    def gae_lambda(self) -> float:
        return self.algorithm.trainer.gae_lambda

    @gae_lambda.setter
    def gae_lambda(self, value: float) -> None:
        self.algorithm.trainer.gae_lambda = float(value)

    @property
    def pos(self) -> int:
        """The rollout steps added so far (sb3 adds step t after its callbacks' ``on_step``)."""
        return self.state.pos

    @property
    def full(self) -> bool:
        return self.pos == self.buffer_size

    def size(self) -> int:
        return self.buffer_size if self.full else self.pos

    @property
    def generator_ready(self) -> bool:
        """Whether ``get()`` flattened the arrays it samples (until the next rollout)."""
        return self.state.left[1] if self.state.left is not None else self.state.flat is not None

    def _kept(self, name: str) -> Any:
        for arrays in (self.state.arrays(self.storage), self.state.flat):
            if arrays is not None and name in arrays:
                return arrays[name]
        return None

    @property
    def observations(self) -> Any:
        kept = self._kept("observations")
        if kept is not None:
            return kept
        s = self.storage
        return s.as_policy_input({key: arr[: s.n_steps] for key, arr in s.obs.items()})

    def __getattr__(self, name: str) -> np.ndarray:
        # a GRU's: hidden_states_* only
        recurrent = self.storage.lstm_states is not None and name in self.storage.lstm_states.names
        if name in ARRAYS or recurrent or (name == "action_masks" and self.storage.action_masks is not None):
            kept = self._kept(name)
            if kept is not None:
                return kept
            if recurrent:  # RecurrentPPO's, [n_steps, n_layers, n_envs, hidden]
                return self.storage.lstm_states.rollout(name)
            if name == "action_masks":  # MaskablePPO's buffer holds them as float32
                return self.storage.action_masks[: self.storage.n_steps].astype(np.float32)
            return getattr(self.storage, name)
        raise AttributeError(f"rollout_buffer has no {name!r}")

    swap_and_flatten = staticmethod(RolloutBuffer.swap_and_flatten)

    def compute_returns_and_advantage(self, last_values: torch.Tensor, dones: np.ndarray) -> None:
        """sb3's: GAE over the stored rollout with this buffer's ``gamma`` and ``gae_lambda``, from ``last_values`` (V of
        the observations after the last step) and ``dones`` (its episode ends), into ``advantages`` and ``returns``: the
        storage's own, which the update then trains on (as sb3's update trains on its buffer's)."""
        s = self.storage
        s.advantages[...], s.returns[...] = compute_gae(
            s.rewards,
            s.values,
            s.episode_starts,
            last_values.clone().cpu().numpy().flatten(),
            np.asarray(dones),
            self.gamma,
            self.gae_lambda,
        )

    def to_torch(self, array: np.ndarray, copy: bool = True) -> torch.Tensor:
        return torch.tensor(array, device=self.device) if copy else torch.as_tensor(array, device=self.device)

    def get(self, batch_size: Optional[int] = None) -> Iterator[Any]:
        """sb3's ``RolloutBuffer.get`` (``DictRolloutBuffer``'s, sb3-contrib's ``MaskableRolloutBuffer``'s): minibatches of
        ``batch_size`` transitions (None: all of them) in the order of one permutation, drawn at the first ``next``."""
        if not self.full:
            raise ValueError(
                f"rollout_buffer.get(): the rollout is not complete (pos={self.pos} of buffer_size={self.buffer_size})"
            )
        if self.storage.lstm_states is not None:
            raise NotImplementedError(
                "rollout_buffer.get() of RecurrentPPO (sb3-contrib's sequence minibatches) is not "
                "provided: read the arrays (observations, actions, hidden_states_pi, ...) instead"
            )
        indices = np.random.permutation(self.buffer_size * self.n_envs)
        if not self.generator_ready:  # sb3 flattens once per rollout, at the first get()
            masked = self.storage.action_masks is not None
            names = ("observations", "actions", "values", "log_probs", "advantages", "returns") + (
                ("action_masks",) if masked else ()
            )
            self.state.flat = {name: flatten(getattr(self, name)) for name in names}
        flat = self.state.arrays(self.storage) or self.state.flat
        batch_size = self.buffer_size * self.n_envs if batch_size is None else batch_size
        for start in range(0, self.buffer_size * self.n_envs, batch_size):
            yield self._get_samples(flat, indices[start : start + batch_size])

    def _get_samples(self, flat: dict[str, Any], batch_inds: np.ndarray) -> Any:
        """One minibatch as sb3's ``_get_samples`` builds it (its samples' named tuple, its casts)."""
        obs = flat["observations"]
        observations = (
            {key: self.to_torch(part[batch_inds]) for key, part in obs.items()}
            if isinstance(obs, dict)
            else self.to_torch(obs[batch_inds])
        )
        masked = "action_masks" in flat
        actions = flat["actions"][batch_inds] if masked else flat["actions"][batch_inds].astype(np.float32, copy=False)
        rest = [self.to_torch(actions)] + [
            self.to_torch(flat[name][batch_inds].flatten()) for name in ("values", "log_probs", "advantages", "returns")
        ]
        if masked:
            from sb3_contrib.common.maskable.buffers import MaskableDictRolloutBufferSamples, MaskableRolloutBufferSamples

            samples = MaskableDictRolloutBufferSamples if isinstance(obs, dict) else MaskableRolloutBufferSamples
            return samples(observations, *rest, self.to_torch(flat["action_masks"][batch_inds].reshape(-1, self.mask_dims)))
        return (DictRolloutBufferSamples if isinstance(obs, dict) else RolloutBufferSamples)(observations, *rest)


def batch_obs(obs: Any, space: spaces.Space, n_envs: int) -> Any:
    """Copies of a ``[n_envs, ...]`` batch as a vec env returns it (an OrderedDict for Dict spaces, Discrete as
    ``[n_envs]``)."""
    if isinstance(space, spaces.Dict):
        return OrderedDict((key, np.array(obs[key]).reshape(n_envs, *space[key].shape)) for key in space.spaces)
    return np.array(obs).reshape(n_envs, *space.shape)
