"""Learning curves: several runs drawn as their mean and spread."""

import json

import numpy as np

from ppo_dict.plot import main as plot_main, mean_and_spread
from ppo_dict.run.tracking import CSVWriter


def test_plot_several_runs_mean_and_spread(tmp_path) -> None:
    grid, mean, std = mean_and_spread(
        [(np.array([0, 10]), np.array([0.0, 10.0])), (np.array([0, 10]), np.array([2.0, 12.0]))], points=3
    )
    assert grid.tolist() == [0.0, 5.0, 10.0] and mean.tolist() == [1.0, 6.0, 11.0] and std.tolist() == [1.0, 1.0, 1.0]
    for seed in (0, 1):
        run = tmp_path / f"run{seed}"
        run.mkdir()
        writer = CSVWriter(str(run / "progress.csv"))
        for step in (100, 200, 300):
            writer({"rollout/ep_rew_mean": float(step + seed)}, step)
        (run / "config.json").write_text(json.dumps({"env": "gym_CartPole-v1"}))
    out = tmp_path / "curves.png"
    assert plot_main([str(tmp_path / "run0"), str(tmp_path / "run1"), "--out", str(out)]) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert plot_main([str(tmp_path / "missing")]) == 2


def test_episode_statistics_get_a_panel_of_their_own(tmp_path) -> None:
    """``rollout/success_rate`` and the ``--info_keywords`` means are drawn below the return, where logged."""
    import struct

    from ppo_dict.plot import episode_keys, plot_run

    run = tmp_path / "run"
    run.mkdir()
    writer = CSVWriter(str(run / "progress.csv"))
    for step in (100, 200, 300):
        writer(
            {"rollout/ep_rew_mean": float(step), "rollout/success_rate": step / 400, "rollout/distance": 3.0 - step / 200},
            step,
        )
    (run / "config.json").write_text(json.dumps({"env": "gym_PPODictGoal-v0", "info_keywords": ["distance", "not_logged"]}))
    assert episode_keys([str(run)]) == ["rollout/success_rate", "rollout/distance"]
    height = struct.unpack(">I", open(plot_run(str(run)), "rb").read()[20:24])[0]
    assert height == 750  # two panels (one is 450 pixels high)
    (run / "config.json").write_text(json.dumps({"env": "gym_PPODictGoal-v0"}))
    assert episode_keys([str(run)]) == ["rollout/success_rate"]


def hostile_run(tmp_path, name: str, progress: str, config: str):
    run = tmp_path / name
    run.mkdir()
    (run / "progress.csv").write_text(progress)
    (run / "config.json").write_text(config)
    return run


GOOD_PROGRESS = "step,rollout/ep_rew_mean\n100,1.0\n200,2.0\n"


def test_a_hostile_progress_csv_is_one_message_and_a_hostile_config_json_is_left_out(tmp_path, capsys) -> None:
    """Extra cells, a step of 1e30, info_keywords: 5 and a config.json nested 100,000 deep ended in tracebacks."""
    for name, progress, said in (
        ("extra", GOOD_PROGRESS + "300,3.0,4.0,5.0\n", "line 4 has 4 cells, its header 2"),
        ("huge", GOOD_PROGRESS + "1e30,3.0\n", "line 4: the step '1e30' is not a whole number of steps"),
        ("text", GOOD_PROGRESS + "300,high\n", "line 4: rollout/ep_rew_mean is 'high', not a number"),
    ):
        run = hostile_run(tmp_path, name, progress, "{}")
        assert plot_main([str(run), "--out", str(tmp_path / f"{name}.png")]) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: ") and said in err and "Traceback" not in err, err
        assert not (tmp_path / f"{name}.png").exists()
    for name, config in (
        ("keywords", json.dumps({"env": "E-v0", "info_keywords": 5})),
        ("deep", "[" * 100_000 + "]" * 100_000),
        ("env", json.dumps({"env": {"a": 1}})),
    ):
        run = hostile_run(tmp_path, name, GOOD_PROGRESS, config)
        assert plot_main([str(run), "--out", str(tmp_path / f"{name}.png")]) == 0, capsys.readouterr().err
    from ppo_dict.plot import run_config

    assert run_config(str(tmp_path / "keywords")) == {"env": "E-v0"} and run_config(str(tmp_path / "deep")) == {}
