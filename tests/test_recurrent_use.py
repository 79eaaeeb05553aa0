"""A recurrent model used outside training, against sb3-contrib 2.9.2: ``Model.predict`` with the LSTM states
(``RecurrentPPO.predict``), evaluation and ``enjoy`` carrying them, ``--export_sb3`` to a ``RecurrentPPO`` zip,
the ONNX graph with states in and out, and what a recurrent model file refuses."""
from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

from ppo_dict.algo.model import Model
from ppo_dict.algo.recurrent_policy import build_policy
from ppo_dict.core.config import Config
from tests.parity.sides import make_recurrent

#: (config, deterministic): actions sampled (torch seeded alike before each call) or the mode
PREDICT_CASES = {
    "discrete_3_envs_sampled": (Config(env="gym_CartPole-v1", model="mlp_lstm", lstm_hidden_size=16, n_envs=3, seed=0), False),
    "box_two_layers_shared": (Config(env="gym_Pendulum-v1", env_kwargs=dict(max_episode_steps=40), model="mlp_lstm", lstm_hidden_size=8,
                                     n_lstm_layers=2, shared_lstm=True, enable_critic_lstm=False, n_envs=2, seed=1), True),
    "multi_discrete": (Config(env="gym_PPODictToy-v0", gym_packages=("ppo_dict.envs.toy",), model="mlp_lstm", lstm_hidden_size=8,
                              env_kwargs=dict(observation="box", action="multi_discrete", episode_length=7), n_envs=2, seed=2), False),
    "dict": (Config(env="gym_PPODictMaskedJump-v0", gym_packages=("ppo_dict.envs.masked",), env_kwargs=dict(observation="dict"),
                    model="mlp_lstm", lstm_hidden_size=8, share_features_extractor=False, n_envs=3, seed=4), False),
    "cnn_image": (Config(env="test_dummy", env_kwargs=dict(image_size=36, channels=1, episode_length=6), model="cnn_lstm", lstm_hidden_size=8,
                         n_envs=2, seed=3), True),
}


def model_like(sb3_model, cfg: Config) -> Model:
    """ppo_dict's model holding the sb3-contrib policy's parameters (its state dict loads unchanged)."""
    venv = sb3_model.get_env()
    env = venv.envs[0]
    policy = build_policy(cfg, env.observation_space, env.action_space)
    policy.load_state_dict(sb3_model.policy.state_dict())
    return Model(cfg, policy.eval(), None, env.observation_space, env.action_space)


@pytest.mark.parametrize("name", list(PREDICT_CASES))
def test_predict_with_states_equals_recurrent_ppo_predict_over_episodes(name: str) -> None:
    """Every env through whole episodes (each env's episode starts where the last ended): the actions and the
    actor's (h, c) returned by ``Model.predict`` equal ``RecurrentPPO.predict``'s, with ``==``, step by step."""
    cfg, deterministic = PREDICT_CASES[name]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sb3 = make_recurrent(cfg)
    ours = model_like(sb3, cfg)
    venv = sb3.get_env()
    obs = venv.reset()
    state_sb3 = state_ours = None
    starts = np.ones(cfg.num_envs, dtype=bool)
    episodes_ended, moved = 0, 0.0
    for step in range(120):
        torch.manual_seed(step)
        actions, state_sb3 = sb3.predict(obs, state=state_sb3, episode_start=starts, deterministic=deterministic)
        torch.manual_seed(step)
        mine, state_ours = ours.predict(obs, state=state_ours, episode_start=starts, deterministic=deterministic)
        assert np.array_equal(actions, mine), f"step {step}: actions {actions} != {mine}"
        for a, b in zip(state_sb3, state_ours):
            assert a.dtype == b.dtype == np.float32 and a.shape == b.shape and np.array_equal(a, b), f"step {step}: states differ"
        moved = max(moved, float(np.abs(state_ours[0]).max()))
        obs, _, dones, _ = venv.step(actions)
        starts = dones
        episodes_ended += int(dones.sum())
    venv.close()
    assert episodes_ended >= cfg.num_envs and moved > 0.01  # resets mid-run, states that move


