"""The envs ``ppo_dict.PPO`` takes, where they run, and that no worker outlives its model.

Every form an sb3 script passes (an id, an env instance, a factory, a list of factories, a vec env)
trains to sb3's numbers; worker processes end with ``model.env.close()``, with ``with PPO(...)`` and
with the interpreter, checked on the real processes (``/proc``); a config ppo_dict cannot run is
refused before any process starts, every problem in one error.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import warnings

import gymnasium as gym
import numpy as np
import pytest
from stable_baselines3 import PPO as SB3PPO
from stable_baselines3.common.env_util import make_vec_env as sb3_make_vec_env
from stable_baselines3.common.vec_env import DummyVecEnv, VecEnv

import ppo_dict
from ppo_dict.core.errors import ConfigError
from ppo_dict.envs.dummy import GYM_ID as PIXELS_ID
from ppo_dict.run.cli import config_from_args
from tests.faults.scenarios import alive
from tests.parity.sides import assert_same_value

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SETTINGS = dict(n_steps=32, batch_size=32, n_epochs=2, seed=0, verbose=0)


def make_cartpole() -> gym.Env:
    return gym.make("CartPole-v1")


def trained(model) -> dict:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model.learn(128)
    params = {k: v.clone() for k, v in model.policy.state_dict().items()}
    model.get_env().close()
    return params


@pytest.mark.parametrize("form", ["id", "instance", "factory", "factories"])
def test_every_env_form_trains_to_sb3s_numbers(form: str) -> None:
    """An id (``n_envs`` copies, as make_vec_env), an env instance (in this process, in a Monitor as sb3
    wraps it), a factory (``n_envs`` copies in a Monitor) and a list of factories (no Monitor, as DummyVecEnv)."""
    ours_env, sb3_env, extra = {
        "id": ("CartPole-v1", lambda: sb3_make_vec_env("CartPole-v1", n_envs=2), {"n_envs": 2}),
        "instance": (make_cartpole(), make_cartpole, {}),
        "factory": (make_cartpole, lambda: sb3_make_vec_env(make_cartpole, n_envs=2), {"n_envs": 2}),
        "factories": ([make_cartpole] * 3, lambda: DummyVecEnv([make_cartpole] * 3), {}),
    }[form]
    sb3 = trained(SB3PPO("MlpPolicy", sb3_env(), **SETTINGS))
    ours = ppo_dict.PPO("MlpPolicy", ours_env, **SETTINGS, **extra)
    assert isinstance(ours.get_env(), VecEnv) and ours.trainer.pool.num_envs == extra.get(
        "n_envs", 3 if form == "factories" else 1
    )
    assert_same_value(sb3, trained(ours), f"parameters after training on the env as {form}")


def test_an_sb3_vec_env_is_stepped_as_sb3_steps_it_with_one_notice(capsys) -> None:
    # the RNGs are global: one run, then the other
    sb3 = trained(SB3PPO("MlpPolicy", sb3_make_vec_env("CartPole-v1", n_envs=2), **SETTINGS))
    venv = sb3_make_vec_env("CartPole-v1", n_envs=2)
    model = ppo_dict.PPO("MlpPolicy", venv, **SETTINGS)
    out = capsys.readouterr().out
    assert out.count("note: ") == 1 and "DummyVecEnv is stepped as sb3 steps it" in out and "ppo_dict.make_vec_env" in out
    assert model.get_env() is venv and model.trainer.pool.venv is venv
    assert_same_value(sb3, trained(model), "parameters")


def test_other_wrappers_around_ppo_dicts_vec_env_are_stepped_as_sb3_steps_them(capsys) -> None:
    """VecFrameStack over ppo_dict.make_vec_env: the vec env runs its own workers, the wrapper is sb3's."""
    from stable_baselines3.common.vec_env import VecFrameStack

    sb3 = trained(SB3PPO("MlpPolicy", VecFrameStack(sb3_make_vec_env("CartPole-v1", n_envs=2, seed=1), 3), **SETTINGS))
    model = ppo_dict.PPO("MlpPolicy", VecFrameStack(ppo_dict.make_vec_env("CartPole-v1", n_envs=2, seed=1), 3), **SETTINGS)
    assert "VecFrameStack(ShmVecEnv) is stepped as sb3 steps it" in capsys.readouterr().out
    assert_same_value(sb3, trained(model), "parameters")


