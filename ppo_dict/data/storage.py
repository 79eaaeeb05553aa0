"""Rollout storage: one array per field and per dict-observation key, shaped ``[T(+1), N, ...]``.

Each array has one meaning, named by its prefix:

* ``env_*`` and the episode arrays are written (or, ``env_actions``, read) by the envs. They come
  from an ``alloc`` function, so the same layout lives in ordinary memory (envs stepped
  in-process) or in shared memory (worker processes write straight into it). Nothing rewrites
  them later: they hold what the env gave.
* ``obs``, ``terminal_obs`` and ``rewards`` are what the learner uses: observations as the policy
  sees them and rewards as GAE uses them. Until normalisation is asked for, ``obs[key]`` *is*
  ``env_obs[key]`` (the same array, no copy); :meth:`RolloutStorage.own_obs_stage` gives the keys
  that get normalised arrays of their own. ``rewards`` is always the learner's own (normalised,
  plus the time-limit bootstrap).
* The rest (actions, values, log-probs, advantages, ...) is the learner's, as sb3's
  ``RolloutBuffer`` / ``DictRolloutBuffer`` lay it out.
"""

from __future__ import annotations

from typing import Any, Iterable, Optional, Union

import numpy as np
import torch
from gymnasium import spaces

from ppo_dict.data.actions import action_spec
from ppo_dict.data.aligned import ALIGN, Alloc, aligned, step_major, zeros  # noqa: F401  (re-exported)
from ppo_dict.data.episodes import episode_columns, read_row
from ppo_dict.data.masking import mask_dim
from ppo_dict.envs import is_channel_last, leaf_spaces, vec_space_problem

#: A batch as the policy takes it: the single array, or one array per key for Dict spaces.
PolicyObs = Union[np.ndarray, dict[str, np.ndarray]]
TensorObs = Union[torch.Tensor, dict[str, torch.Tensor]]

#: The key of the single observation array when the observation space is not a Dict.
OBS_KEY = "obs"


def _leaf_layout(sub: spaces.Space) -> tuple[tuple[int, ...], np.dtype]:
    """One leaf as sb3's buffers store it (``get_obs_shape``): Discrete as ``(1,)``, the others by their shape."""
    return ((1,) if isinstance(sub, spaces.Discrete) else tuple(sub.shape)), np.dtype(sub.dtype)


def storage_keys(space: spaces.Space) -> dict[str, spaces.Space]:
    """``{key: leaf space}``: a Dict's keys (in its order, which gymnasium sorts), a Tuple's indices
    as ``"0"``, ``"1"``..., or :data:`OBS_KEY` for any other space."""
    return {OBS_KEY if key is None else str(key): sub for key, sub in leaf_spaces(space).items()}


def obs_layout(space: spaces.Space) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
    """``{key: (shape, dtype)}`` of one env's observation, as sb3's buffers store it, one entry per
    leaf (:func:`storage_keys`). Box, Discrete (stored as ``(1,)``), MultiDiscrete, MultiBinary, and
    one level of Dict or Tuple of them (what sb3's vec envs take)."""
    problem = vec_space_problem(space)
    if problem:
        raise ValueError(problem)
    return {key: _leaf_layout(sub) for key, sub in storage_keys(space).items()}


def obs_parts(space: spaces.Space, obs: Any) -> dict[str, Any]:
    """One env's observation split into :func:`storage_keys`' keys (a Tuple's items as ``"0"``, ``"1"``...)."""
    if isinstance(space, spaces.Tuple):
        return {str(i): part for i, part in enumerate(obs)}
    return obs if isinstance(space, spaces.Dict) else {OBS_KEY: obs}


def channel_last_keys(space: spaces.Space) -> frozenset[str]:
    """The keys holding images stored as the env gives them, ``[H, W, C]``; the policy sees them as ``[C, H, W]``."""
    return frozenset(k for k, sub in storage_keys(space).items() if is_channel_last(sub))


def channel_first(images: Any) -> Any:
    """Channel-last images ``[..., H, W, C]`` seen as ``[..., C, H, W]``: a view (a numpy array's or a tensor's), as
    sb3's ``VecTransposeImage`` shows them to its policy. The one place an image's axes are moved."""
    return torch.movedim(images, -1, -3) if isinstance(images, torch.Tensor) else np.moveaxis(images, -1, -3)


