"""Evaluation: no effect on training (RNG streams untouched), eval logs, best model, videos, enjoy."""

import json
import os

import cv2
import numpy as np
import pytest
import torch

from ppo_dict.algo.ppo import PPO
from ppo_dict.core.config import Config
from ppo_dict.core.files import load_model_state
from ppo_dict.run.evaluation import Evaluator
from ppo_dict.vec import env_spec, probe_env
from ppo_dict.vec.in_process import InProcessEnvPool
from tests.conftest import ROOT
from tests.test_checkpoint import assert_same
from tests.cli_here import run_here
from tests.test_main_ppo import run_cli, summary_line
from tests.system_parts import needs

import subprocess
import sys


def train(cfg: Config, evaluator=None) -> PPO:
    model = PPO(cfg, InProcessEnvPool(probe_env(env_spec(cfg)), cfg.num_envs, cfg.n_steps))
    model.learn(after_update=None if evaluator is None else evaluator.evaluate)
    model.pool.close()
    return model


def test_evaluation_does_not_change_training(tmp_path) -> None:
    cfg = Config(
        env="gym_Reacher-v2",
        n_envs=2,
        num_workers=0,
        n_steps=64,
        batch_size=64,
        n_epochs=2,
        total_timesteps=512,
        seed=0,
        verbose=0,
        normalize=True,
        eval_freq=128,
        eval_episodes=2,
    )
    plain = train(cfg)
    plain_rng = (torch.get_rng_state(), np.random.get_state()[1].copy())
    evaluator = Evaluator(cfg, env_spec(cfg), str(tmp_path))
    evaluated = train(cfg, evaluator)  # evaluates after every update (4 times)
    evaluator.close()
    assert_same(evaluated.policy.state_dict(), plain.policy.state_dict())
    assert_same(evaluated.optimizer.state_dict(), plain.optimizer.state_dict())
    for key in ("mean", "var"):
        assert np.array_equal(evaluated.normalizer.obs_rms["obs"].__dict__[key], plain.normalizer.obs_rms["obs"].__dict__[key])
    assert torch.equal(torch.get_rng_state(), plain_rng[0]) and np.array_equal(np.random.get_state()[1], plain_rng[1])
    with np.load(tmp_path / "evaluations.npz") as data:
        assert data["timesteps"].tolist() == [128, 256, 384, 512]
        assert data["results"].shape == (4, 2) and data["ep_lengths"].tolist() == [[50, 50]] * 4  # Reacher: 50-step episodes
        best = max(data["results"].mean(axis=1))
    dumped = [d for d in evaluated.logger.history if "eval/mean_reward" in d]
    assert len(dumped) == 4 and dumped[-1]["eval/mean_ep_length"] == 50.0
    assert max(d["eval/mean_reward"] for d in dumped) == best
    assert load_model_state(str(tmp_path / "best_model.pt"))["format"] == "ppo_dict/1"


def count_frames(path: str) -> int:
    capture = cv2.VideoCapture(path)
    frames = 0
    while capture.read()[0]:
        frames += 1
    capture.release()
    return frames


@needs("gl")  # the video renders Reacher
def test_video_of_evaluations_and_enjoy(tmp_path) -> None:
    run_dir = tmp_path / "run"
    proc = run_here(
        "--env",
        "gym_Reacher-v2",
        "--num_workers",
        "0",
        "--n_envs",
        "2",
        "--n_steps",
        "128",
        "--batch_size",
        "64",
        "--n_epochs",
        "1",
        "--total_timesteps",
        "512",
        "--seed",
        "0",
        "--verbose",
        "0",
        "--run_dir",
        str(run_dir),
        "--eval_freq",
        "512",
        "--eval_episodes",
        "1",
        "--video",
        "--video_length",
        "20",
        "--plot",
        "False",
    )
    assert proc.returncode == 0, proc.stderr
    video = run_dir / "videos" / "eval-000000000512.mp4"
    assert count_frames(str(video)) == 20
    assert summary_line(proc.stdout)["metrics"]["eval/mean_ep_length"] == 50.0
    enjoy = run_here(str(run_dir), "--episodes", "2", "--video", module="ppo_dict.enjoy")
    assert enjoy.returncode == 0, enjoy.stderr
    result = json.loads(enjoy.stdout.strip().splitlines()[-1])
    assert result["model"] == str(run_dir / "best_model.pt") and result["lengths"] == [50, 50]
    assert count_frames(result["video"]) == 20  # --video_length from the run's config