@pytest.mark.parametrize("n_envs", [1, 2, 3])
def test_a_stacked_image_vec_env_is_read_with_its_own_strides_as_sb3_reads_it(n_envs: int, capsys) -> None:
    """rl-zoo's Atari chain in small: VecFrameStack over channel-last images, under the VecTransposeImage sb3 adds.
    The policy reads what the vec env returned, a transposed view (channels-last in memory), and the convolution
    rounds by the layout: read from contiguous copies instead, values differed by 4e-7 from the first step (rl-zoo's
    Breakout, results.py). Episodes end by time limit: the bootstrap reads the terminal observations as returned too,
    as sb3's ``np.array`` keeps them (channels-last; at a batch of one the convolution gave the same values either way)."""
    from stable_baselines3.common.vec_env import VecFrameStack

    def chain(make_vec_env):
        kwargs = dict(image_size=36, channels=1, channel_last=True, episode_length=20)
        return VecFrameStack(make_vec_env(PIXELS_ID, n_envs=n_envs, seed=3, env_kwargs=kwargs), 4)

    cnn = dict(SETTINGS, n_steps=24, batch_size=24)
    sb3 = trained(SB3PPO("CnnPolicy", chain(sb3_make_vec_env), **cnn))
    model = ppo_dict.PPO("CnnPolicy", chain(ppo_dict.make_vec_env), **cnn)
    assert "VecFrameStack(ShmVecEnv) is stepped as sb3 steps it" in capsys.readouterr().out
    assert_same_value(sb3, trained(model), "parameters")
    read = model.trainer.storage.step_input(0)  # what the next rollout's first convolution reads: a channels-last view
    assert read.shape == (n_envs, 4, 36, 36) and read.strides == (36 * 36 * 4, 1, 36 * 4, 4)


def test_ppo_dict_make_vec_env_is_the_trainers_pool() -> None:
    """ppo_dict.make_vec_env starts nothing; given to PPO, its vec env steps through the trainer's pool
    (one set of processes), before, during and after learning."""
    venv = ppo_dict.make_vec_env("CartPole-v1", n_envs=4, seed=0, vec_env_kwargs=dict(num_workers=2))
    assert not venv.started and venv.pids == []
    with ppo_dict.PPO("MlpPolicy", venv, **SETTINGS) as model:
        assert venv.pool is model.trainer.pool and len(venv.pids) == 1  # a worker beside the main process's share
        model.learn(64)
        obs = venv.reset()
        actions, _ = model.predict(obs, deterministic=True)
        obs, rewards, dones, infos = venv.step(actions)
        assert obs.shape == (4, 4) and rewards.dtype == np.float32 and len(infos) == 4 and "TimeLimit.truncated" in infos[0]
        pids = venv.pids
    assert venv.closed and not [pid for pid in pids if alive(pid)]


LIFETIME = """
import json, sys
import ppo_dict
how = sys.argv[1]
model = ppo_dict.PPO("MlpPolicy", "CartPole-v1", n_envs=4, num_workers=2, n_steps=16, batch_size=32, seed=0)
model.learn(64)
pids = list(model.trainer.pool.pids)
if how == "close":
    model.env.close()
elif how == "with":
    with ppo_dict.PPO("MlpPolicy", "CartPole-v1", n_envs=4, num_workers=2, n_steps=16, batch_size=32, seed=0) as other:
        other.learn(32)
        pids += other.trainer.pool.pids
    model.env.close()
print(json.dumps(pids), flush=True)
if how != "exit":
    import os, time
    from pathlib import Path
    time.sleep(0.5)
    print(json.dumps([p for p in pids
                      if Path(f"/proc/{p}").exists() and "State:\\tZ" not in Path(f"/proc/{p}/status").read_text()]),
          flush=True)
"""


