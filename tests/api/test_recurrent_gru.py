"""GRU cells in the Python API: ``RecurrentPPO`` and ``MaskableRecurrentPPO`` with ``policy_kwargs=dict(rnn_type="gru")``
(the command line's ``--rnn_type gru``; no sb3-contrib class has it). ``learn`` is the command line's GRU run of the same
config, bit for bit; ``predict`` carries the GRU's one state per layer; ``save`` writes ppo_dict's checkpoint (no
sb3-contrib class reads a GRU), which ``load`` reads back; a value other than lstm or gru is one message."""

from __future__ import annotations

import multiprocessing

import numpy as np
import pytest
from torch import nn

import ppo_dict
from ppo_dict.api.files import is_sb3_zip
from ppo_dict.core.errors import CheckpointError, ConfigError
from tests.parity.sides import assert_same_value, run_ours

KEY_DOOR = dict(
    n_envs=2, gym_packages=("ppo_dict.envs.key_door",), num_workers=0, n_steps=16, batch_size=24, n_epochs=2, seed=0
)
GRU = dict(lstm_hidden_size=16, rnn_type="gru")
CLASSES = [ppo_dict.RecurrentPPO, ppo_dict.MaskableRecurrentPPO]


def gru_model(cls: type, steps: int, callback=None):
    return cls("MlpLstmPolicy", "PPODictKeyDoor-v0", policy_kwargs=GRU, **KEY_DOOR).learn(steps, callback=callback)


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_a_gru_learns_as_the_command_line_s_gru_run(cls: type) -> None:
    """Parameters and Adam's state after ``learn`` equal the trainer's run of the same config (``--rnn_type gru``), ``==``;
    callbacks see sb3-contrib's ``lstm_states`` with one state per layer; the rollout buffer holds the hidden states only."""
    seen = []
    model = gru_model(cls, 64, callback=lambda local, _: seen.append(local["lstm_states"]) or True)
    try:
        assert isinstance(model.policy.lstm_actor, nn.GRU) and model.cfg.rnn_type == "gru"
        assert model.cfg.action_masks == (cls is ppo_dict.MaskableRecurrentPPO)
        reference = run_ours(model.cfg.replace(total_timesteps=64))
        assert_same_value(reference.params, model.policy.state_dict(), "parameters")
        assert_same_value(reference.optimizer["state"], model.policy.optimizer.state_dict()["state"], "Adam's state")
        assert len(seen) == 64 // 2 and all(len(s.pi) == len(s.vf) == 1 and s.pi[0].shape == (1, 2, 16) for s in seen)
        assert model.rollout_buffer.hidden_states_pi.shape == (32, 1, 16)
        with pytest.raises(AttributeError, match="cell_states_pi"):
            model.rollout_buffer.cell_states_pi
    finally:
        model.close()


def rollout(model, env, steps: int = 12) -> list:
    """``(actions, states)`` of deterministic ``predict`` calls on ``env`` (reset with seed 5), the states carried,
    episode starts as stepped."""
    env.seed(5)
    obs, state, starts, out = env.reset(), None, np.ones(env.num_envs, dtype=bool), []
    for _ in range(steps):
        masks = {"action_masks": np.stack(env.env_method("action_masks"))} if model.cfg.action_masks else {}
        actions, state = model.predict(obs, state, starts, deterministic=True, **masks)
        out.append((actions.copy(), tuple(s.copy() for s in state)))
        obs, _, starts, _ = env.step(actions)
    return out


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_gru_predict_save_and_load(cls: type, tmp_path) -> None:
    """``predict`` returns the GRU's ``(h,)``, zeroed where an episode starts; ``save`` writes ppo_dict's checkpoint (not an
    sb3 zip), which ``load`` (with the env, or without it) reads back: equal parameters, the same actions and states."""
    model = gru_model(cls, 32)
    env = model.get_env()
    try:
        obs = env.reset()
        actions, state = model.predict(obs, None, np.ones(2, dtype=bool))
        assert len(state) == 1 and state[0].shape == (1, 2, 16) and np.abs(state[0]).sum() > 0
        again = model.predict(obs, state, np.zeros(2, dtype=bool), deterministic=True)[1][0]
        assert not np.array_equal(again, state[0])  # carried: the step from these states is not the step from zeros
        restarted = model.predict(obs, state, np.ones(2, dtype=bool), deterministic=True)[1][0]
        assert np.array_equal(restarted, model.predict(obs, None, np.ones(2, dtype=bool), deterministic=True)[1][0])
        model.save(tmp_path / "gru")
        path = tmp_path / "gru.zip"
        assert path.exists() and not is_sb3_zip(str(path))
        expected = rollout(model, env)
        for loaded in (cls.load(path, env=env), cls.load(path)):
            assert loaded.cfg.rnn_type == "gru" and isinstance(loaded.policy.lstm_actor, nn.GRU)
            assert_same_value(model.policy.state_dict(), loaded.policy.state_dict(), "loaded parameters")
            assert_same_value(expected, rollout(loaded, env), "actions and states after load")
        other = ppo_dict.RecurrentPPO if cls is ppo_dict.MaskableRecurrentPPO else ppo_dict.MaskableRecurrentPPO
        with pytest.raises(CheckpointError, match=f"{other.__name__}.load"):
            other.load(path, env=env)
    finally:
        model.close()


def test_an_lstm_named_so_is_sb3_contribs(tmp_path) -> None:
    """``rnn_type="lstm"`` is the default LSTM: its ``save`` is sb3-contrib's zip, which sb3-contrib's
    ``RecurrentPPO.load`` opens."""
    from sb3_contrib import RecurrentPPO as ContribRecurrentPPO

    model = ppo_dict.RecurrentPPO(
        "MlpLstmPolicy", "PPODictKeyDoor-v0", policy_kwargs=dict(lstm_hidden_size=16, rnn_type="lstm"), **KEY_DOOR
    )
    try:
        assert isinstance(model.policy.lstm_actor, nn.LSTM)
        model.save(tmp_path / "lstm")
        theirs = ContribRecurrentPPO.load(tmp_path / "lstm.zip", device="cpu")
        assert_same_value(model.policy.state_dict(), theirs.policy.state_dict(), "sb3-contrib's loaded parameters")
    finally:
        model.close()


def test_an_unknown_cell_is_one_message_before_anything_starts() -> None:
    for cls in CLASSES:
        with pytest.raises(ConfigError) as raised:
            cls("MlpLstmPolicy", "CartPole-v1", policy_kwargs=dict(rnn_type="rnn"))
        assert raised.value.problems == [
            "policy_kwargs rnn_type='rnn': the recurrent cell, one of 'lstm', 'gru' ('lstm': "
            "sb3-contrib's LSTM; 'gru': torch's nn.GRU in its place, one state per layer)"
        ]
    with pytest.raises(
        ConfigError, match=r"policy_kwargs rnn_type='gru': not supported \(PPO's policies take no such argument\)"
    ):
        ppo_dict.PPO("MlpPolicy", "CartPole-v1", policy_kwargs=dict(rnn_type="gru"))
    assert multiprocessing.active_children() == []
