"""The command line generated from Config: spellings of booleans and of what a wandb agent sends, bad flags."""
import pytest

from ppo_dict.core.parse import make_schedule
from ppo_dict.run.cli import config_from_args


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


def test_the_command_line_is_parsed_once_on_the_way_to_training(monkeypatch, capsys, tmp_path) -> None:
    """main reads --resume, --trained_agent and the config from one parse (a bad value refused after it)."""
    import argparse

    from ppo_dict import main_ppo

    parses = []
    parse_args = argparse.ArgumentParser.parse_args
    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", lambda self, *a, **k: parses.append(1) or parse_args(self, *a, **k))
    assert main_ppo.main(["--env", "gym_CartPole-v1", "--n_steps", "0", "--run_dir", str(tmp_path / "run")]) == 2
    assert "n_steps" in capsys.readouterr().err
    assert len(parses) == 1
    assert config_from_args(["--n_steps", "7", "--gym_packages", "a", "b"]).gym_packages == ("a", "b")  # the one parse keeps list flags
