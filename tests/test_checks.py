"""The whole check before anything starts: every bad setting in one error, the env and model matched, sb3's warnings."""

import warnings

import numpy as np
import pytest
from gymnasium import spaces

from ppo_dict.core.config import Config
from ppo_dict.core.errors import ConfigError
from ppo_dict.run.checks import validate
from tests.system_parts import needs


def test_every_bad_setting_is_listed_at_once() -> None:
    cfg = Config(
        n_epochs=0,
        clip_range=-0.2,
        gamma=1.5,
        learning_rate=-0.1,
        ent_coef=float("nan"),
        batch_size=1,
        n_steps=1,
        n_envs=1,
        num_workers=0,
        env="gym_Hoper-v5",
        model="resnet",
    )
    with pytest.raises(ConfigError) as exc:
        validate(cfg)
    text = str(exc.value)
    for expected in (
        "n_epochs=0: must be in [1, inf]",
        "clip_range=-0.2",
        "gamma=1.5: must be in [0.0, 1.0]",
        "learning_rate=-0.1: must be in [0.0, 3.4028234663852886e+37)",
        "ent_coef=nan",
        "batch_size=1: must be > 1 when normalize_advantage",
        "n_steps*n_envs=1",
        "model='resnet'",
        "Did you mean: `Hopper`?",
    ):
        assert expected in text, expected
    assert len(exc.value.problems) == 9


def test_truncated_minibatch_warns_like_sb3() -> None:
    with pytest.warns(UserWarning, match=r"mini-batch size of 60.*n_steps \* n_envs = 192.*truncated mini-batch of size 12"):
        validate(Config(env="gym_CartPole-v1", n_envs=3, num_workers=0, n_steps=64, batch_size=60))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        validate(Config(env="gym_CartPole-v1", n_envs=2, num_workers=0, n_steps=64, batch_size=64))


def test_atari_settings_are_checked_with_the_rest() -> None:
    cfg = Config(
        env="gym_BreakoutNoFrameskip-v4",
        atari_wrapper=True,
        pixel_obs_wrapper=True,
        atari_noop_max=-1,
        atari_action_repeat_probability=1.5,
        frame_stack=0,
    )
    with pytest.raises(ConfigError) as exc:
        validate(cfg)
    assert exc.value.problems == [
        "frame_stack=0: must be in [1, 64]",
        "atari_noop_max=-1: must be in [0, inf]",
        "atari_action_repeat_probability=1.5: must be in [0.0, 1.0]",
        "atari_wrapper=True: Atari games observe their own screen; drop --pixel_obs_wrapper",
        "env='gym_BreakoutNoFrameskip-v4': --pixel_obs_wrapper renders MuJoCo envs; "
        "BreakoutNoFrameskip-v4 is not one (ale_py.env:AtariEnv)",
    ]
    with pytest.raises(ConfigError, match=r"model='mlp': the observation holds images; use --model cnn"):
        validate(Config(env="gym_BreakoutNoFrameskip-v4", atari_wrapper=True, frame_stack=4, n_envs=2, num_workers=0))
    backend = validate(
        Config(env="gym_BreakoutNoFrameskip-v4", atari_wrapper=True, frame_stack=4, model="cnn", n_envs=2, num_workers=0)
    )
    assert backend.observation_space.shape == (84, 84, 4) and backend.action_space.n == 4


def spaces_config(observation_space, action_space, **settings) -> Config:
    return Config(
        env="gym_PPODictCustomSpaces-v0",
        gym_packages=("tests.envs.custom_envs",),
        num_workers=0,
        n_envs=2,
        n_steps=8,
        batch_size=16,
        env_kwargs=dict(observation_space=observation_space, action_space=action_space),
        **settings,
    )


def problems_of(cfg: Config) -> list[str]:
    with pytest.raises(ConfigError) as exc:
        validate(cfg)
    return exc.value.problems