def test_deterministic_episodes_on_channel_last_images_see_them_as_training_does() -> None:
    """The policy takes [C, H, W]; an env that gives [H, W, C] is transposed for it, in evaluation as in training."""
    from ppo_dict.algo.model import Model
    from ppo_dict.algo.networks.recurrent_policy import build_policy
    from ppo_dict.envs import make_env
    from ppo_dict.run.evaluation import run_episodes

    cfg = Config(env="test_dummy", model="cnn", env_kwargs=dict(image_size=36, channel_last=True, episode_length=5), seed=0)
    env = make_env(env_spec(cfg))
    policy = build_policy(cfg, env.observation_space, env.action_space)
    model = Model(cfg, policy, None, env.observation_space, env.action_space)
    returns, lengths = run_episodes(model, env, 2, 0)
    assert lengths == [5, 5]
    obs, _ = env.reset(seed=0)
    batch = {"obs": obs[None]}
    expected = policy(torch.as_tensor(np.moveaxis(obs, -1, 0)[None]), deterministic=True)[0].numpy()
    assert np.array_equal(model.predict_batch(batch), expected)
    assert np.array_equal(model.predict(obs, deterministic=True)[0], expected[0])  # one observation, as sb3's predict
    env.close()


def test_atari_evaluation_is_rl_zoos(tmp_path) -> None:
    """rl-zoo evaluates Atari with sb3's ``evaluate_policy`` on ``make_atari_env`` + ``VecFrameStack``,
    stochastically, scoring whole games with the Monitor's unclipped returns: ours gives the same
    numbers from the same policy weights and torch seed."""
    import ale_py  # noqa: F401  (registers the ids for sb3's gym.make)
    from stable_baselines3.common.env_util import make_atari_env
    from stable_baselines3.common.evaluation import evaluate_policy
    from stable_baselines3.common.vec_env import VecFrameStack

    from ppo_dict.envs import make_env
    from ppo_dict.run.evaluation import run_episodes
    from tests.parity.sides import make_ours, make_sb3

    kwargs = dict(max_num_frames_per_episode=1200)
    cfg = Config(
        env="gym_AsterixNoFrameskip-v4",
        atari_wrapper=True,
        frame_stack=4,
        model="cnn",
        n_envs=1,
        num_workers=0,
        seed=3,
        env_kwargs=kwargs,
        n_steps=8,
        batch_size=8,
        eval_freq=8,
        run_dir=str(tmp_path),
    )
    sb3, ours = make_sb3(cfg), make_ours(cfg)
    assert all(torch.equal(a, b) for a, b in zip(sb3.policy.state_dict().values(), ours.policy.state_dict().values()))
    evaluator = Evaluator(cfg, env_spec(cfg), str(tmp_path))
    assert evaluator.deterministic is False  # rl-zoo: ExperimentManager.deterministic_eval is False for Atari
    torch.manual_seed(11)
    returns, lengths = run_episodes(ours.model, make_env(env_spec(cfg)), 3, 5, deterministic=False)
    torch.manual_seed(11)
    eval_env = VecFrameStack(make_atari_env("AsterixNoFrameskip-v4", n_envs=1, seed=5, env_kwargs=kwargs), 4)
    expected = evaluate_policy(sb3, eval_env, n_eval_episodes=3, deterministic=False, return_episode_rewards=True)
    assert (returns, lengths) == expected
    assert min(lengths) > 300 and max(returns) >= 50  # whole games in emulator frames, unclipped scores
    evaluator.close()
    ours.close()


