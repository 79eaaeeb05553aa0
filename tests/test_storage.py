"""RolloutStorage: sb3's buffer layout and dtypes, one meaning per array, the policy's views of images."""

import numpy as np
import pytest
from gymnasium import spaces
from stable_baselines3.common.buffers import RolloutBuffer

from ppo_dict.data.actions import action_spec
from ppo_dict.data.storage import OBS_KEY, RolloutStorage, obs_layout


def test_layout_and_dtypes_are_sb3s() -> None:
    space = spaces.Dict(
        {
            "vec": spaces.Box(-1, 1, (3,), np.float64),
            "cell": spaces.Discrete(5),
            "img": spaces.Box(0, 255, (8, 8, 3), np.uint8),
        }
    )
    assert obs_layout(space) == {
        "cell": ((1,), np.dtype(np.int64)),
        "img": ((8, 8, 3), np.dtype(np.uint8)),
        "vec": ((3,), np.dtype(np.float64)),
    }
    assert obs_layout(spaces.Box(-1, 1, (2, 2), np.float32)) == {OBS_KEY: ((2, 2), np.dtype(np.float32))}
    assert action_spec(spaces.Box(-1, 1, (2, 3), np.float32)).layout == ((2, 3), np.dtype(np.float32), 6)
    assert action_spec(spaces.Discrete(4)).layout == ((), np.dtype(np.int64), 1)
    assert obs_layout(spaces.MultiDiscrete([3, 4])) == {OBS_KEY: ((2,), np.dtype(np.int64))}
    assert obs_layout(spaces.MultiBinary([2, 3])) == {OBS_KEY: ((2, 3), np.dtype(np.int8))}
    assert obs_layout(spaces.Tuple([spaces.Discrete(2), spaces.MultiBinary(3)])) == {
        "0": ((1,), np.dtype(np.int64)),
        "1": ((3,), np.dtype(np.int8)),
    }
    assert action_spec(spaces.MultiDiscrete([3, 4, 2])).layout == ((3,), np.dtype(np.int64), 3)
    assert action_spec(spaces.MultiBinary(5)).layout == ((5,), np.dtype(np.int8), 5)
    with pytest.raises(ValueError, match=r"^Sequence\(Discrete\(2\), stack=False\) observation space is not supported$"):
        obs_layout(spaces.Dict({"a": spaces.Sequence(spaces.Discrete(2))}))
    with pytest.raises(ValueError, match=r"^Nested observation spaces are not supported"):
        obs_layout(spaces.Tuple([spaces.Tuple([spaces.Discrete(2)])]))
    s = RolloutStorage(space, spaces.Discrete(4), n_steps=5, n_envs=3)
    assert s.env_obs["img"].shape == (6, 3, 8, 8, 3) and s.env_terminal_obs["vec"].shape == (3, 3)
    assert s.actions.shape == (5, 3, 1) and s.actions.dtype == np.int64 and s.env_actions.shape == (3,)
    assert all(
        a.dtype == np.float32
        for a in (s.rewards, s.env_rewards, s.values, s.log_probs, s.advantages, s.returns, s.episode_starts)
    )


def test_each_array_has_one_meaning() -> None:
    """Until normalisation asks for its own arrays the policy sees the env's arrays; rewards are always the learner's."""
    s = RolloutStorage(spaces.Box(-1, 1, (2,), np.float64), spaces.Box(-1, 1, (1,), np.float32), n_steps=4, n_envs=2)
    assert s.obs[OBS_KEY] is s.env_obs[OBS_KEY] and s.terminal_obs[OBS_KEY] is s.env_terminal_obs[OBS_KEY]
    assert not np.shares_memory(s.rewards, s.env_rewards)
    s.env_obs[OBS_KEY][...] = 7.0
    s.own_obs_stage([OBS_KEY])
    assert s.obs[OBS_KEY] is not s.env_obs[OBS_KEY] and s.obs[OBS_KEY].dtype == np.float64 and not s.obs[OBS_KEY].any()
    assert s.terminal_obs[OBS_KEY].shape == s.env_terminal_obs[OBS_KEY].shape
    s.obs[OBS_KEY][4] = 3.0
    s.carry_over()
    assert (s.obs[OBS_KEY][0] == 3.0).all() and (s.env_obs[OBS_KEY][0] == 7.0).all()


def test_channel_last_images_are_shown_to_the_policy_as_sb3_shows_them() -> None:
    s = RolloutStorage(spaces.Box(0, 255, (6, 5, 3), np.uint8), spaces.Discrete(2), n_steps=2, n_envs=2)
    s.env_obs[OBS_KEY][...] = np.arange(s.env_obs[OBS_KEY].size, dtype=np.uint8).reshape(s.env_obs[OBS_KEY].shape)
    batch = s.as_policy_input(s.obs_at(1))
    # a transposed view, as VecTransposeImage's
    assert batch.shape == (2, 3, 6, 5) and np.shares_memory(batch, s.env_obs[OBS_KEY])
    s.env_terminal_obs[OBS_KEY][1] = s.env_obs[OBS_KEY][1, 1]
    one = s.terminal_input(1)
    expected = np.transpose(s.env_terminal_obs[OBS_KEY][1], (2, 0, 1)).reshape(-1, 3, 6, 5)  # sb3 obs_to_tensor
    assert one.shape == expected.shape and one.strides == expected.strides and np.array_equal(one, expected)
    flat = s.flat_samples()["observations"]
    assert flat.shape == (4, 3, 6, 5) and flat.flags.c_contiguous  # training minibatches: sb3's contiguous buffer


def test_flat_samples_are_env_major_as_sb3_swap_and_flatten() -> None:
    s = RolloutStorage(spaces.Box(-1, 1, (2,), np.float32), spaces.Box(-1, 1, (3,), np.float32), n_steps=4, n_envs=3)
    rng = np.random.default_rng(0)
    for name in ("actions", "values", "log_probs", "advantages", "returns"):
        getattr(s, name)[...] = rng.normal(size=getattr(s, name).shape)
    s.env_obs[OBS_KEY][...] = rng.normal(size=s.env_obs[OBS_KEY].shape)
    flat = s.flat_samples()
    for name in ("actions", "values", "log_probs", "advantages", "returns"):
        assert np.array_equal(flat[name], RolloutBuffer.swap_and_flatten(getattr(s, name))), name
    assert np.array_equal(flat["observations"], RolloutBuffer.swap_and_flatten(s.env_obs[OBS_KEY][:4]))
