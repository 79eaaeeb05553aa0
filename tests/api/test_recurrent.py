"""RecurrentPPO: sb3-contrib's scripts with the import changed give its numbers, bit for bit; its
arguments are the command line's recurrent config; what ppo_dict cannot do yet is refused by name.

The scripts (``tests/api/recurrent_scripts.py``) run under sb3-contrib's import and ppo_dict's, and
are compared as ``tests/api/test_scripts.py`` compares PPO's: every step the callbacks saw (with the
LSTM states after each step's forward), every rollout buffer (with its stored states), every log
dump, the parameters and Adam's state.
"""
from __future__ import annotations

import inspect
import multiprocessing
import os

import pytest
from sb3_contrib import RecurrentPPO as ContribRecurrentPPO
from stable_baselines3.common.evaluation import evaluate_policy

import ppo_dict
from ppo_dict.api.algorithms import ALGORITHMS
from ppo_dict.core.errors import ConfigError
from tests.api.recurrent_scripts import RECURRENT_SCRIPTS
from tests.api.scripts import run
from tests.api.test_scripts import assert_same_run


def assert_exercised(name: str, record) -> None:
    """What a script is for happened (else its comparison could not fail where it matters)."""
    if name == "lstm_stop_continue":  # stopped in the middle of its second rollout, then continued
        assert record.results["stopped_at"] == 45 and len(record.rollouts) == 3
    if name == "lstm_time_limits":  # episodes cut by the time limit: bootstrapped from each env's critic states
        assert any(info.get("TimeLimit.truncated") for step in record.steps for info in step[10])
    states = [event for event in record.events if event[0] == "states"]
    assert len(states) == len(record.steps) and any(bool(event[2][0].abs().sum() > 0) for event in states)


@pytest.mark.parametrize("name", list(RECURRENT_SCRIPTS))
def test_recurrent_script_with_the_import_changed_gives_sb3_contribs_numbers(name: str, tmp_path) -> None:
    contrib = run(name, "sb3", os.path.join(tmp_path, "sb3"), RECURRENT_SCRIPTS)
    ours = run(name, "ppo_dict", os.path.join(tmp_path, "ours"), RECURRENT_SCRIPTS)
    assert_exercised(name, ours)
    assert_same_run(contrib, ours)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["lstm_time_limits", "lstm_multi_input"])
def test_recurrent_script_with_ppo_dict_make_vec_env_gives_sb3_contribs_numbers(name: str, tmp_path) -> None:
    """The faster form: ppo_dict's make_vec_env, the envs in the trainer's worker pool."""
    contrib = run(name, "sb3", os.path.join(tmp_path, "sb3"), RECURRENT_SCRIPTS)
    ours = run(name, "ppo_dict_envs", os.path.join(tmp_path, "ours"), RECURRENT_SCRIPTS)
    assert_same_run(contrib, ours)


def test_the_signature_and_defaults_are_sb3_contribs_and_the_config_the_command_lines() -> None:
    ours = list(ALGORITHMS["RecurrentPPO"].signature().parameters.values())
    contrib = list(inspect.signature(ContribRecurrentPPO.__init__).parameters.values())[1:]
    assert ours[: len(contrib)] == contrib
    model = ppo_dict.RecurrentPPO("MlpLstmPolicy", "CartPole-v1", policy_kwargs=dict(lstm_hidden_size=32, n_lstm_layers=2,
                                  shared_lstm=True, enable_critic_lstm=False), _init_setup_model=False)
    cfg = model.cfg
    assert (cfg.model, cfg.n_steps, cfg.batch_size, cfg.n_envs) == ("mlp_lstm", 128, 128, 1)
    assert cfg.lstm_settings == dict(lstm_hidden_size=32, n_lstm_layers=2, shared_lstm=True, enable_critic_lstm=False)
    dict_env = ppo_dict.RecurrentPPO("MultiInputLstmPolicy", "PPODictMaskedJump-v0", env_kwargs=dict(observation="dict"),
                                     gym_packages=("ppo_dict.envs.masked",), _init_setup_model=False)
    assert dict_env.cfg.model == "mlp_lstm" and dict_env.cfg.lstm_settings["lstm_hidden_size"] == 256


def test_what_recurrent_models_cannot_do_yet_is_refused_by_name(tmp_path) -> None:
    with ppo_dict.RecurrentPPO("MlpLstmPolicy", "CartPole-v1", n_steps=16, batch_size=16, n_epochs=1, seed=0,
                               policy_kwargs=dict(lstm_hidden_size=8)) as model:
        model.learn(16)
        obs = model.get_env().reset()
        for call in (lambda: model.predict(obs), lambda: evaluate_policy(model, model.get_env(), n_eval_episodes=1)):
            with pytest.raises(NotImplementedError, match=r"RecurrentPPO.predict is not available yet: .*LSTM states carried"):
                call()
        with pytest.raises(NotImplementedError, match=r"RecurrentPPO.save is not available yet: .*--export_sb3"):
            model.save(os.path.join(tmp_path, "model"))
        assert not os.listdir(tmp_path)
        assert set(model.get_parameters()["policy"]) >= {"lstm_actor.weight_ih_l0", "lstm_critic.weight_hh_l0"}  # contrib's names
    with pytest.raises(NotImplementedError, match=r"RecurrentPPO.load is not available yet: .*--trained_agent and --resume"):
        ppo_dict.RecurrentPPO.load(os.path.join(tmp_path, "model"))


def test_bad_recurrent_arguments_are_refused_together_before_any_process_starts() -> None:
    from stable_baselines3.common.torch_layers import NatureCNN

    with pytest.raises(ConfigError) as raised:
        ppo_dict.RecurrentPPO("MlpLstmPolicy", "CartPole-v1", n_envs=2, num_workers=2, n_epochs=0,
                              policy_kwargs=dict(shared_lstm=True, lstm_kwargs=dict(dropout=0.1), features_extractor_class=NatureCNN))
    problems = raised.value.problems
    for start in ("policy_kwargs lstm_kwargs=", "policy_kwargs features_extractor_class=", "n_epochs=0", "shared_lstm=True: the critic either"):
        assert any(p.startswith(start) for p in problems), (start, problems)
    assert multiprocessing.active_children() == []
    with pytest.raises(ConfigError, match=r"policy_kwargs lstm_hidden_size=64: not supported \(PPO's policies take no such argument\)"):
        ppo_dict.PPO("MlpPolicy", "CartPole-v1", policy_kwargs=dict(lstm_hidden_size=64))
    with pytest.raises(ConfigError, match="You must use `MultiInputLstmPolicy` when working with dict observation space, not MlpLstmPolicy"):
        ppo_dict.RecurrentPPO("MlpLstmPolicy", "PPODictMaskedJump-v0", env_kwargs=dict(observation="dict"), gym_packages=("ppo_dict.envs.masked",))
    with pytest.raises(ConfigError, match=r"policy='CnnLstmPolicy': the observation holds no image; use MlpLstmPolicy"):
        ppo_dict.RecurrentPPO("CnnLstmPolicy", "CartPole-v1")
    with pytest.raises(ConfigError, match=r"policy='MlpPolicy': Policy MlpPolicy unknown \(MlpLstmPolicy, CnnLstmPolicy, MultiInputLstmPolicy\)"):
        ppo_dict.RecurrentPPO("MlpPolicy", "CartPole-v1")
    assert multiprocessing.active_children() == []
