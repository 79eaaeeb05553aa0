"""The recurrent states of a recurrent run (an LSTM's or a GRU's), and sb3-contrib's sequence minibatches.

One home for the states: :data:`CELL_STATES` (what each cell carries per layer: an LSTM its hidden and
cell states, a GRU its hidden state), :class:`LstmStates` (torch tensors, what the policy's passes take
and return) and :class:`StateStore` (each env's states over a rollout, in the learner's rollout storage;
the workers never see them). A rollout row ``t`` holds the states *before* step t's forward and
before its episode-start reset (sb3-contrib's ``RecurrentRolloutBuffer.add`` stores
``_last_lstm_states``); row ``n_steps`` holds the states after the last step, which start the next
rollout (:meth:`StateStore.carry_over`; zeros before the first).

:class:`SequencePlan` is sb3-contrib's ``create_sequencers`` and ``pad`` for one minibatch, worked
out with numpy in one pass: where each sequence starts (an episode start, another env, the
minibatch's first index), and one gather index that lays every array out padded
(``pad_sequence(batch_first=True)``, zeros), so a minibatch is one ``index_select`` per array.
"""

from __future__ import annotations

from typing import NamedTuple, Optional

import numpy as np
import torch

from ppo_dict.data.storage import step_major, zeros

#: the recurrent cells (``--rnn_type``) and the states each carries per layer, in order
CELL_STATES = {"lstm": ("hidden_states", "cell_states"), "gru": ("hidden_states",)}


def state_names(cell: str = "lstm") -> tuple[str, ...]:
    """The state arrays of a ``cell`` policy, the actor's then the critic's (an LSTM's: sb3-contrib's buffer's order and
    names)."""
    return tuple(f"{state}_{part}" for part in ("pi", "vf") for state in CELL_STATES[cell])


#: the four state arrays of an LSTM policy, in sb3-contrib's buffer's order and names
STATE_NAMES = state_names("lstm")


class LstmStates(NamedTuple):
    """sb3-contrib's ``RNNStates``: ``pi``, the actor's states, ``vf``, the critic's (the actor's again when the
    critic has no cell of its own); each a tuple of the cell's states (:data:`CELL_STATES`: an LSTM's ``(h, c)``,
    a GRU's ``(h,)``), each ``float32[n_layers, batch, hidden]``."""

    pi: tuple[torch.Tensor, ...]
    vf: tuple[torch.Tensor, ...]


#: the same tuple for any cell (the LSTM's name kept: sb3-contrib's ``RNNStates``)
RnnStates = LstmStates


