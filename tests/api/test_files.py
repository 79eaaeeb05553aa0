"""sb3's ``save``/``load``/``set_env``/``get_parameters``/``set_parameters`` on ppo_dict's model, and
ppo_dict's own files loaded through sb3's API.

* A zip sb3 wrote, loaded by ``ppo_dict.PPO.load`` and trained on, gives what sb3's ``load`` does.
* A model loaded without an env, then given one with ``set_env``, trains as sb3's does.
* ``get_parameters``/``set_parameters`` move weights and Adam's state both ways with sb3's model.
* A ppo_dict checkpoint loaded with an env continues as ``--resume`` does (``learn(n,
  reset_num_timesteps=False)`` and ``--total_timesteps`` n more): the same parameters and Adam state.
"""

from __future__ import annotations

import glob
import os
import subprocess
import sys
import warnings

import numpy as np
import pytest
import torch
from stable_baselines3 import PPO as SB3PPO
from stable_baselines3.common.env_util import make_vec_env

import ppo_dict
from ppo_dict.core.files import load_model_state
from tests.parity.sides import assert_same_value

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SETTINGS = dict(n_steps=32, batch_size=32, n_epochs=2, seed=4, verbose=0)


def state(model) -> tuple[dict, dict]:
    return {k: v.clone() for k, v in model.policy.state_dict().items()}, model.policy.optimizer.state_dict()["state"]


def sb3_zip(tmp_path) -> str:
    """A zip written by sb3 itself (gSDE on Pendulum: ``load`` draws a new exploration matrix)."""
    model = SB3PPO("MlpPolicy", make_vec_env("Pendulum-v1", n_envs=2, seed=1), use_sde=True, **SETTINGS)
    model.learn(64)
    path = os.path.join(tmp_path, "sb3_model.zip")
    model.save(path)
    return path


def test_an_sb3_zip_continues_as_after_sb3s_load(tmp_path) -> None:
    path = sb3_zip(tmp_path)
    results = []
    for load in (SB3PPO.load, ppo_dict.PPO.load):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model = load(path, env=make_vec_env("Pendulum-v1", n_envs=2, seed=2), n_epochs=3)
            assert model.n_epochs == 3 and model.num_timesteps == 64
            model.learn(64, reset_num_timesteps=False)
        results.append((state(model), model.num_timesteps, model._n_updates, torch.get_rng_state(), np.random.get_state()[1]))
        model.get_env().close()
    assert_same_value(results[0], results[1], "sb3's load + learn against ppo_dict's")


def test_a_model_loaded_without_env_predicts_and_trains_after_set_env(tmp_path) -> None:
    path = sb3_zip(tmp_path)
    obs = np.array([[0.5, -0.5, 0.1], [1.0, 0.0, -2.0]], dtype=np.float32)
    results = []
    for cls in (SB3PPO, ppo_dict.PPO):
        model = cls.load(path)
        assert model.get_env() is None
        actions = model.predict(obs, deterministic=True)[0]
        model.set_env(make_vec_env("Pendulum-v1", n_envs=2, seed=3))
        model.learn(64, reset_num_timesteps=False)
        results.append((actions, state(model), model.num_timesteps))
        model.get_env().close()
    assert_same_value(results[0], results[1], "predict, set_env, learn")


def test_parameters_move_both_ways_with_sb3s_model() -> None:
    sb3 = SB3PPO("MlpPolicy", "CartPole-v1", **SETTINGS)
    sb3.learn(64)
    ours = ppo_dict.PPO("MlpPolicy", "CartPole-v1", **{**SETTINGS, "seed": 9})
    ours.set_parameters(sb3.get_parameters())
    assert_same_value(state(sb3), state(ours), "sb3's parameters in ppo_dict's model")
    obs = np.random.default_rng(0).normal(size=(5, 4)).astype(np.float32)
    assert_same_value(sb3.predict(obs, deterministic=True), ours.predict(obs, deterministic=True), "predict")
    ours.learn(64)
    sb3.set_parameters(ours.get_parameters())
    assert_same_value(state(ours), state(sb3), "ppo_dict's parameters in sb3's model")
    ours.close()


def cli(*args: str) -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "ppo_dict.main_ppo",
            "--env",
            "gym_CartPole-v1",
            "--n_envs",
            "2",
            "--num_workers",
            "0",
            "--n_steps",
            "32",
            "--batch_size",
            "32",
            "--n_epochs",
            "2",
            "--seed",
            "5",
            "--update_threads",
            "1",
            "--verbose",
            "0",
            "--plot",
            "False",
            "--progress",
            "none",
            *args,
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr


@pytest.mark.slow  # two runs of the command line in subprocesses: 30-40 s on 2 cores
def test_a_ppo_dict_checkpoint_continues_as_resume_does(tmp_path) -> None:
    """A run trained with --normalize: the env given is in a VecNormalize, which takes its statistics."""
    from stable_baselines3.common.vec_env import VecNormalize

    run_dir = os.path.join(tmp_path, "run")
    cli(
        "--total_timesteps", "128", "--run_dir", run_dir, "--save_freq", "64", "--keep_checkpoints", "5", "--normalize", "True"
    )
    first = sorted(glob.glob(os.path.join(run_dir, "checkpoints", "checkpoint_*.pt")))[0]  # at 64 steps
    cli("--resume", first, "--total_timesteps", "192", "--run_dir", os.path.join(tmp_path, "resumed"))
    resumed = load_model_state(sorted(glob.glob(os.path.join(tmp_path, "resumed", "checkpoints", "checkpoint_*.pt")))[-1])
    env = VecNormalize(ppo_dict.make_vec_env("CartPole-v1", n_envs=2))
    model = ppo_dict.PPO.load(first, env=env)
    assert model.num_timesteps == 64 and env.obs_rms.count == load_model_state(first)["normalizer"]["obs_rms"]["obs"]["count"]
    model.learn(128, reset_num_timesteps=False)
    assert model.num_timesteps == resumed["num_timesteps"] == 192
    assert_same_value(resumed["policy"], model.policy.state_dict(), "parameters")
    assert_same_value(resumed["optimizer"]["state"], model.policy.optimizer.state_dict()["state"], "Adam's state")
    saved = resumed["normalizer"]["obs_rms"]["obs"]
    assert_same_value(
        (saved["mean"].numpy(), saved["var"].numpy(), float(saved["count"])),
        (env.obs_rms.mean, env.obs_rms.var, env.obs_rms.count),
        "the VecNormalize's statistics",
    )
    model.close()
