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
