"""Masked evaluation of a masked recurrent model (``ppo_dict.api``'s ``evaluate_policy`` and ``MaskableEvalCallback``,
the command line's ``run_episodes``): the states and the masks carried together, the episodes of a hand-written loop
of ``predict(obs, state, episode_start, action_masks=...)``; sb3-contrib 2.9.2's masked ``evaluate_policy`` drops the
states."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from stable_baselines3.common.vec_env import DummyVecEnv

import ppo_dict.envs.key_door  # noqa: F401  (registers PPODictKeyDoor-v0)
from ppo_dict.api import MaskableEvalCallback, MaskableRecurrentPPO, evaluate_policy
from ppo_dict.envs.key_door import KeyDoorEnv
from ppo_dict.run.evaluation import run_episodes

EPISODES, SEED = 6, 7


def hand_loop(model, stateful: bool = True) -> tuple[list, list]:
    """``(rewards of each episode, lengths)``: ``predict`` with each step's masks, the states carried (``stateful``) or None;
    actions sampled (torch's RNG seeded first, as before each evaluation below: the same draws in the same order)."""
    torch.manual_seed(SEED)
    env = KeyDoorEnv()
    obs, _ = env.reset(seed=SEED)
    state, start, rewards, episodes = None, np.ones(1, dtype=bool), [], []
    while len(episodes) < EPISODES:
        action, new_state = model.predict(obs[None], state, start, deterministic=False, action_masks=env.action_masks()[None])
        state = new_state if stateful else None
        obs, reward, terminated, truncated, _ = env.step(int(action[0]))
        rewards.append(reward)
        start = np.array([terminated or truncated])
        if terminated or truncated:
            episodes.append(rewards)
            rewards = []
            obs, _ = env.reset()
    return episodes, [len(e) for e in episodes]


def sum_like_vec_env(rewards: list) -> float:
    """What sb3-contrib's loop sums: the vec env's float32 rewards into a float64 array."""
    total = np.zeros(1)
    for r in rewards:
        total += np.array([r], dtype=np.float32)
    return float(total[0])


def eval_env() -> DummyVecEnv:
    env = DummyVecEnv([KeyDoorEnv])
    env.seed(SEED)
    return env


@pytest.fixture(scope="module")
def model():
    """A masked LSTM barely trained on the walled room (the masks vary from step to step), its actions made decisive (the
    action net's weights x100: sb3's init gives logits near 0, where a change of states seldom changes a sampled action)."""
    m = MaskableRecurrentPPO(
        "MlpLstmPolicy",
        "PPODictKeyDoor-v0",
        n_envs=2,
        gym_packages=("ppo_dict.envs.key_door",),
        num_workers=0,
        n_steps=16,
        batch_size=32,
        n_epochs=1,
        seed=0,
        policy_kwargs=dict(lstm_hidden_size=16),
    ).learn(32)
    with torch.no_grad():
        m.policy.action_net.weight.mul_(100.0)
    yield m
    m.close()


def test_evaluation_with_states_gives_a_hand_written_loop_s_episodes(model, tmp_path) -> None:
    from sb3_contrib.common.maskable.evaluation import evaluate_policy as contrib_evaluate_policy

    episodes, lengths = hand_loop(model)
    expected = [sum_like_vec_env(e) for e in episodes]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # no Monitor: rewards summed as stepped, as the hand loop does
        torch.manual_seed(SEED)
        assert evaluate_policy(model, eval_env(), EPISODES, deterministic=False, return_episode_rewards=True) == (
            expected,
            lengths,
        )
        callback = MaskableEvalCallback(
            eval_env(), n_eval_episodes=EPISODES, eval_freq=1, log_path=str(tmp_path), deterministic=False
        )
        callback.init_callback(model)
        torch.manual_seed(SEED)
        callback.on_step()
        assert (callback.evaluations_results[-1], callback.evaluations_length[-1]) == (expected, lengths)
        assert callback.model is model
        # the command line's evaluation (--eval_freq, enjoy): python floats summed, the same episodes
        torch.manual_seed(SEED)
        returns, run_lengths = run_episodes(model.trainer.model, KeyDoorEnv(), EPISODES, SEED, deterministic=False)
        assert run_lengths == lengths and returns == [sum(e) for e in episodes]
        # what this fixes: sb3-contrib's masked loop passes state=None at every step, a loop without memory
        stateless = hand_loop(model, stateful=False)
        assert stateless != (episodes, lengths), "the states change nothing here: the comparison would not tell them apart"
        torch.manual_seed(SEED)
        theirs = contrib_evaluate_policy(model, eval_env(), EPISODES, deterministic=False, return_episode_rewards=True)
        assert theirs == ([sum_like_vec_env(e) for e in stateless[0]], stateless[1])