def policy_view(obs: dict[str, np.ndarray], channel_last: frozenset[str], dict_obs: bool) -> PolicyObs:
    """``[B, ...]`` batches in the policy's input form: channel-last images as transposed *views*
    ``[B, C, H, W]`` (sb3's VecTransposeImage hands its policy the same non-contiguous view, and a
    convolution rounds differently on another memory layout: 3.7e-9 in the actions); the single
    array, or the dict for Dict spaces."""
    if channel_last:
        obs = {k: channel_first(v) if k in channel_last else v for k, v in obs.items()}
    return obs if dict_obs else obs[OBS_KEY]


def vector_obs_shapes(space: spaces.Space) -> dict[str, tuple[int, ...]]:
    """``{key: shape}`` of the keys observation normalisation applies to: every Box that is not a
    uint8 image (the integer observations of Discrete, MultiDiscrete and MultiBinary keys are left
    alone: sb3's ``norm_obs_keys`` can only name Box keys)."""
    leaves = storage_keys(space)
    return {
        k: shape for k, (shape, dtype) in obs_layout(space).items() if dtype != np.uint8 and isinstance(leaves[k], spaces.Box)
    }


def stage_keys_of(space: spaces.Space, normalize: bool, norm_obs: bool) -> tuple[str, ...]:
    """The keys whose normalised observations a run keeps apart from the env's (:func:`vector_obs_shapes`' where it
    normalises observations): the storage's ``stage_keys``, in shared memory where processes stepping envs write them."""
    return tuple(vector_obs_shapes(space)) if normalize and norm_obs else ()