@pytest.mark.parametrize(
    "observation_space, reason",
    [
        (
            spaces.Tuple((spaces.Discrete(2), spaces.MultiBinary(3))),
            "Tuple(Discrete(2), MultiBinary(3)) observation space is not supported",
        ),
        (
            spaces.Dict({"a": spaces.Dict({"b": spaces.Discrete(2)})}),
            "Nested observation spaces are not supported (Tuple/Dict space inside Tuple/Dict space).",
        ),
        (
            spaces.Dict({"seq": spaces.Sequence(spaces.Discrete(3))}),
            "Sequence(Discrete(3), stack=False) observation space is not supported",
        ),
        (spaces.Graph(spaces.Box(-1, 1, (2,)), spaces.Discrete(2)), "observation space is not supported"),
    ],
)
def test_observation_spaces_sb3_refuses_are_refused_with_its_reason(observation_space, reason: str) -> None:
    problems = problems_of(spaces_config(observation_space, spaces.Discrete(2)))
    assert (
        len(problems) == 1
        and problems[0].startswith("env='gym_PPODictCustomSpaces-v0': observation space: ")
        and reason in problems[0]
    )


@pytest.mark.parametrize(
    "action_space, settings, reason",
    [
        (
            spaces.Discrete(3),
            dict(use_sde=True),
            "use_sde=True: generalized State-Dependent Exploration (gSDE) can only be used with continuous actions. "
            "(gym_PPODictCustomSpaces-v0 acts in Discrete(3))",
        ),
        (
            spaces.MultiBinary([2, 3]),
            {},
            "env='gym_PPODictCustomSpaces-v0': action space: Multi-dimensional MultiBinary((2, "
            "3)) action space is not supported. You can flatten it instead.",
        ),
        (
            spaces.Box(-np.inf, np.inf, (2,)),
            {},
            "env='gym_PPODictCustomSpaces-v0': action space: Continuous action space must have a finite lower and upper bound",
        ),
        (
            spaces.Dict({"a": spaces.Discrete(2)}),
            {},
            "env='gym_PPODictCustomSpaces-v0': action space: The algorithm only supports (<class 'gymnasium.spaces.box.Box'>, "
            "<class 'gymnasium.spaces.discrete.Discrete'>, <class 'gymnasium.spaces.multi_discrete.MultiDiscrete'>, "
            "<class 'gymnasium.spaces.multi_binary.MultiBinary'>) as action spaces but Dict('a': Discrete(2)) was provided",
        ),
    ],
)
def test_action_spaces_and_gsde_sb3_refuses_are_refused_with_its_reason(action_space, settings: dict, reason: str) -> None:
    assert problems_of(spaces_config(spaces.Box(-1, 1, (3,)), action_space, **settings)) == [reason]


def test_every_space_sb3_takes_passes_the_check() -> None:
    every_leaf = spaces.Dict(
        {
            "a": spaces.MultiDiscrete([2, 3]),
            "b": spaces.MultiBinary([2, 2]),
            "c": spaces.Discrete(3),
            "d": spaces.Box(-1, 1, (2,)),
        }
    )
    for action_space in (spaces.MultiDiscrete([3, 2]), spaces.MultiBinary(4), spaces.Box(-1, 1, (2,)), spaces.Discrete(2)):
        validate(spaces_config(every_leaf, action_space, use_sde=isinstance(action_space, spaces.Box)))


def test_frame_stack_of_normalised_vectors_is_refused_with_why() -> None:
    """sb3/rl-zoo normalise before VecFrameStack; ppo_dict stacks in the env, so normalised stacked vectors would differ."""
    cfg = Config(env="gym_Pendulum-v1", frame_stack=3, normalize=True, num_workers=0, n_envs=2)
    assert problems_of(cfg) == [
        "frame_stack=3: with normalize and norm_obs, sb3 and rl-zoo normalise each observation before VecFrameStack stacks "
        "them, but ppo_dict stacks inside the env, so the statistics of ['obs'] would be over stacks (their zero padding "
        "included) and not sb3's: use --norm_obs False, or no --frame_stack"
    ]
    validate(cfg.replace(norm_obs=False))  # rewards only: nothing stacked is normalised


@needs("gl")
def test_frame_stack_of_rendered_pixels_beside_a_normalised_state_is_taken() -> None:
    """Rendered pixels stack only their frames (uint8, never normalised), not the state beside them."""
    validate(
        Config(
            env="gym_Reacher-v5",
            pixel_obs_wrapper=True,
            pixel_keep_state=True,
            image_size=36,
            frame_stack=2,
            model="cnn",
            normalize=True,
            num_workers=0,
            n_envs=2,
        )
    )
