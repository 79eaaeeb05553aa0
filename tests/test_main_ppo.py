"""The command line, run as a user runs it: in a subprocess; the new code paths' runs call its entry point in this
process (tests/cli_here.py), as their claims are about what the run computes and writes."""

import json
import os
import signal
import subprocess
import sys
from typing import Optional

import numpy as np
import pytest
import torch

from tests.cli_here import run_here
from tests.conftest import ROOT

QUICK = ["--n_steps", "128", "--batch_size", "64", "--n_epochs", "2", "--total_timesteps", "512", "--seed", "0"]


def run_cli(
    *args: str, timeout: float = 180, python_flags: tuple = (), env_extra: Optional[dict] = None
) -> subprocess.CompletedProcess:
    env = {k: v for k, v in {**os.environ, "PYTHONPATH": ROOT, **(env_extra or {})}.items() if v is not None}  # None: unset
    return subprocess.run(
        [sys.executable, *python_flags, "-m", "ppo_dict.main_ppo", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
        env=env,
    )


def summary_line(stdout: str) -> dict:
    return json.loads(stdout.strip().splitlines()[-1])


def test_main_job_prints_tables_and_summary() -> None:
    proc = run_cli("--env", "gym_Reacher-v2", "--model", "mlp", "--num_workers", "0", "--n_envs", "2", *QUICK)
    assert proc.returncode == 0, proc.stderr
    assert "note: Reacher-v2 needs mujoco-py" in proc.stdout and "using Reacher-v5" in proc.stdout
    for key in ("rollout/", "ep_rew_mean", "fps", "train/", "explained_variance", "n_updates"):
        assert key in proc.stdout
    summary = summary_line(proc.stdout)
    assert summary["env_steps"] == 512 and summary["iterations"] == 2 and summary["interrupted"] is False
    assert summary["ep_rew_mean"] < 0 and summary["fps"] > 0
    # what ran, beside what was typed: config.json and monitor.csv name the gymnasium id gymnasium made
    run_dir = os.path.join(ROOT, summary["run_dir"])
    with open(os.path.join(run_dir, "config.json")) as f:
        config = json.load(f)
    assert (config["env"], config["env_id"]) == ("gym_Reacher-v2", "Reacher-v5")
    with open(os.path.join(run_dir, "monitor.csv")) as f:
        assert json.loads(f.readline()[1:])["env_id"] == "Reacher-v5" and f.readline() == "r,l,t\n"


def test_bad_config_lists_every_problem_and_exits_2() -> None:
    for flags in ((), ("-O",)):  # no asserts: works under python -O too
        proc = run_cli(
            "--n_epochs",
            "0",
            "--clip_range",
            "-0.2",
            "--gamma",
            "1.5",
            "--learning_rate",
            "-1",
            "--ent_coef",
            "nan",
            "--batch_size",
            "1",
            "--env",
            "gym_Hoper-v5",
            python_flags=flags,
        )
        assert proc.returncode == 2
        assert "7 invalid setting(s)" in proc.stderr, proc.stderr
        for name in ("n_epochs", "clip_range", "gamma", "learning_rate", "ent_coef", "batch_size", "Did you mean: `Hopper`?"):
            assert name in proc.stderr
        assert proc.stdout == ""  # nothing started


def test_unknown_flag_is_an_argparse_error() -> None:
    proc = run_cli("--bacth_size", "64")
    assert proc.returncode == 2 and "unrecognized arguments: --bacth_size" in proc.stderr


def test_save_and_export_sb3_load_with_equal_parameters(tmp_path) -> None:
    from stable_baselines3 import PPO as SB3PPO

    from ppo_dict.core.files import load_model_state

    zip_path, save_dir = tmp_path / "exported.zip", tmp_path / "model"
    proc = run_cli(
        "--env",
        "gym_CartPole-v1",
        "--num_workers",
        "0",
        "--n_envs",
        "2",
        *QUICK,
        "--save_path",
        str(save_dir),
        "--export_sb3",
        str(zip_path),
        "--normalize=True",
    )
    assert proc.returncode == 0, proc.stderr
    ours = load_model_state(str(save_dir))
    assert ours["num_timesteps"] == 512 and ours["config"]["normalize"] is True and ours["normalizer"] is not None
    sb3 = SB3PPO.load(str(zip_path), device="cpu")
    sb3_params = sb3.policy.state_dict()
    assert list(sb3_params) == list(ours["policy"])
    for key, value in ours["policy"].items():
        assert torch.equal(sb3_params[key], value), key
    assert sb3.num_timesteps == 512


@pytest.mark.parametrize("sig, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_signal_finishes_the_update_saves_and_exits(tmp_path, sig, code) -> None:
    env = {**os.environ, "PYTHONPATH": ROOT, "PYTHONUNBUFFERED": "1"}
    args = [
        sys.executable,
        "-m",
        "ppo_dict.main_ppo",
        "--env",
        "gym_CartPole-v1",
        "--num_workers",
        "0",
        "--n_steps",
        "256",
        "--total_timesteps",
        "10000000",
        "--seed",
        "0",
        "--save_path",
        str(tmp_path),
    ]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT, env=env)
    try:
        assert proc.stdout is not None
        for line in proc.stdout:  # wait until training is under way
            if "total_timesteps" in line:
                break
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=300)  # a guard: the update in progress finishes first, slow on a loaded host
    finally:
        proc.kill()
    assert proc.returncode == code, err
    assert err.count("received: saving the state from before the current rollout") == 1 and "Traceback" not in err
    assert summary_line(out)["interrupted"] is True
    assert (tmp_path / "model.pt").exists()


