"""Rollout storage: one array per field and per dict-observation key, shaped ``[T(+1), N, ...]``.

The fields that environments write (observations, rewards, episode ends, terminal observations,
episode statistics) and the actions they read come from an ``alloc`` function, so that the same
layout can live in ordinary memory (envs stepped in-process) or in shared memory (worker
processes write straight into it). The learner-only fields (values, log-probs, advantages, ...)
are ordinary arrays. Layout and dtypes follow sb3's ``RolloutBuffer`` / ``DictRolloutBuffer``.
"""
from __future__ import annotations

from typing import Callable, Union

import numpy as np
import torch
from gymnasium import spaces

from envs import is_channel_last

Alloc = Callable[[tuple[int, ...], np.dtype], np.ndarray]
Obs = Union[np.ndarray, dict[str, np.ndarray]]

#: The key of the single observation array when the observation space is not a Dict.
OBS_KEY = "obs"


def zeros(shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    return np.zeros(shape, dtype=dtype)


def obs_layout(space: spaces.Space) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
    """``{key: (shape, dtype)}`` of one env's observation, as sb3's buffers store it.

    A Dict space gives one entry per key (in the space's order, which gymnasium sorts); any
    other space gives the single key :data:`OBS_KEY`. Discrete observations are stored as ``(1,)``.
    """
    subspaces = space.spaces if isinstance(space, spaces.Dict) else {OBS_KEY: space}
    layout = {}
    for key, sub in subspaces.items():
        if isinstance(sub, spaces.Discrete):
            layout[key] = ((1,), np.dtype(sub.dtype))
        elif isinstance(sub, spaces.Box):
            layout[key] = (tuple(sub.shape), np.dtype(sub.dtype))
        else:
            raise ValueError(f"observation space {sub} (key {key!r}) is not supported: use Box, Discrete or a Dict of them")
    return layout


def action_layout(space: spaces.Space) -> tuple[tuple[int, ...], np.dtype, int]:
    """``(shape sent to one env, dtype, action_dim stored per transition)`` as sb3 does."""
    if isinstance(space, spaces.Box):
        return tuple(space.shape), np.dtype(space.dtype), int(np.prod(space.shape))
    if isinstance(space, spaces.Discrete):
        return (), np.dtype(space.dtype), 1
    raise ValueError(f"action space {space} is not supported: use Box or Discrete")


class RolloutStorage:
    """Everything one rollout of ``n_steps`` x ``n_envs`` transitions needs.

    Written by environments (through ``alloc``):
        obs[key]: [n_steps+1, n_envs, *shape], the space's dtype. ``obs[t]`` is what the policy saw
            at step t; envs write ``obs[t+1]`` (the reset obs for envs whose episode ended).
        terminal_obs[key]: [n_envs, *shape], the last obs of an episode that just ended.
        rewards: float32[n_steps, n_envs]; terminated, truncated: bool[n_steps, n_envs].
        episode_return: float64[n_envs], episode_length: int64[n_envs], set when an episode ends.
    Read by environments:
        env_actions: [n_envs, *action_shape], the (clipped) actions to apply.
    Learner only:
        actions: [n_steps, n_envs, action_dim] (unclipped, action dtype), episode_starts, values,
        log_probs, advantages, returns: float32[n_steps, n_envs].
    """

    def __init__(self, observation_space: spaces.Space, action_space: spaces.Space, n_steps: int, n_envs: int, alloc: Alloc = zeros):
        self.observation_space, self.action_space = observation_space, action_space
        self.n_steps, self.n_envs = n_steps, n_envs
        self.is_dict_obs = isinstance(observation_space, spaces.Dict)
        self.obs_layout = obs_layout(observation_space)
        subspaces = observation_space.spaces if self.is_dict_obs else {OBS_KEY: observation_space}
        #: images stored as the env gives them, [H, W, C]; the policy sees them as [C, H, W]
        self.channel_last_keys = frozenset(k for k, sub in subspaces.items() if is_channel_last(sub))
        act_shape, act_dtype, self.action_dim = action_layout(action_space)
        T, N = n_steps, n_envs
        self.obs = {k: alloc((T + 1, N, *shape), dtype) for k, (shape, dtype) in self.obs_layout.items()}
        self.terminal_obs = {k: alloc((N, *shape), dtype) for k, (shape, dtype) in self.obs_layout.items()}
        self.rewards = alloc((T, N), np.dtype(np.float32))
        self.terminated = alloc((T, N), np.dtype(np.bool_))
        self.truncated = alloc((T, N), np.dtype(np.bool_))
        self.episode_return = alloc((N,), np.dtype(np.float64))
        self.episode_length = alloc((N,), np.dtype(np.int64))
        self.env_actions = alloc((N, *act_shape), act_dtype)
        self.actions = np.zeros((T, N, self.action_dim), dtype=act_dtype)
        self.episode_starts = np.zeros((T, N), dtype=np.float32)
        self.values = np.zeros((T, N), dtype=np.float32)
        self.log_probs = np.zeros((T, N), dtype=np.float32)
        self.advantages = np.zeros((T, N), dtype=np.float32)
        self.returns = np.zeros((T, N), dtype=np.float32)

    # ------------------------------------------------------------------ views
    def obs_at(self, t: int) -> dict[str, np.ndarray]:
        """``{key: [n_envs, ...]}`` views of the observations at step ``t`` (writable)."""
        return {key: arr[t] for key, arr in self.obs.items()}

    def dones_at(self, t: int) -> np.ndarray:
        return self.terminated[t] | self.truncated[t]

    def as_policy_input(self, obs: dict[str, np.ndarray]) -> Obs:
        """The policy's input form (the single array, or the dict for Dict spaces) of ``[B, ...]`` batches.

        Channel-last images become transposed *views* ``[B, C, H, W]``: sb3's VecTransposeImage
        hands its policy the same non-contiguous view during rollouts, and a convolution rounds
        differently on another memory layout (3.7e-9 in the actions).
        """
        if self.channel_last_keys:
            obs = {k: np.moveaxis(v, -1, -3) if k in self.channel_last_keys else v for k, v in obs.items()}
        return obs if self.is_dict_obs else obs[OBS_KEY]

    def terminal_input(self, env: int) -> Obs:
        """Env ``env``'s terminal observation as a batch of one, built as sb3's ``obs_to_tensor`` builds it.

        Channel-last images: ``np.transpose(obs, (2, 0, 1)).reshape(-1, C, H, W)``, a view whose
        batch stride differs from a slice's, and the convolution rounds by it (1.2e-7 in values).
        """
        obs = {}
        for key, arr in self.terminal_obs.items():
            one = arr[env]
            if key in self.channel_last_keys:
                obs[key] = np.transpose(one, (2, 0, 1)).reshape((-1, one.shape[2], *one.shape[:2]))
            else:
                obs[key] = one.reshape((-1, *one.shape))
        return obs if self.is_dict_obs else obs[OBS_KEY]

    def carry_over(self) -> None:
        """Start the next rollout from the last observation of this one."""
        for arr in self.obs.values():
            arr[0] = arr[self.n_steps]

    # ------------------------------------------------------------------ sb3 RolloutBuffer.get
    def flat_samples(self) -> dict[str, Obs]:
        """Env-major flattened copies (``flat index = env * n_steps + step``), as sb3's swap_and_flatten."""
        def flat(arr: np.ndarray) -> np.ndarray:
            shape = arr.shape if arr.ndim >= 3 else (*arr.shape, 1)
            return arr.swapaxes(0, 1).reshape(shape[0] * shape[1], *shape[2:])

        # sb3's buffer holds transposed images contiguously, so training minibatches are contiguous [C, H, W]
        obs = {key: flat(arr[: self.n_steps]) for key, arr in self.obs.items()}
        obs = {k: np.ascontiguousarray(np.moveaxis(v, -1, -3)) if k in self.channel_last_keys else v for k, v in obs.items()}
        return {
            "observations": obs if self.is_dict_obs else obs[OBS_KEY],
            "actions": flat(self.actions),
            "values": flat(self.values),
            "log_probs": flat(self.log_probs),
            "advantages": flat(self.advantages),
            "returns": flat(self.returns),
        }


def obs_to_tensor(obs: Obs, device: torch.device) -> Union[torch.Tensor, dict[str, torch.Tensor]]:
    """``th.as_tensor`` per key, keeping the numpy dtype (sb3 ``obs_as_tensor``); no copy on CPU."""
    if isinstance(obs, dict):
        return {key: torch.as_tensor(value, device=device) for key, value in obs.items()}
    return torch.as_tensor(obs, device=device)


class StepObsToDevice:
    """The observations of one rollout step as policy input on ``device``.

    CPU: ``torch.from_numpy`` views of the storage itself, no copy. CUDA: one pinned staging
    buffer per key, one copy into it and one non-blocking host-to-device copy per step; uint8
    images travel as uint8 and are scaled on the GPU. Reusing the staging buffer is safe because
    every step synchronises on ``actions.cpu()`` before the next copy.
    """

    def __init__(self, storage: RolloutStorage, device: torch.device):
        self.storage, self.device = storage, device
        self.pinned: dict[str, torch.Tensor] = {}
        if device.type == "cuda":
            for key, (shape, dtype) in storage.obs_layout.items():
                torch_dtype = torch.from_numpy(np.empty(0, dtype=dtype)).dtype
                self.pinned[key] = torch.empty((storage.n_envs, *shape), dtype=torch_dtype).pin_memory()

    def __call__(self, t: int) -> Union[torch.Tensor, dict[str, torch.Tensor]]:
        obs = self.storage.obs_at(t)
        if not self.pinned:
            return obs_to_tensor(self.storage.as_policy_input(obs), self.device)
        on_device = {}
        for key, arr in obs.items():
            staging = self.pinned[key]
            staging.copy_(torch.from_numpy(arr))
            on_device[key] = staging.to(self.device, non_blocking=True)
            if key in self.storage.channel_last_keys:
                on_device[key] = on_device[key].permute(0, 3, 1, 2)
        return on_device if self.storage.is_dict_obs else on_device[OBS_KEY]