def test_predict_of_one_observation_and_its_defaults() -> None:
    """One observation (no batch dimension): one action and states ``[n_layers, 1, hidden]``; no state means
    zeros, no episode_start means none; a state of another shape is refused naming the expected one."""
    cfg = PREDICT_CASES["box_two_layers_shared"][0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sb3 = make_recurrent(cfg)
    ours = model_like(sb3, cfg)
    obs = np.array([0.5, -0.2, 0.1], dtype=np.float32)
    action, (h, c) = ours.predict(obs, deterministic=True)
    zeros = np.zeros((2, 1, 8), np.float32)
    assert action.shape == (1,) and h.shape == c.shape == (2, 1, 8)
    again, (h2, c2) = ours.predict(obs, state=(zeros, zeros), episode_start=np.array([False]), deterministic=True)
    assert np.array_equal(action, again) and np.array_equal(h, h2) and np.array_equal(c, c2)
    assert np.array_equal(action, sb3.predict(obs, deterministic=True)[0])
    restarted = ours.predict(obs, state=(h, c), episode_start=[True], deterministic=True)
    assert np.array_equal(restarted[1][0], h)  # an episode start zeroes the states first
    with pytest.raises(ValueError, match=r"expected \(h, c\), each \(n_lstm_layers=2, n_envs=1, lstm_hidden_size=8\)"):
        ours.predict(obs, state=(np.zeros((1, 1, 8)), np.zeros((1, 1, 8))))


def test_evaluation_carries_the_states_as_sb3s_evaluate_policy() -> None:
    """``run_episodes`` (periodic and final evaluation, ``enjoy``) on a recurrent model: the returns and lengths
    of sb3's ``evaluate_policy`` on ``RecurrentPPO`` (states carried, ``episode_start=done``), deterministic and
    sampled (the same torch seed), the states reset at each episode's start."""
    import gymnasium as gym
    from stable_baselines3.common.evaluation import evaluate_policy
    from stable_baselines3.common.vec_env import DummyVecEnv

    from ppo_dict.run.evaluation import run_episodes

    cfg = Config(env="gym_CartPole-v1", model="mlp_lstm", lstm_hidden_size=16, n_envs=1, n_steps=64, batch_size=64, n_epochs=2, seed=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sb3 = make_recurrent(cfg).learn(128)  # weights that act differently at different states
    ours = model_like(sb3, cfg)
    for deterministic in (True, False):
        venv = DummyVecEnv([lambda: gym.make("CartPole-v1")])
        venv.seed(7)
        torch.manual_seed(3)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # evaluate_policy: no Monitor, it sums the rewards itself (unrounded, as ours)
            returns, lengths = evaluate_policy(sb3, venv, n_eval_episodes=4, deterministic=deterministic, return_episode_rewards=True)
        venv.close()
        env = gym.make("CartPole-v1")
        torch.manual_seed(3)
        mine = run_episodes(ours, env, 4, seed=7, deterministic=deterministic)
        env.close()
        assert (returns, lengths) == mine and len(set(lengths)) > 1
    # without the states (each step a new episode) the episodes differ: the test can tell
    stateless = Model(cfg, ours.policy, None, ours.observation_space, ours.action_space)
    stateless.predict = lambda obs, state, start, deterministic, action_masks=None: Model.predict(ours, obs, None, None, deterministic)
    env = gym.make("CartPole-v1")
    assert run_episodes(stateless, env, 4, seed=7)[1] != mine[1]
    env.close()


def test_a_recurrent_run_evaluates_records_and_replays(tmp_path) -> None:
    """The command line: periodic evaluation with a video, the best model, then ``enjoy`` of it with a video."""
    import json
    import subprocess
    import sys

    from tests.conftest import ROOT
    from tests.test_main_ppo import run_cli, summary_line

    run_dir = tmp_path / "run"
    proc = run_cli("--env", "gym_CartPole-v1", "--model", "mlp_lstm", "--lstm_hidden_size", "16", "--num_workers", "0", "--n_envs", "2",
                   "--n_steps", "64", "--batch_size", "64", "--n_epochs", "1", "--total_timesteps", "256", "--seed", "0", "--verbose", "0",
                   "--run_dir", str(run_dir), "--eval_freq", "128", "--eval_episodes", "2", "--video", "--video_length", "10")
    assert proc.returncode == 0, proc.stderr
    assert (run_dir / "videos" / "eval-000000000256.mp4").is_file() and (run_dir / "best_model.pt").is_file()
    assert summary_line(proc.stdout)["metrics"]["eval/mean_ep_length"] > 0
    with np.load(run_dir / "evaluations.npz") as data:
        assert data["timesteps"].tolist() == [128, 256]
    enjoy = subprocess.run([sys.executable, "-m", "ppo_dict.enjoy", str(run_dir), "--episodes", "2", "--video"],
                           capture_output=True, text=True, timeout=120, cwd=ROOT, env={**__import__("os").environ, "PYTHONPATH": ROOT})
    assert enjoy.returncode == 0, enjoy.stderr
    result = json.loads(enjoy.stdout.strip().splitlines()[-1])
    assert len(result["lengths"]) == 2 and result["video"].endswith(".mp4")