class RolloutStorage:
    """Everything one rollout of ``n_steps`` x ``n_envs`` transitions needs.

    Written by environments (through ``alloc``):
        env_obs[key]: [n_steps+1, n_envs, *shape], the space's dtype: the env's observation after
            step t-1 is ``env_obs[t]`` (the reset obs for envs whose episode ended).
        env_terminal_obs[key]: [n_envs, *shape], the last obs of an episode that just ended (each
            env's row aligned, :func:`step_major`).
        env_rewards: float32[n_steps, n_envs]; terminated, truncated: bool[n_steps, n_envs].
        episode_values: float64[n_envs, columns], episode_kinds: uint8[n_envs, columns]: the named
            statistics of an episode that ended at the last step (return, length, success flag,
            ``info_keywords``), written by the runners' episode books (``ppo_dict.data.episodes``).
        action_masks: bool[n_steps+1, n_envs, mask_dim] or None: the valid actions at ``env_obs[t]``,
            written with it, when the action space is marked as giving masks (``ppo_dict.data.masking``).
    Read by environments:
        env_actions: [n_envs, *action_shape], the (clipped) actions to apply; for a Dict or Tuple
            action space (which only ``ShmVecEnv`` steps: sb3's PPO refuses them) one such array
            per leaf, ``{key: [n_envs, *leaf shape]}`` (keys as :func:`storage_keys`).
    Learner only:
        obs[key], terminal_obs[key]: the observations as the policy sees them (see the module doc).
        rewards: float32[n_steps, n_envs], normalised and bootstrapped: what GAE uses.
        actions: [n_steps, n_envs, action_dim] (unclipped, action dtype), episode_starts, values,
        log_probs, advantages, returns: float32[n_steps, n_envs].
    Written by an sb3 vec env's pool (``ppo_dict.vec.vec_env_pool``), the arrays the vec env returned, as it
    returned them (``{key: array}`` by :func:`obs_parts`), for the policy to read as sb3 reads them
    (:meth:`step_input`, :meth:`terminal_input`): their strides are the vec env's (``VecTransposeImage``'s view
    of stacked frames is channels-last in memory, and a convolution rounds by the layout), the rows above copies:
        returned: ``{row: parts}`` of the rows the policy reads next (t and t+1; None: not kept).
    Such a pool's storage has no normalised stage (a ``VecNormalize`` is in the vec env) and no channel-last keys
    (sb3's ``_wrap_env`` put the images channel-first), so what the vec env returned is what the policy reads.
        returned_terminal: ``{env: parts}``, the terminal observations of the last step.
    """

    def __init__(
        self,
        observation_space: spaces.Space,
        action_space: spaces.Space,
        n_steps: int,
        n_envs: int,
        alloc: Alloc = zeros,
        info_keywords: tuple[str, ...] = (),
        stage_keys: tuple[str, ...] = (),
    ):
        self.observation_space, self.action_space = observation_space, action_space
        self.info_keywords = tuple(info_keywords)
        self.n_steps, self.n_envs = n_steps, n_envs
        self.is_dict_obs = isinstance(observation_space, spaces.Dict)
        self.obs_layout = obs_layout(observation_space)
        self.channel_last_keys = channel_last_keys(observation_space)
        self.composite_actions = isinstance(action_space, (spaces.Dict, spaces.Tuple))
        if self.composite_actions:
            problem = vec_space_problem(action_space, "action")
            if problem:
                raise ValueError(problem)
            act_shape, act_dtype, self.action_dim = (), np.dtype(np.float32), 0
        else:
            act_shape, act_dtype, self.action_dim = action_spec(action_space).layout
        T, N = n_steps, n_envs
        # The allocation order is the shared-memory layout's order (ppo_dict.vec.shared_memory): the envs' arrays first.
        self._alloc_env_arrays(alloc, act_shape, act_dtype)
        self.obs = dict(self.env_obs)
        self.terminal_obs = dict(self.env_terminal_obs)
        # What a process stepping envs may also write of its own columns (the policy where the envs are,
        # ppo_dict.algo.rollout.shard), so from ``alloc`` too: the normalised observations of ``stage_keys``, the
        # step's actions, values and log-probs (into these rows, as into fresh tensors), the learner's rewards,
        # the episode starts and each env's last episode end (sb3's _last_episode_starts).
        self.stage_keys = tuple(stage_keys)
        for key in self.stage_keys:
            shape, dtype = self.obs_layout[key]
            self.obs[key] = step_major(alloc, T + 1, (N, *shape), dtype)
            self.terminal_obs[key] = step_major(alloc, N, shape, dtype)
        self.actions = step_major(alloc, T, (N, self.action_dim), act_dtype)
        self.values = step_major(alloc, T, (N,), np.dtype(np.float32))
        self.log_probs = step_major(alloc, T, (N,), np.dtype(np.float32))
        # GAE's arrays: numpy, element by element
        self.rewards = alloc((T, N), np.dtype(np.float32))
        self.episode_starts = alloc((T, N), np.dtype(np.float32))
        self.last_dones = alloc((N,), np.dtype(np.bool_))
        self.advantages = zeros((T, N), np.dtype(np.float32))
        self.returns = zeros((T, N), np.dtype(np.float32))
        # a recurrent policy's LSTM states (ppo_dict.data.recurrent.StateStore), set by the collector: the learner's alone
        self.lstm_states: Optional[Any] = None
        # an sb3 vec env's arrays as it returned them (see the class doc), by row and by env
        self.returned: dict[int, Optional[dict[str, Any]]] = {}
        self.returned_terminal: dict[int, dict[str, Any]] = {}

    def _alloc_env_arrays(self, alloc: Alloc, act_shape: tuple[int, ...], act_dtype: np.dtype) -> None:
        """The arrays the envs write (observations, terminal observations, rewards, ends, episode statistics, masks)
        and the actions they read, from ``alloc`` in the shared-memory layout's order. The arrays whose rows a kernel
        reads or writes are step_major: each row laid out as a fresh array."""
        T, N, layout = self.n_steps, self.n_envs, self.obs_layout
        self.env_obs = {k: step_major(alloc, T + 1, (N, *shape), dtype) for k, (shape, dtype) in layout.items()}
        # one env's terminal observation is a policy input of its own (the bootstrap): rows by env, aligned
        self.env_terminal_obs = {k: step_major(alloc, N, shape, dtype) for k, (shape, dtype) in layout.items()}
        # read by numpy alone, element by element (no kernel's rounding depends on where they start): not padded
        self.env_rewards = alloc((T, N), np.dtype(np.float32))
        self.terminated = alloc((T, N), np.dtype(np.bool_))
        self.truncated = alloc((T, N), np.dtype(np.bool_))
        self.episode_values = alloc((N, episode_columns(self.info_keywords)), np.dtype(np.float64))
        self.episode_kinds = alloc((N, episode_columns(self.info_keywords)), np.dtype(np.uint8))
        if self.composite_actions:
            leaves = {k: action_spec(sub).layout[:2] for k, sub in storage_keys(self.action_space).items()}
            self.env_actions = {k: alloc((N, *shape), dtype) for k, (shape, dtype) in leaves.items()}
        else:
            self.env_actions = alloc((N, *act_shape), act_dtype)
        masks = mask_dim(self.action_space)
        self.action_masks = step_major(alloc, T + 1, (N, masks), np.dtype(np.bool_)) if masks else None

    def own_obs_stage(self, keys: Iterable[str]) -> None:
        """Give ``keys`` learner arrays of their own (normalised observations), apart from the env's (the
        :attr:`stage_keys` have theirs from the start)."""
        for key in keys:
            if key in self.stage_keys:
                continue
            shape, dtype = self.obs_layout[key]
            self.obs[key] = step_major(zeros, self.n_steps + 1, (self.n_envs, *shape), dtype)
            self.terminal_obs[key] = step_major(zeros, self.n_envs, shape, dtype)

    # ------------------------------------------------------------------ views
    def obs_at(self, t: int) -> dict[str, np.ndarray]:
        """``{key: [n_envs, ...]}`` views of the observations the policy sees at step ``t``."""
        return {key: arr[t] for key, arr in self.obs.items()}

    def env_obs_at(self, t: int) -> dict[str, np.ndarray]:
        """``{key: [n_envs, ...]}`` views of the observations the envs wrote for step ``t``."""
        return {key: arr[t] for key, arr in self.env_obs.items()}

    def dones_at(self, t: int) -> np.ndarray:
        return self.terminated[t] | self.truncated[t]

    def episode(self, env: int) -> tuple[Optional[dict[str, Any]], Any]:
        """``(episode, success)`` that env ``env``'s last episode end wrote (:func:`~ppo_dict.data.episodes.read_row`)."""
        return read_row(self.episode_values[env], self.episode_kinds[env], self.info_keywords)

    def env_actions_of(self, envs: Union[slice, list[int]]) -> list[Any]:
        """The actions of envs ``envs`` (a slice or a list of env indices), each as its env takes it:
        its row (a dict or tuple of rows for a Dict or Tuple action space) of one copy of their rows,
        taken once per step, so that no env can write into the shared batch. sb3's DummyVecEnv
        likewise hands each env a row of the step's action array."""

        def rows(arr: np.ndarray) -> np.ndarray:
            return arr[envs].copy() if isinstance(envs, slice) else arr[envs]  # a list index copies already

        if not self.composite_actions:
            return list(rows(self.env_actions))
        parts = {key: rows(arr) for key, arr in self.env_actions.items()}
        dicts = [dict(zip(parts, row)) for row in zip(*parts.values())]
        return dicts if isinstance(self.action_space, spaces.Dict) else [tuple(d.values()) for d in dicts]

    def as_policy_input(self, obs: dict[str, np.ndarray]) -> PolicyObs:
        """:func:`policy_view` of ``[B, ...]`` batches of this storage's observations."""
        return policy_view(obs, self.channel_last_keys, self.is_dict_obs)

    def step_input(self, t: int) -> Optional[PolicyObs]:
        """Step ``t``'s observations as an sb3 vec env returned them (:attr:`returned`), as sb3's ``obs_as_tensor``
        reads its ``_last_obs``; None where the envs write only the storage's rows (ppo_dict's own pools)."""
        parts = self.returned.get(t)
        return None if parts is None else self.as_policy_input(parts)

    def terminal_rows(self, envs: np.ndarray) -> dict[str, np.ndarray]:
        """Copies of envs ``envs``' terminal observations (``{key: [len(envs), *shape]}``), each row laid out
        as a fresh allocation (:func:`step_major`), for :meth:`terminal_input` to read after a worker
        may have written an env's row again."""
        copies = {}
        for key, arr in self.terminal_obs.items():
            copies[key] = step_major(zeros, len(envs), arr.shape[1:], arr.dtype)
            copies[key][...] = arr[envs]
        return copies

    def terminal_input(self, env: int, rows: Optional[dict[str, np.ndarray]] = None) -> PolicyObs:
        """Env ``env``'s terminal observation as the policy sees it, a batch of one built as sb3's
        ``obs_to_tensor`` builds it (``rows``: read row ``env`` of these copies, :meth:`terminal_rows`, instead).

        sb3 copies the observation first (``np.array``), so the policy reads a fresh array; the rows
        here are laid out as one (:func:`step_major` by env), and :func:`aligned` copies one that is not.
        Channel-last images: ``np.transpose(obs, (2, 0, 1)).reshape(-1, C, H, W)``, a view whose
        batch stride differs from a slice's, and the convolution rounds by it (1.2e-7 in values).
        """
        returned = self.returned_terminal.get(env) if rows is None else None
        if returned is not None:  # as an sb3 vec env returned it, through sb3's obs_to_tensor: np.array keeps the memory order
            return self.as_policy_input(
                {key: np.array(one).reshape((-1, *self.obs_layout[key][0])) for key, one in returned.items()}
            )
        obs = {}
        for key, one in aligned({key: arr[env] for key, arr in (self.terminal_obs if rows is None else rows).items()}).items():
            view = channel_first(one) if key in self.channel_last_keys else one
            obs[key] = view.reshape((-1, *view.shape))
        return obs if self.is_dict_obs else obs[OBS_KEY]

    def carry_over(self, row: Optional[int] = None) -> None:
        """Start the next rollout from the last observation of this one (both stages), or from ``row``'s
        (a rollout stopped after its step ``row``: sb3 keeps ``_last_obs`` from before that step)."""
        row = self.n_steps if row is None else row
        for arrays in (self.env_obs, self.obs):
            for arr in arrays.values():
                arr[0] = arr[row]
        if self.action_masks is not None:
            self.action_masks[0] = self.action_masks[row]
        if self.returned:
            self.returned = {0: self.returned.get(row)}
        if self.lstm_states is not None:
            states = self.lstm_states
            if row != self.n_steps:  # sb3-contrib keeps _last_lstm_states from before the stopped step too
                for group in range(len(states.groups)):
                    states.write(self.n_steps, states.at(row, group), group)
            states.carry_over()

    def obs_views(self) -> dict[str, torch.Tensor]:
        """Tensors of the observation arrays ``[n_steps + 1, n_envs, ...]``, channel-last images seen as ``[C, H, W]``
        views, as sb3's VecTransposeImage shows them (call again after :meth:`own_obs_stage`)."""
        return {
            k: channel_first(torch.from_numpy(v)) if k in self.channel_last_keys else torch.from_numpy(v)
            for k, v in self.obs.items()
        }

    # ------------------------------------------------------------------ sb3 RolloutBuffer.get
    def flat_samples(self) -> dict[str, PolicyObs]:
        """Env-major flattened copies (``flat index = env * n_steps + step``), as sb3's swap_and_flatten."""

        def flat(arr: np.ndarray) -> np.ndarray:
            shape = arr.shape if arr.ndim >= 3 else (*arr.shape, 1)
            return arr.swapaxes(0, 1).reshape(shape[0] * shape[1], *shape[2:])

        # sb3's buffer holds transposed images contiguously, so training minibatches are contiguous [C, H, W]
        obs = {key: flat(arr[: self.n_steps]) for key, arr in self.obs.items()}
        obs = {k: np.ascontiguousarray(channel_first(v)) if k in self.channel_last_keys else v for k, v in obs.items()}
        return {
            "observations": obs if self.is_dict_obs else obs[OBS_KEY],
            "actions": flat(self.actions),
            "values": flat(self.values),
            "log_probs": flat(self.log_probs),
            "advantages": flat(self.advantages),
            "returns": flat(self.returns),
            **({} if self.action_masks is None else {"action_masks": flat(self.action_masks[: self.n_steps])}),
        }


def obs_to_tensor(obs: PolicyObs, device: torch.device) -> TensorObs:
    """``th.as_tensor`` per key, keeping the numpy dtype (sb3 ``obs_as_tensor``); no copy on CPU."""
    if isinstance(obs, dict):
        return {key: torch.as_tensor(value, device=device) for key, value in obs.items()}
    return torch.as_tensor(obs, device=device)
