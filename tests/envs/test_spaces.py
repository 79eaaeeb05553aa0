"""Image-space predicates with sb3's definitions, and the channel-first view the CNN gets."""

import numpy as np
from gymnasium import spaces
from stable_baselines3.common.preprocessing import is_image_space as sb3_is_image_space
from stable_baselines3.common.preprocessing import is_image_space_channels_first
from stable_baselines3.common.vec_env.vec_transpose import VecTransposeImage

from ppo_dict.envs import channel_first_space, contains_image, is_channel_last, is_image_space

SPACES = [
    spaces.Box(0, 255, (84, 84, 3), np.uint8),
    spaces.Box(0, 255, (3, 84, 84), np.uint8),
    spaces.Box(0, 255, (84, 84, 3), np.float32),
    spaces.Box(0, 1, (84, 84, 3), np.uint8),
    spaces.Box(0, 255, (84, 84), np.uint8),
    spaces.Box(-1, 1, (4,), np.float32),
]


def test_predicates_agree_with_sb3() -> None:
    for space in SPACES:
        assert is_image_space(space) == sb3_is_image_space(space), space
        if is_image_space(space):
            assert is_channel_last(space) == (not is_image_space_channels_first(space)), space
    assert contains_image(spaces.Dict({"a": SPACES[5], "b": SPACES[0]})) and not contains_image(spaces.Dict({"a": SPACES[5]}))


def test_channel_first_space_is_vec_transpose_images() -> None:
    assert channel_first_space(SPACES[0]) == VecTransposeImage.transpose_space(SPACES[0])
    nested = channel_first_space(spaces.Dict({"img": SPACES[0], "vec": SPACES[5]}))
    assert nested["img"].shape == (3, 84, 84) and nested["vec"] == SPACES[5]
    assert channel_first_space(SPACES[1]) is SPACES[1]