# a fresh interpreter starting worker processes each: 30-50 s on 2 cores; the interpreter's exit, which no
# script line ends, runs in make test, the other two with the slow tests
@pytest.mark.parametrize(
    "how", [pytest.param("close", marks=pytest.mark.slow), pytest.param("with", marks=pytest.mark.slow), "exit"]
)
def test_no_worker_outlives_its_model(how: str, tmp_path) -> None:
    """Real worker processes end with model.env.close(), with ``with``, and when the interpreter exits
    (a script without a ``__main__`` guard, as sb3's documentation writes them)."""
    script = tmp_path / "script.py"
    script.write_text(LIFETIME)
    proc = subprocess.run(
        [sys.executable, str(script), how],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": ROOT},
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()
    pids = json.loads(lines[0])
    assert len(pids) == (2 if how == "with" else 1)
    if how != "exit":
        assert json.loads(lines[1]) == []  # gone while the script still ran
    deadline = time.monotonic() + 5
    while [p for p in pids if alive(p)] and time.monotonic() < deadline:
        time.sleep(0.1)
    assert [p for p in pids if alive(p)] == []


def test_unsupported_settings_are_refused_together_before_any_process_starts() -> None:
    import multiprocessing

    from stable_baselines3.common.buffers import RolloutBuffer

    class MyBuffer(RolloutBuffer):
        pass

    with pytest.raises(ConfigError) as raised:
        ppo_dict.PPO(
            "MlpPolicy",
            "CartPole-v1",
            n_envs=4,
            rollout_buffer_class=MyBuffer,
            stats_window_size=0,
            n_epochs=0,
            policy_kwargs=dict(optimizer_kwargs=[], squash_output=True),
            num_workers=3,
            envs_per_worker=2,
        )
    problems = raised.value.problems
    for name in (
        "rollout_buffer_class=",
        "stats_window_size=0",
        "n_epochs=0",
        "policy_kwargs optimizer_kwargs=[]",
        "squash_output=True: only with --use_sde",
        "n_envs=4: must equal num_workers x envs_per_worker",
    ):
        assert any(p.startswith(name) for p in problems), (name, problems)
    assert multiprocessing.active_children() == []
    cli = ConfigError(config_from_args(["--env", "gym_CartPole-v1", "--n_epochs", "0"]).problems())
    assert [p for p in problems if p.startswith("n_epochs")] == cli.problems  # a keyword and a flag of one name: one check


def test_a_policy_class_that_is_none_of_sb3s_and_unknown_names_are_refused() -> None:
    from stable_baselines3.common.policies import ActorCriticPolicy

    class Mine:
        pass

    # a subclass of ActorCriticPolicy: tests/api/test_own_policy.py
    with pytest.raises(ConfigError, match="not a policy ppo_dict trains"):
        ppo_dict.PPO(Mine, "CartPole-v1")
    ppo_dict.PPO(ActorCriticPolicy, "CartPole-v1", _init_setup_model=False)  # sb3's own class of MlpPolicy
    with pytest.raises(ConfigError, match="Policy LstmPolicy unknown"):
        ppo_dict.PPO("LstmPolicy", "CartPole-v1")
    with pytest.raises(TypeError, match="rollout_buffer"):
        ppo_dict.PPO("MlpPolicy", "CartPole-v1", rollout_buffer=None)  # sb3's own signature: an unknown name is a TypeError
    with pytest.raises(ConfigError, match="You must use `MultiInputPolicy`"):
        ppo_dict.PPO("MlpPolicy", "PPODictToy-v0", env_kwargs=dict(observation="dict"), gym_packages="ppo_dict.envs.toy")
    with pytest.raises(ConfigError, match="policy='MlpPolicy': the observation holds images; use CnnPolicy"):
        ppo_dict.PPO("MlpPolicy", "PPODictTestDummy-v0", env_kwargs=dict(image_size=36), gym_packages="ppo_dict.envs.dummy")
    with pytest.raises(ConfigError, match="policy='CnnPolicy': the observation holds no image; use MlpPolicy"):
        ppo_dict.PPO("CnnPolicy", "CartPole-v1")
