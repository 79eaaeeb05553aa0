"""The whole check before anything starts: every bad setting in one error, the env and model matched, sb3's warnings."""
import warnings

import pytest

from ppo_dict.checks import validate
from ppo_dict.config import Config
from ppo_dict.errors import ConfigError


def test_every_bad_setting_is_listed_at_once() -> None:
    cfg = Config(n_epochs=0, clip_range=-0.2, gamma=1.5, learning_rate=0.0, ent_coef=float("nan"), batch_size=1,
                 n_steps=1, n_envs=1, num_workers=0, env="gym_Hoper-v5", model="resnet")
    with pytest.raises(ConfigError) as exc:
        validate(cfg)
    text = str(exc.value)
    for expected in ("n_epochs=0: must be in [1, inf]", "clip_range=-0.2", "gamma=1.5: must be in [0.0, 1.0]", "learning_rate=0.0",
                     "ent_coef=nan", "batch_size=1: must be > 1 when normalize_advantage", "n_steps*n_envs=1", "model='resnet'",
                     "Did you mean: `Hopper`?"):
        assert expected in text, expected
    assert len(exc.value.problems) == 9


def test_truncated_minibatch_warns_like_sb3() -> None:
    with pytest.warns(UserWarning, match=r"mini-batch size of 60.*n_steps \* n_envs = 192.*truncated mini-batch of size 12"):
        validate(Config(env="gym_CartPole-v1", n_envs=3, num_workers=0, n_steps=64, batch_size=60))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        validate(Config(env="gym_CartPole-v1", n_envs=2, num_workers=0, n_steps=64, batch_size=64))


def test_atari_settings_are_checked_with_the_rest() -> None:
    cfg = Config(env="gym_BreakoutNoFrameskip-v4", atari_wrapper=True, pixel_obs_wrapper=True, atari_noop_max=-1,
                 atari_action_repeat_probability=1.5, frame_stack=0)
    with pytest.raises(ConfigError) as exc:
        validate(cfg)
    assert exc.value.problems == [
        "frame_stack=0: must be in [1, 64]",
        "atari_noop_max=-1: must be in [0, inf]",
        "atari_action_repeat_probability=1.5: must be in [0.0, 1.0]",
        "atari_wrapper=True: Atari games observe their own screen; drop --pixel_obs_wrapper",
        "env='gym_BreakoutNoFrameskip-v4': --pixel_obs_wrapper renders MuJoCo envs; BreakoutNoFrameskip-v4 is not one (ale_py.env:AtariEnv)",
    ]
    with pytest.raises(ConfigError, match=r"model='mlp': the observation holds images; use --model cnn"):
        validate(Config(env="gym_BreakoutNoFrameskip-v4", atari_wrapper=True, frame_stack=4, n_envs=2, num_workers=0))
    backend = validate(Config(env="gym_BreakoutNoFrameskip-v4", atari_wrapper=True, frame_stack=4, model="cnn", n_envs=2, num_workers=0))
    assert backend.observation_space.shape == (84, 84, 4) and backend.action_space.n == 4
