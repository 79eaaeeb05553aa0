"""Space predicates shared by the trainer and the envs, with sb3's definitions."""

from __future__ import annotations

import gymnasium as gym
import numpy as np


def is_image_space(space: gym.Space) -> bool:
    """sb3's ``is_image_space``: a 3-d uint8 Box with bounds exactly [0, 255]."""
    return (
        isinstance(space, gym.spaces.Box)
        and len(space.shape) == 3
        and space.dtype == np.uint8
        and bool(np.all(space.low == 0))
        and bool(np.all(space.high == 255))
    )


def is_channel_last(space: gym.Space) -> bool:
    """An image whose smallest axis is not the first (sb3's ``is_image_space_channels_first`` negated)."""
    return is_image_space(space) and int(np.argmin(space.shape)) != 0


def channel_first_space(space: gym.Space) -> gym.Space:
    """The space the CNN sees: channel-last image (sub)spaces as [C, H, W] (sb3 ``VecTransposeImage``)."""
    if isinstance(space, gym.spaces.Dict):
        return gym.spaces.Dict({k: channel_first_space(sub) for k, sub in space.spaces.items()})
    if is_channel_last(space):
        h, w, c = space.shape
        return gym.spaces.Box(0, 255, (c, h, w), space.dtype)
    return space


def contains_image(space: gym.Space) -> bool:
    """Whether ``space`` is an image (:func:`is_image_space`) or a Dict with one."""
    subspaces = space.spaces.values() if isinstance(space, gym.spaces.Dict) else [space]
    return any(is_image_space(sub) for sub in subspaces)


#: The leaf spaces sb3's buffers and ``preprocess_obs`` take (``get_obs_shape``).
LEAF_SPACES = (gym.spaces.Box, gym.spaces.Discrete, gym.spaces.MultiDiscrete, gym.spaces.MultiBinary)


def leaf_spaces(space: gym.Space) -> dict[object, gym.Space]:
    """``{key: subspace}``: a Dict's keys, a Tuple's indices, or ``{None: space}`` (sb3 ``obs_space_info``)."""
    if isinstance(space, gym.spaces.Dict):
        return dict(space.spaces)
    if isinstance(space, gym.spaces.Tuple):
        return dict(enumerate(space.spaces))
    return {None: space}


def nesting_problem(space: gym.Space) -> str:
    """sb3's ``check_for_nested_spaces``: no Dict or Tuple inside a Dict or Tuple."""
    if isinstance(space, (gym.spaces.Dict, gym.spaces.Tuple)):
        if any(isinstance(sub, (gym.spaces.Dict, gym.spaces.Tuple)) for sub in leaf_spaces(space).values()):
            return "Nested observation spaces are not supported (Tuple/Dict space inside Tuple/Dict space)."
    return ""


def vec_space_problem(space: gym.Space, what: str = "observation") -> str:
    """Why a fixed shared-memory layout cannot hold ``space`` (``""`` when it can): sb3's vec envs take
    Box, Discrete, MultiDiscrete, MultiBinary, and one level of Dict or Tuple of them."""
    problem = nesting_problem(space)
    if problem:
        return problem.replace("observation", what)
    for sub in leaf_spaces(space).values():
        if not isinstance(sub, LEAF_SPACES):  # Sequence, Graph, Text...: no fixed shape
            return f"{sub} {what} space is not supported"
    return ""


def ppo_observation_problem(space: gym.Space) -> str:
    """Why sb3's PPO refuses observation ``space`` (``""`` when it takes it), in sb3's words: Box,
    Discrete, MultiDiscrete, MultiBinary, or a Dict of them (a Tuple fails sb3's ``get_obs_shape``)."""
    if isinstance(space, gym.spaces.Tuple) and not nesting_problem(space):
        return f"{space} observation space is not supported"
    problem = vec_space_problem(space)
    if problem:
        return problem
    for sub in leaf_spaces(space).values():
        if isinstance(sub, gym.spaces.MultiDiscrete) and sub.nvec.ndim != 1:
            return f"{sub} observation space is not supported: sb3's preprocess_obs one-hot encodes a 1-d nvec only"
    return ""
