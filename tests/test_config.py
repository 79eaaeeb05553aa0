"""Config parsing and validation: every spelling a person or a wandb agent uses, every bad value reported."""
import warnings

import pytest

from ppo_dict.checks import validate
from ppo_dict.cli import config_from_args
from ppo_dict.config import Config
from ppo_dict.errors import ConfigError
from ppo_dict.parse import make_schedule, parse_net_arch


@pytest.mark.parametrize("argv, expected", [
    (["--normalize"], True),
    (["--normalize", "True"], True),
    (["--normalize=False"], False),
    (["--normalize=true"], True),
    (["--normalize", "0"], False),
    ([], False),
])
def test_boolean_spellings(argv, expected) -> None:
    assert config_from_args(argv).normalize is expected


@pytest.mark.parametrize("text, expected", [
    ("64,64", [64, 64]),
    ("[256, 256]", [256, 256]),
    ("pi=256,256;vf=128", {"pi": [256, 256], "vf": [128]}),
    ("dict(pi=[32], vf=[16, 16])", {"pi": [32], "vf": [16, 16]}),
    ("{'pi': [8], 'vf': [8]}", {"pi": [8], "vf": [8]}),
    ("[dict(pi=[4], vf=[4])]", {"pi": [4], "vf": [4]}),
    ("[]", []),
])
def test_net_arch_spellings(text, expected) -> None:
    assert parse_net_arch(text) == expected


@pytest.mark.parametrize("text", ["__import__('os').system('true')", "dict(pi=os.getcwd())", "[-1]", "pi=a,b"])
def test_net_arch_is_parsed_safely(text) -> None:
    with pytest.raises((ValueError, SyntaxError)):
        parse_net_arch(text)


def test_wandb_agent_command_line() -> None:
    cfg = config_from_args(["--learning_rate=0.0003", "--normalize=True", "--net_arch=[256, 256]", "--target_kl=None", "--clip_range=lin_0.2"])
    assert cfg.learning_rate == 0.0003 and cfg.normalize is True and cfg.net_arch == [256, 256] and cfg.target_kl is None
    assert make_schedule(cfg.clip_range)(0.5) == 0.5 * 0.2
    assert make_schedule(cfg.learning_rate)(0.25) == 0.0003


def test_unknown_and_abbreviated_flags_are_refused(capsys) -> None:
    for argv in (["--bacth_size", "64"], ["--batch", "64"]):
        with pytest.raises(SystemExit) as exc:
            config_from_args(argv)
        assert exc.value.code == 2
    assert "unrecognized arguments: --batch 64" in capsys.readouterr().err


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


def test_worker_layout() -> None:
    assert Config(n_envs=8, num_workers=2).worker_layout == (8, 2, 4)
    assert Config(num_workers=2, envs_per_worker=3).worker_layout == (6, 2, 3)
    assert Config(n_envs=5, num_workers=0).worker_layout == (5, 0, 0)
    with pytest.raises(ConfigError, match="n_envs=5: must equal num_workers x envs_per_worker"):
        validate(Config(n_envs=5, num_workers=2))


def test_num_batches_sets_the_minibatch_size() -> None:
    cfg = Config(n_envs=8, num_workers=0, n_steps=256, num_batches=4)
    assert cfg.minibatch_size == 512


def test_truncated_minibatch_warns_like_sb3() -> None:
    with pytest.warns(UserWarning, match=r"mini-batch size of 60.*n_steps \* n_envs = 192.*truncated mini-batch of size 12"):
        validate(Config(env="gym_CartPole-v1", n_envs=3, num_workers=0, n_steps=64, batch_size=60))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        validate(Config(env="gym_CartPole-v1", n_envs=2, num_workers=0, n_steps=64, batch_size=64))


def test_old_mujoco_ids_map_to_the_newest_version() -> None:
    from ppo_dict.envs import resolve_env_name

    spec = resolve_env_name("gym_Reacher-v2")
    assert spec.gym_id == "Reacher-v5" and "using Reacher-v5" in spec.notice
    assert resolve_env_name("gym_Reacher-v4").notice == ""
    with pytest.raises(Exception, match="provides versioned environments"):
        resolve_env_name("gym_Hopper-v9")