@pytest.mark.slow  # ~18 s on 2 shared cores: worker start, an evaluation of a whole game, enjoy
def test_atari_run_from_rl_zoo_file_evaluates_records_and_replays(tmp_path) -> None:
    """The issue's command with rl-zoo's atari entry, shortened: worker processes, an evaluation
    with a video of the real screen, then ``enjoy`` scoring whole games."""
    run_dir = tmp_path / "run"
    proc = run_cli(
        "--env",
        "gym_BreakoutNoFrameskip-v4",
        "--hyperparams",
        "hyperparams/ppo.yml",
        "--n_envs",
        "2",
        "--num_workers",
        "2",
        "--n_steps",
        "32",
        "--batch_size",
        "32",
        "--total_timesteps",
        "128",
        "--seed",
        "0",
        "--verbose",
        "0",
        "--env_kwargs",
        "dict(max_num_frames_per_episode=2000)",
        "--run_dir",
        str(run_dir),
        "--eval_freq",
        "128",
        "--eval_episodes",
        "1",
        "--video",
        "--video_length",
        "30",
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    metrics = summary_line(proc.stdout)["metrics"]
    assert metrics["eval/mean_ep_length"] > 100  # emulator frames of a whole game (5 lives)
    cap = cv2.VideoCapture(str(run_dir / "videos" / "eval-000000000128.mp4"))
    assert (cap.get(cv2.CAP_PROP_FRAME_COUNT), cap.get(cv2.CAP_PROP_FRAME_HEIGHT), cap.get(cv2.CAP_PROP_FRAME_WIDTH)) == (
        30,
        210,
        160,
    )
    cap.release()
    env = {**os.environ, "PYTHONPATH": ROOT}
    enjoy = subprocess.run(
        [sys.executable, "-m", "ppo_dict.enjoy", str(run_dir), "--episodes", "1"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env=env,
    )
    assert enjoy.returncode == 0, enjoy.stderr[-3000:]
    result = json.loads(enjoy.stdout.strip().splitlines()[-1])
    assert len(result["lengths"]) == 1 and result["lengths"][0] > 100


def test_eval_success_rate_is_sb3_eval_callbacks(tmp_path) -> None:
    """sb3's ``EvalCallback`` collects ``info["is_success"]`` at each episode end of ``evaluate_policy``,
    logs their mean as ``eval/success_rate`` and saves them as ``successes`` in ``evaluations.npz``:
    the same flags (values and types) from the same policy weights and torch seed."""
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.evaluation import evaluate_policy

    from ppo_dict.envs import make_env
    from ppo_dict.run.evaluation import run_episodes
    from tests.parity.sides import make_ours, make_sb3

    kwargs = dict(success_type="mixed", success_every_step=False)
    cfg = Config(
        env="gym_PPODictGoal-v0",
        gym_packages=("ppo_dict.envs.goal",),
        env_kwargs=kwargs,
        n_envs=1,
        num_workers=0,
        seed=3,
        n_steps=8,
        batch_size=8,
        eval_freq=8,
        eval_episodes=8,
    )
    sb3, ours = make_sb3(cfg), make_ours(cfg)
    torch.manual_seed(11)
    flags: list = []
    returns, lengths = run_episodes(ours.model, make_env(env_spec(cfg)), 8, 5, deterministic=False, successes=flags)
    torch.manual_seed(11)
    expected: list = []

    def collect(local: dict, _: dict) -> None:
        if local["done"] and "is_success" in local["info"]:
            expected.append(local["info"]["is_success"])

    sb3_returns, sb3_lengths = evaluate_policy(
        sb3,
        make_vec_env("PPODictGoal-v0", n_envs=1, seed=5, env_kwargs=kwargs),
        n_eval_episodes=8,
        deterministic=False,
        return_episode_rewards=True,
        callback=collect,
    )
    assert lengths == sb3_lengths and returns == pytest.approx(sb3_returns, abs=1e-6)  # sb3's Monitor rounds to 6 decimals
    assert flags == expected and [type(f) for f in flags] == [type(f) for f in expected] and len(set(map(type, flags))) > 1
    evaluator = Evaluator(cfg, env_spec(cfg), str(tmp_path))
    evaluator.evaluate(ours)
    evaluator.close()
    logged = [d for d in ours.logger.history if "eval/success_rate" in d]
    with np.load(tmp_path / "evaluations.npz") as data:
        assert (
            len(logged) == 1
            and logged[0]["eval/success_rate"] == np.mean(data["successes"][0])
            and data["successes"].shape == (1, 8)
        )
    ours.close()
