"""RecurrentPPO: sb3-contrib's scripts with the import changed give its numbers, bit for bit (training,
``predict`` with states, ``evaluate_policy`` and ``EvalCallback``, ``save`` and ``load``); its arguments are
the command line's recurrent config; a ppo_dict recurrent checkpoint continues as ``--resume`` does.

The scripts (``tests/api/recurrent_scripts.py``) run under sb3-contrib's import and ppo_dict's, and
are compared as ``tests/api/test_scripts.py`` compares PPO's: every step the callbacks saw (with the
LSTM states after each step's forward), every rollout buffer (with its stored states), every log
dump, the parameters and Adam's state.
"""

from __future__ import annotations

import glob
import inspect
import multiprocessing
import os
import subprocess
import sys

import pytest
import torch
from sb3_contrib import RecurrentPPO as ContribRecurrentPPO

import ppo_dict
from ppo_dict.api.algorithms import ALGORITHMS
from ppo_dict.core.errors import CheckpointError, ConfigError
from ppo_dict.core.files import load_model_state
from tests.api.recurrent_scripts import RECURRENT_SCRIPTS, STATES
from tests.api.scripts import run
from tests.api.test_scripts import assert_same_run
from tests.parity.sides import assert_same_value

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def assert_exercised(name: str, record) -> None:
    """What a script is for happened (else its comparison could not fail where it matters)."""
    if name == "lstm_stop_continue":  # stopped in the middle of its second rollout, continued, learned again
        assert record.results["stopped_at"] == 45 and len(record.rollouts) == 4
        assert bool(abs(record.rollouts[-1]["hidden_states_pi"][0]).sum() > 0)  # the states the third call left
    if name == "lstm_time_limits":  # episodes cut by the time limit: bootstrapped from each env's critic states
        assert any(info.get("TimeLimit.truncated") for step in record.steps for info in step[10])
    if name == "lstm_eval_save_load":  # three evaluations, a whole episode of env 0 predicted with states
        assert len(record.results["evaluations"]["timesteps"]) == 3 and record.results["episode"][-1][3] is not None
        assert record.results["single"][0].shape == () and record.results["single"][1][0].shape == (1, 1, 16)
    if name == "lstm_zip_continue":  # sb3-contrib's zip, loaded with n_epochs overridden
        assert record.results["loaded"] == (3, 64) and len(record.rollouts) == 1
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
    model = ppo_dict.RecurrentPPO(
        "MlpLstmPolicy",
        "CartPole-v1",
        policy_kwargs=dict(lstm_hidden_size=32, n_lstm_layers=2, shared_lstm=True, enable_critic_lstm=False),
        _init_setup_model=False,
    )
    cfg = model.cfg
    assert (cfg.model, cfg.n_steps, cfg.batch_size, cfg.n_envs) == ("mlp_lstm", 128, 128, 1)
    assert cfg.lstm_settings == dict(
        lstm_hidden_size=32, n_lstm_layers=2, shared_lstm=True, enable_critic_lstm=False, lstm_kwargs={}
    )
    dict_env = ppo_dict.RecurrentPPO(
        "MultiInputLstmPolicy",
        "PPODictMaskedJump-v0",
        env_kwargs=dict(observation="dict"),
        gym_packages=("ppo_dict.envs.masked",),
        _init_setup_model=False,
    )
    assert dict_env.cfg.model == "mlp_lstm" and dict_env.cfg.lstm_settings["lstm_hidden_size"] == 256


def cli(*args: str) -> str:
    """A recurrent CartPole run of the command line; its stdout."""
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "ppo_dict.main_ppo",
            "--env",
            "gym_CartPole-v1",
            "--model",
            "mlp_lstm",
            "--n_envs",
            "2",
            "--num_workers",
            "0",
            "--n_steps",
            "16",
            "--batch_size",
            "16",
            "--n_epochs",
            "2",
            "--lstm_hidden_size",
            "8",
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
    return proc.stdout


