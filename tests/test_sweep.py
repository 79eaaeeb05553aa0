"""wandb sweeps: the agent's command line (built by wandb's own code) is accepted; local grid/random/bayes runs."""
import json
import os

import yaml

from ppo_dict.checks import validate
from ppo_dict.cli import config_from_args
from ppo_dict.sweep import agent_command, main as sweep_main
from tests.conftest import ROOT


def test_agent_command_from_the_sweep_file_is_what_the_cli_accepts() -> None:
    with open(os.path.join(ROOT, "sweeps", "reacher.yaml")) as f:
        sweep = yaml.safe_load(f)
    params = {"env": "gym_Reacher-v2", "learning_rate": 0.0003, "normalize": True, "net_arch": [256, 256], "target_kl": None, "n_steps": 512}
    argv = agent_command(sweep, params)
    assert argv[2:4] == ["-m", "ppo_dict.main_ppo"]
    assert argv[4:] == ["--env=gym_Reacher-v2", "--learning_rate=0.0003", "--normalize=True", "--net_arch=[256, 256]",
                        "--target_kl=None", "--n_steps=512"]
    cfg = config_from_args(argv[4:])
    validate(cfg)
    assert (cfg.learning_rate, cfg.normalize, cfg.net_arch, cfg.target_kl, cfg.n_steps) == (0.0003, True, [256, 256], None, 512)
    assert sweep["metric"] == {"name": "rollout/ep_rew_mean", "goal": "maximize"}


def write_sweep(tmp_path, method: str) -> str:
    sweep = {
        "method": method,
        "metric": {"name": "rollout/ep_rew_mean", "goal": "maximize"},
        "command": ["${env}", "${interpreter}", "-m", "ppo_dict.main_ppo", "${args}"],
        "parameters": {
            "env": {"value": "gym_CartPole-v1"},
            "learning_rate": {"values": [0.001, 0.0003]} if method == "grid" else {"distribution": "log_uniform_values", "min": 1e-4, "max": 1e-2},
            "normalize": {"values": [True, False]},
        },
    }
    path = tmp_path / f"{method}.yaml"
    path.write_text(yaml.safe_dump(sweep))
    return str(path)


TINY = ["--", "--num_workers", "0", "--n_envs", "2", "--n_steps", "128", "--batch_size", "64", "--n_epochs", "1",
        "--total_timesteps", "256", "--seed", "0", "--verbose", "0", "--plot", "False"]


def test_local_sweep_grid_random_and_bayes(tmp_path, capsys) -> None:
    for method, count in (("grid", 2), ("random", 2), ("bayes", 2)):
        out = tmp_path / method
        assert sweep_main([write_sweep(tmp_path, method), "--count", str(count), "--out", str(out), *TINY]) == 0
        printed = capsys.readouterr().out
        results = json.loads((out / "results.json").read_text())
        assert len(results["trials"]) == count and all(t["status"].startswith("ok") for t in results["trials"])
        for trial in results["trials"]:
            summary_value = trial["value"]
            assert isinstance(summary_value, float) and summary_value > 0  # CartPole returns are positive
            assert os.path.isfile(out / f"trial_{trial['trial']:03d}" / "progress.csv")
        best = max(results["trials"], key=lambda t: t["value"])
        assert results["best"]["trial"] == best["trial"]
        header = next(line for line in printed.splitlines() if line.startswith("trial  "))
        assert header.split() == ["trial", "env", "learning_rate", "normalize", "rollout/ep_rew_mean", "status"]
        assert json.loads(printed.strip().splitlines()[-1])["best_params"] == best["params"]
        if method == "grid":
            assert [t["params"] for t in results["trials"]] == [
                {"env": "gym_CartPole-v1", "learning_rate": 0.001, "normalize": True},
                {"env": "gym_CartPole-v1", "learning_rate": 0.001, "normalize": False},
            ]
        else:
            assert all(1e-4 <= t["params"]["learning_rate"] <= 1e-2 for t in results["trials"])


def test_bad_sweep_file_lists_every_problem(tmp_path, capsys) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump({"method": "grid", "metric": {"goal": "up"}, "command": ["python"],
                                    "parameters": {"lr": {"distribution": "uniform", "min": 0, "max": 1}}}))
    assert sweep_main([str(path), "--count", "1", "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "metric: needs a name and goal: minimize | maximize" in err
    assert "command: must be a list that contains ${args}" in err
    assert "parameter 'lr': grid search needs values, not a uniform distribution" in err
