"""Masked recurrent PPO with every action valid, MultiDiscrete and MultiBinary actions: bit for bit sb3-contrib's
RecurrentPPO whose action distribution is its masked one for the space (``MaskableMultiCategoricalDistribution``,
``MaskableBernoulliDistribution``: n two-way categoricals, an action net of 2n outputs) given all-true masks, as
``tests/test_recurrent_masking.py`` shows for Discrete actions: every rollout (stored LSTM states included), log dump,
final parameter, Adam state and RNG state."""

from __future__ import annotations

import numpy as np
import pytest

from ppo_dict.core.config import Config
from tests.parity.sides import assert_same_record, run_ours
from tests.test_recurrent_masking import maskable_lstm_policy, reference_run, without_masks

BASE = dict(
    env="gym_PPODictMaskedJump-v0",
    gym_packages=("ppo_dict.envs.masked",),
    model="mlp_lstm",
    lstm_hidden_size=16,
    n_epochs=2,
    num_workers=0,
    action_masks=True,
    n_envs=3,
    n_steps=16,
    batch_size=40,
    total_timesteps=2 * 48,
)
#: the game's rules with masks allowing everything; episodes cut at 6 steps (sequences that start mid-minibatch), 96 % 40 = 16
CONFIGS = {
    "multi_discrete": Config(
        **BASE, env_kwargs=dict(action="multi_discrete", size=4, reach=1, episode_length=6, all_valid=True), seed=1
    ),
    "multi_binary": Config(
        **BASE, env_kwargs=dict(action="multi_binary", size=5, reach=2, episode_length=6, all_valid=True), seed=2
    ),
}


@pytest.mark.parametrize("name", list(CONFIGS))
def test_all_valid_equals_recurrent_ppo_with_maskable_distribution(name: str) -> None:
    cfg = CONFIGS[name]
    ours = run_ours(cfg)
    first = ours.rollouts[0]
    assert first["action_masks"].shape[-1] == (8 if name == "multi_discrete" else 10)  # sum(nvec); 2n for MultiBinary(n)
    assert (
        first["episode_starts"][1:].any()
        and len(np.unique(first["actions"].reshape(-1, first["actions"].shape[-1]), axis=0)) > 3
    )
    assert_same_record(reference_run(cfg, maskable_lstm_policy()), without_masks(ours))