@pytest.mark.slow  # two runs of the command line in subprocesses: 30-40 s on 2 cores
def test_a_recurrent_checkpoint_continues_as_resume_does(tmp_path) -> None:
    """The checkpoint holds the LSTM states that start the next rollout: ``learn`` starts from them, as ``--resume`` does
    (from envs reset: the API keeps sb3-contrib's semantics, where a resumed command line restores the envs)."""
    run_dir = os.path.join(tmp_path, "run")
    cli("--total_timesteps", "64", "--run_dir", run_dir, "--save_freq", "32", "--keep_checkpoints", "5")
    first = sorted(glob.glob(os.path.join(run_dir, "checkpoints", "checkpoint_*.pt")))[0]  # at 32 steps
    saved = load_model_state(first)
    assert any(bool(t.abs().sum() > 0) for t in saved["lstm_states"][0].values())
    # the API continues as sb3-contrib does, from reset envs: as --resume from a checkpoint without env states
    without_envs = os.path.join(tmp_path, "without_envs.pt")
    torch.save({k: v for k, v in torch.load(first, weights_only=True).items() if k not in ("envs", "carry")}, without_envs)
    out = cli("--resume", without_envs, "--total_timesteps", "96", "--run_dir", os.path.join(tmp_path, "resumed"))
    assert "the checkpoint holds no env states" in out, out
    resumed = load_model_state(sorted(glob.glob(os.path.join(tmp_path, "resumed", "checkpoints", "checkpoint_*.pt")))[-1])
    with pytest.raises(
        CheckpointError, match=r"a recurrent model \(model='mlp_lstm'\): RecurrentPPO.load reads it, not PPO.load"
    ):
        ppo_dict.PPO.load(first, env=ppo_dict.make_vec_env("CartPole-v1", n_envs=2))
    model = ppo_dict.RecurrentPPO.load(first, env=ppo_dict.make_vec_env("CartPole-v1", n_envs=2))
    assert model.num_timesteps == 32
    first_rows = []  # the states stored at the first step of each rollout: the first rollout's are the checkpoint's

    def keep_first_row(local: dict, _: dict) -> bool:
        if local["n_steps"] == 1:  # row 0 is stored by then (sb3-contrib stores it after the step's callback)
            first_rows.append({name: getattr(local["self"].rollout_buffer, name)[0].copy() for name in STATES})
        return True

    model.learn(64, reset_num_timesteps=False, callback=keep_first_row)
    assert_same_value(
        first_rows[0], {k: v.numpy() for k, v in saved["lstm_states"][0].items()}, "the first rollout's stored states"
    )
    assert model.num_timesteps == resumed["num_timesteps"] == 96
    assert_same_value(resumed["policy"], model.policy.state_dict(), "parameters")
    assert_same_value(resumed["optimizer"]["state"], model.policy.optimizer.state_dict()["state"], "Adam's state")
    assert_same_value(
        [{k: v.numpy() for k, v in g.items()} for g in resumed["lstm_states"]], model.trainer.lstm_states(), "LSTM states"
    )
    model.close()


def test_bad_recurrent_arguments_are_refused_together_before_any_process_starts() -> None:
    from stable_baselines3.common.torch_layers import NatureCNN

    with pytest.raises(ConfigError) as raised:
        ppo_dict.RecurrentPPO(
            "MlpLstmPolicy",
            "CartPole-v1",
            n_envs=2,
            num_workers=2,
            n_epochs=0,
            policy_kwargs=dict(shared_lstm=True, lstm_kwargs=dict(bidirectional=True), features_extractor_class=NatureCNN),
        )
    problems = raised.value.problems
    for start in (
        "lstm_kwargs={'bidirectional': True}: ppo_dict takes dropout and bias",
        "policy_kwargs features_extractor_class=",
        "n_epochs=0",
        "shared_lstm=True: the critic either",
    ):
        assert any(p.startswith(start) for p in problems), (start, problems)
    assert multiprocessing.active_children() == []
    with pytest.raises(
        ConfigError, match=r"policy_kwargs lstm_hidden_size=64: not supported \(PPO's policies take no such argument\)"
    ):
        ppo_dict.PPO("MlpPolicy", "CartPole-v1", policy_kwargs=dict(lstm_hidden_size=64))
    with pytest.raises(
        ConfigError, match="You must use `MultiInputLstmPolicy` when working with dict observation space, not MlpLstmPolicy"
    ):
        ppo_dict.RecurrentPPO(
            "MlpLstmPolicy",
            "PPODictMaskedJump-v0",
            env_kwargs=dict(observation="dict"),
            gym_packages=("ppo_dict.envs.masked",),
        )
    with pytest.raises(ConfigError, match=r"policy='CnnLstmPolicy': the observation holds no image; use MlpLstmPolicy"):
        ppo_dict.RecurrentPPO("CnnLstmPolicy", "CartPole-v1")
    with pytest.raises(
        ConfigError,
        match=r"policy='MlpPolicy': Policy MlpPolicy unknown \(MlpLstmPolicy, CnnLstmPolicy, "
        r"MultiInputLstmPolicy\)",
    ):
        ppo_dict.RecurrentPPO("MlpPolicy", "CartPole-v1")
    assert multiprocessing.active_children() == []