def test_runs_from_a_project_that_has_its_own_envs_package(tmp_path) -> None:
    """Many RL projects have a top-level ``envs`` package: ours (``ppo_dict.envs``) neither shadows it nor is
    shadowed by it, in this process and in the workers."""
    (tmp_path / "envs").mkdir()
    (tmp_path / "envs" / "__init__.py").write_text("OWNER = 'the user'\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # as a user runs it: the installed package
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "ppo_dict.main_ppo",
            "--env",
            "gym_CartPole-v1",
            "--n_envs",
            "4",
            "--num_workers",
            "2",
            *QUICK,
            "--verbose",
            "0",
            "--progress",
            "none",
            "--plot",
            "False",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode == 0, proc.stderr
    assert summary_line(proc.stdout)["env_steps"] == 512
    check = (
        "import envs, ppo_dict.envs; "
        "assert envs.OWNER == 'the user' and ppo_dict.envs.resolve_env_name('gym_CartPole-v1').gym_id"
    )
    subprocess.run([sys.executable, "-c", check], cwd=tmp_path, env=env, check=True, timeout=60)


TOY = ["--env", "gym_PPODictToy-v0", "--gym_packages", "ppo_dict.envs.toy"]
NEW_CODEPATHS = {
    # MultiDiscrete actions on a Dict of every observation leaf, two worker processes, evaluation, export, replay
    "multi_discrete": [
        *TOY,
        "--env_kwargs",
        "dict(observation='dict', action='multi_discrete')",
        "--n_envs",
        "2",
        "--num_workers",
        "2",
        "--eval_freq",
        "256",
        "--eval_episodes",
        "2",
    ],
    # MultiBinary actions on MultiBinary observations, spawn workers, normalised rewards
    "multi_binary": [
        *TOY,
        "--env_kwargs",
        "dict(observation='multi_binary', action='multi_binary')",
        "--n_envs",
        "2",
        "--num_workers",
        "2",
        "--mp_method",
        "spawn",
        "--normalize",
        "True",
        "--eval_freq",
        "256",
        "--eval_episodes",
        "2",
    ],
    # gSDE from rl-zoo's Pendulum-v1 entry (use_sde, sde_sample_freq 4), flags typed here win over the file
    "gsde_rl_zoo": [
        "--env",
        "gym_Pendulum-v1",
        "--hyperparams",
        "hyperparams/ppo.yml",
        "--n_envs",
        "2",
        "--num_workers",
        "0",
        "--eval_freq",
        "256",
        "--eval_episodes",
        "1",
    ],
}


@pytest.mark.parametrize("name", list(NEW_CODEPATHS))
def test_new_codepaths_train_evaluate_export_and_replay(tmp_path, name: str) -> None:
    """Each trains from the command line; the sb3 zip loads and predicts our deterministic actions; enjoy replays it."""
    from stable_baselines3 import PPO as SB3PPO

    from ppo_dict.algo.model import Model
    from ppo_dict.envs import make_env
    from ppo_dict.vec import env_spec

    run_dir, zip_path = tmp_path / "run", tmp_path / "exported.zip"
    proc = run_here(
        *NEW_CODEPATHS[name],
        *QUICK,
        "--run_dir",
        str(run_dir),
        "--save_path",
        str(tmp_path / "model"),
        "--export_sb3",
        str(zip_path),
        "--plot",
        "False",
    )
    assert proc.returncode == 0, proc.stderr
    assert summary_line(proc.stdout)["env_steps"] == 512 and "eval/mean_reward" in summary_line(proc.stdout)["metrics"]
    model = Model.from_file(str(tmp_path / "model"))
    cfg = model.cfg
    assert cfg.use_sde == (name == "gsde_rl_zoo") and (cfg.sde_sample_freq == 4) == (name == "gsde_rl_zoo")
    env = make_env(env_spec(cfg))
    sb3 = SB3PPO.load(str(zip_path), device="cpu")
    assert sb3.use_sde == cfg.use_sde
    obs, _ = env.reset(seed=0)
    for _ in range(20):
        ours, _ = model.predict(obs, deterministic=True)
        action, _ = sb3.predict(obs, deterministic=True)
        assert action.shape == ours.shape and np.array_equal(np.asarray(action, dtype=ours.dtype), ours)
        obs, *_ = env.step(action)
    env.close()
    enjoy = run_here(str(run_dir), "--episodes", "1", module="ppo_dict.enjoy")
    assert enjoy.returncode == 0, enjoy.stderr
