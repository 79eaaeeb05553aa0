"""Config: derived values, and a Config built in Python read and checked as one built from flags."""

import dataclasses

import pytest

from ppo_dict.algo.ppo import PPO
from ppo_dict.core.config import Config
from ppo_dict.core.errors import ConfigError
from ppo_dict.run.checks import validate
from ppo_dict.run.cli import config_from_args
from ppo_dict.vec import make_env_pool


def test_worker_layout() -> None:
    """num_workers counts this process's share as one; an explicit envs_per_worker gives equal shares."""

    def shares(cfg: Config) -> tuple[int, int, list[int]]:
        layout = cfg.layout()
        return layout.n_envs, layout.main, [len(block) for block in layout.blocks]

    assert shares(Config(n_envs=8, num_workers=2)) == (8, 4, [4])
    assert shares(Config(num_workers=2, envs_per_worker=3)) == (6, 3, [3])
    assert shares(Config(n_envs=5, num_workers=0)) == (5, 5, [])
    assert shares(Config(n_envs=5, num_workers=2)) == (5, 2, [3])  # split unevenly, no longer refused
    assert shares(Config(n_envs=12, envs_per_worker=4)) == (12, 4, [4, 4])  # num_workers = n_envs / envs_per_worker
    with pytest.raises(ConfigError, match="n_envs=5: must equal num_workers x envs_per_worker = 2 x 3; drop envs_per_worker"):
        validate(Config(n_envs=5, num_workers=2, envs_per_worker=3))
    with pytest.raises(ConfigError, match="n_envs=10: must be a multiple of envs_per_worker=4"):
        validate(Config(n_envs=10, envs_per_worker=4))
    with pytest.raises(ConfigError, match=r"num_workers=4: more than the 3 envs \(n_envs=3\): each worker steps at least one"):
        validate(Config(n_envs=3, num_workers=4))


def test_num_batches_sets_the_minibatch_size() -> None:
    cfg = Config(n_envs=8, num_workers=0, n_steps=256, num_batches=4)
    assert cfg.minibatch_size == 512


def test_python_values_are_read_by_the_flags_parsers() -> None:
    cfg = Config(
        net_arch="64,64", learning_rate="lin_3e-4", normalize="True", n_steps="128", tags="a,b", activation_fn="nn.ReLU"
    )
    assert (cfg.net_arch, cfg.learning_rate, cfg.normalize, cfg.n_steps, cfg.tags, cfg.activation_fn) == (
        [64, 64],
        "lin_3e-4",
        True,
        128,
        ("a", "b"),
        "relu",
    )
    flags = config_from_args(
        [
            "--net_arch",
            "64,64",
            "--learning_rate",
            "lin_3e-4",
            "--normalize",
            "True",
            "--n_steps",
            "128",
            "--tags",
            "a,b",
            "--activation_fn",
            "nn.ReLU",
        ]
    )
    assert flags == cfg
    assert Config.from_dict(cfg.to_dict()) == cfg
    assert cfg.replace(seed=4).seed == 4 and dataclasses.replace(cfg, n_steps=64).n_steps == 64


def test_values_no_parser_reads_are_refused_at_once_all_listed() -> None:
    with pytest.raises(ConfigError) as exc:
        Config(net_arch="64,abc", seed=3.7, n_epochs="ten", normalize="maybe", gamma=True)
    problems = exc.value.problems
    assert [p.split("=", 1)[0] for p in problems] == ["seed", "net_arch", "n_epochs", "gamma", "normalize"]
    assert problems[0] == "seed=3.7: invalid literal for int() with base 10: '3.7'"
    assert problems[3] == "gamma=True: expected float, got a boolean"
    assert "expected a boolean (True/False), got 'maybe'" in problems[4]


def test_out_of_range_values_are_refused_wherever_the_config_is_used() -> None:
    cfg = Config(env="gym_CartPole-v1", n_epochs=0, gamma=1.5, num_workers=0, n_envs=2)
    assert cfg.problems() == ["n_epochs=0: must be in [1, inf]", "gamma=1.5: must be in [0.0, 1.0]"]
    for use in (lambda: make_env_pool(cfg), lambda: PPO(cfg, None), cfg.check, lambda: validate(cfg)):
        with pytest.raises(
            ConfigError, match=r"^2 invalid setting\(s\):\n  - n_epochs=0: must be in \[1, inf\]\n  - gamma=1.5"
        ):
            use()


def test_every_range_and_choice_comes_from_field_metadata() -> None:
    """Bounds live in the fields: a value just below each lower bound is refused with its range."""
    checked = 0
    for f in dataclasses.fields(Config):
        bounds = f.metadata["range"]
        if bounds is None or bounds[0] == float("-inf"):
            continue
        lo, lo_open = bounds[0], (*bounds, False, False)[2]
        below = lo if lo_open else lo - (1 if isinstance(lo, int) else 0.5)
        assert any(
            p.startswith(f"{f.name}={float(below) if isinstance(lo, float) else below!r}: must be in ")
            for p in Config(**{f.name: below}).problems()
        ), f.name
        checked += 1
    assert checked >= 30
    assert Config(log_std_init=float("nan")).problems() == ["log_std_init=nan: must be in (-inf, inf)"]
    assert Config(model="resnet").problems() == ["model='resnet': must be one of mlp, cnn, mlp_lstm, cnn_lstm"]
    assert Config(wandb_mode="online").problems() == [] and Config(wandb_mode="x").problems() == [
        "wandb_mode='x': must be one of online, offline, disabled or None"
    ]


def test_info_keywords_are_checked_before_start() -> None:
    """``--info_keywords`` (rl-zoo's Monitor ``info_keywords``): names separated by commas or spaces,
    not one of the keys Monitor writes itself, each once; a Godot game sends no infos."""
    assert Config(info_keywords="is_success, distance").info_keywords == ("is_success", "distance")
    assert Config(info_keywords=("r", "x", "t", "x")).problems() == [
        "info_keywords=r,t: sb3's Monitor writes r, l, t itself; choose other keys",
        "info_keywords=x: given more than once",
    ]