class StateStore:
    """Each env's recurrent states over a rollout: per group of env columns (all envs, or each half of a
    double-buffered rollout) one ``[n_steps+1, n_layers, n_envs_of_group, hidden]`` float32 array per name
    of :func:`state_names` (an LSTM's four, a GRU's two), every row laid out as a fresh array
    (:func:`~ppo_dict.data.storage.step_major`), so the rollout step hands a row to the cell as it is.
    ``critic_lstm`` False: the critic has no state of its own, and its arrays are the actor's (sb3-contrib
    stores ``vf = pi`` then)."""

    def __init__(
        self, n_steps: int, groups: tuple[range, ...], n_layers: int, hidden_size: int, critic_lstm: bool, cell: str = "lstm"
    ):
        self.n_steps, self.groups = n_steps, groups
        self.n_envs = sum(len(g) for g in groups)
        self.names = state_names(cell)
        half = len(self.names) // 2
        self.pi_names, self.vf_names = self.names[:half], self.names[half:]
        self.arrays: list[dict[str, np.ndarray]] = []
        for group in groups:
            arrays = {
                name: step_major(zeros, n_steps + 1, (n_layers, len(group), hidden_size), np.dtype(np.float32))
                for name in (self.names if critic_lstm else self.pi_names)
            }
            if not critic_lstm:
                arrays.update({vf: arrays[pi] for pi, vf in zip(self.pi_names, self.vf_names)})
            self.arrays.append(arrays)
        self.tensors = [{name: torch.from_numpy(arr) for name, arr in arrays.items()} for arrays in self.arrays]

    def at(self, t: int, group: int = 0, device: Optional[torch.device] = None) -> LstmStates:
        """Rollout row ``t`` of ``group`` as tensors (the states before step t): views of the store, or
        copies on ``device`` when it is not the CPU."""
        s = self.tensors[group]
        states = LstmStates(tuple(s[name][t] for name in self.pi_names), tuple(s[name][t] for name in self.vf_names))
        if device is None or device.type == "cpu":
            return states
        return LstmStates(*(tuple(x.to(device) for x in pair) for pair in states))

    def write(self, t: int, states: LstmStates, group: int = 0) -> None:
        """Row ``t`` of ``group`` := ``states`` (the states after step t-1's forward)."""
        s = self.tensors[group]
        for name, state in zip(self.pi_names, states.pi):
            s[name][t].copy_(state)
        if s[self.vf_names[0]] is not s[self.pi_names[0]]:
            for name, state in zip(self.vf_names, states.vf):
                s[name][t].copy_(state)

    def carry_over(self) -> None:
        """The last states start the next rollout (sb3-contrib: ``_last_lstm_states``)."""
        for arrays in self.arrays:
            for arr in {id(a): a for a in arrays.values()}.values():
                arr[0] = arr[self.n_steps]

    def rollout(self, name: str) -> np.ndarray:
        """``name``'s first ``n_steps`` rows of every env, ``[n_steps, n_layers, n_envs, hidden]`` (sb3-contrib's buffer
        array)."""
        return np.concatenate([arrays[name][: self.n_steps] for arrays in self.arrays], axis=2)

    def flat(self, name: str) -> np.ndarray:
        """sb3-contrib's ``get()`` layout: ``swapaxes(1, 2)`` then env-major flattening, ``[n_envs * n_steps, n_layers,
        hidden]``."""
        arr = self.rollout(name).swapaxes(1, 2)
        return np.ascontiguousarray(arr.swapaxes(0, 1).reshape(self.n_envs * self.n_steps, *arr.shape[2:]))


class SequencePlan:
    """One minibatch as sb3-contrib's ``RecurrentRolloutBuffer._get_samples`` pads it.

    ``batch_inds``: the minibatch's flat (env-major) rollout indices; ``episode_starts``,
    ``env_change``: float ``[N]`` over the whole flat rollout. A sequence starts at an episode start,
    an env change and the minibatch's first index (``create_sequencers``). ``gather`` indexes a
    rollout array with one zero row appended (index ``N``) to give the padded ``[n_seq * max_len]``
    rows, sequence-major; ``starts``: the flat index of each sequence's first transition (its
    initial LSTM state); ``mask``: 1 where a row is a transition, 0 where it is padding.
    """

    def __init__(self, batch_inds: np.ndarray, episode_starts: np.ndarray, env_change: np.ndarray):
        seq_start = np.logical_or(episode_starts[batch_inds], env_change[batch_inds])
        seq_start[0] = True
        first = np.flatnonzero(seq_start)
        lengths = np.diff(np.append(first, len(batch_inds)))
        self.n_seq, self.max_len = len(first), int(lengths.max())
        offsets = np.arange(self.max_len)
        inside = offsets[None, :] < lengths[:, None]
        positions = np.where(inside, first[:, None] + offsets[None, :], 0)
        self.gather = np.where(inside, batch_inds[positions], len(episode_starts)).reshape(-1)
        self.starts = batch_inds[first]
        self.mask = inside.reshape(-1).astype(np.float32)

    @property
    def padded_size(self) -> int:
        return self.n_seq * self.max_len


def env_change(n_steps: int, n_envs: int) -> np.ndarray:
    """sb3-contrib's ``env_change``: 1.0 at each env's first step, env-major flat ``[n_envs * n_steps]``."""
    change = np.zeros((n_envs, n_steps))
    change[:, 0] = 1.0
    return change.reshape(-1)


def rotated_indices(size: int, split: Optional[int] = None) -> np.ndarray:
    """sb3-contrib's minibatch order for one epoch: ``arange(size)`` rotated at ``np.random.randint(size)``
    (one draw from numpy's global RNG per epoch; no permutation)."""
    split = np.random.randint(size) if split is None else split
    indices = np.arange(size)
    return np.concatenate((indices[split:], indices[:split]))
