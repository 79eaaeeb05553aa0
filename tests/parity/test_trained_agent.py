"""``--trained_agent``: continuing from a zip written by sb3 equals sb3's ``PPO.load(...).learn(N)`` bit for bit.

The sb3 side continues as rl-zoo's ``--trained-agent`` does (``ExperimentManager``): the env
made with the run's seed, ``VecNormalize.load`` of ``<zip folder>/<env id>/vecnormalize.pkl``,
``PPO.load(zip, env, seed=seed, device, **hyperparams)`` with the entry's ``policy`` and
``policy_kwargs`` deleted, then ``learn(n_timesteps)`` (``reset_num_timesteps=True``).
"""

from __future__ import annotations

import importlib.util
import os

import numpy as np
import pytest
import torch
from gymnasium import spaces
from stable_baselines3 import A2C, PPO as SB3PPO, SAC
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.vec_env import VecNormalize

from ppo_dict.core.config import Config
from ppo_dict.core.errors import CheckpointError, ConfigError
from ppo_dict.interop.trained_agent import (
    TrainedAgent,
    agent_problems,
    apply_trained_agent,
    gymnasium_unpatched,
    read_trained_agent,
)
from ppo_dict.run.checks import validate
from ppo_dict.run.cli import config_from_args
from tests.parity.sides import assert_same_record, learn_sb3, run_ours
from tests.cli_here import run_here
from tests.test_main_ppo import run_cli

needs_zoo = pytest.mark.skipif(importlib.util.find_spec("rl_zoo3") is None, reason="rl_zoo3 is not installed (the test extra)")

# What rl-zoo continues with: the env's entry, as its file writes it.
ZOO_ENTRY = """
CartPole-v1:
  normalize: true
  n_envs: 2
  n_timesteps: 384
  policy: 'MlpPolicy'
  n_steps: 64
  batch_size: 64
  gae_lambda: 0.8
  gamma: 0.98
  n_epochs: 2
  learning_rate: lin_0.001
  clip_range: lin_0.2
  policy_kwargs: "dict(net_arch=[64])"
"""


def continue_with_ours(argv: list[str], zip_path: str):
    """ppo_dict's path from the command line: read the zip, layer the settings, check, build, load, learn."""
    agent = read_trained_agent(zip_path, argv[argv.index("--env") + 1])
    cfg = config_from_args(
        argv + ["--trained_agent", zip_path, "--num_workers", "0", "--verbose", "0"], base=agent.saved, pinned=agent.pinned
    )
    validate(cfg, agent)
    return cfg, agent, run_ours(cfg, prepare=lambda model: apply_trained_agent(model, agent))


@needs_zoo
def test_continuing_an_rl_zoo_agent_with_vecnormalize_equals_sb3_load_learn(tmp_path) -> None:
    with gymnasium_unpatched():  # importing rl_zoo3 patches gymnasium's TimeLimit for the whole process
        from rl_zoo3.utils import SimpleLinearSchedule  # what rl-zoo turns lin_<x> into

    # 1. sb3 trains and saves an agent as rl-zoo lays it out: logs/CartPole-v1.zip, logs/CartPole-v1/vecnormalize.pkl.
    venv = VecNormalize(make_vec_env("CartPole-v1", n_envs=2, seed=0), gamma=0.98)
    first = SB3PPO(
        "MlpPolicy",
        venv,
        n_steps=32,
        batch_size=64,
        n_epochs=2,
        gamma=0.98,
        ent_coef=0.01,
        seed=0,
        device="cpu",
        learning_rate=SimpleLinearSchedule(1e-3),
        clip_range=SimpleLinearSchedule(0.2),
        policy_kwargs=dict(net_arch=[32, 32], activation_fn=torch.nn.ReLU),
    )
    first.learn(256)
    zip_path = str(tmp_path / "logs" / "CartPole-v1.zip")
    os.makedirs(tmp_path / "logs" / "CartPole-v1")
    first.save(zip_path)
    venv.save(str(tmp_path / "logs" / "CartPole-v1" / "vecnormalize.pkl"))
    venv.close()

    # 2. sb3 continues as rl-zoo's --trained-agent does, on another seed.
    env = VecNormalize.load(
        str(tmp_path / "logs" / "CartPole-v1" / "vecnormalize.pkl"), make_vec_env("CartPole-v1", n_envs=2, seed=1)
    )
    hyperparams = dict(
        n_steps=64,
        batch_size=64,
        gae_lambda=0.8,
        gamma=0.98,
        n_epochs=2,
        learning_rate=SimpleLinearSchedule(1e-3),
        clip_range=SimpleLinearSchedule(0.2),
    )
    sb3 = learn_sb3(SB3PPO.load(zip_path, env=env, seed=1, device="cpu", **hyperparams), 384)
    env.close()

    # 3. ppo_dict: --env gym_CartPole-v1 --hyperparams FILE --trained_agent ZIP --seed 1
    import gymnasium

    time_limit = gymnasium.wrappers.TimeLimit  # rl-zoo's patched one if an earlier test imported rl_zoo3 outside a guard
    (tmp_path / "ppo.yml").write_text(ZOO_ENTRY)
    cfg, agent, ours = continue_with_ours(
        ["--env", "gym_CartPole-v1", "--hyperparams", str(tmp_path / "ppo.yml"), "--seed", "1"], zip_path
    )
    assert agent.vecnormalize == str(tmp_path / "logs" / "CartPole-v1" / "vecnormalize.pkl")
    assert gymnasium.wrappers.TimeLimit is time_limit  # reading the zip (which imports rl_zoo3) left gymnasium as it found it
    # the zip's policy (not the entry's policy_kwargs), the zip's ent_coef (the entry has none), the entry's n_steps
    assert (cfg.net_arch, cfg.activation_fn, cfg.ent_coef, cfg.n_steps, cfg.learning_rate) == (
        [32, 32],
        "relu",
        0.01,
        64,
        "lin_0.001",
    )
    assert (cfg.normalize, cfg.norm_gamma, cfg.total_timesteps) == (True, 0.98, 384)
    assert agent.n_updates == first._n_updates > 0
    assert_same_record(sb3, ours)  # every rollout buffer, log dump, final parameters, Adam state, RNG and VecNormalize


def save_then_continue_sb3(first: SB3PPO, zip_path: str, make_env, seed: int, steps: int):
    """sb3's two steps: ``first.save(zip_path)``, then ``PPO.load(zip_path, make_env(), seed).learn(steps)``, recorded."""
    first.save(zip_path)
    env = make_env()
    record = learn_sb3(SB3PPO.load(zip_path, env=env, seed=seed, device="cpu"), steps)
    env.close()
    return record


def test_continuing_a_plain_sb3_agent_takes_its_saved_hyperparameters(tmp_path) -> None:
    """No --hyperparams: sb3's load keeps the zip's settings (n_steps, clip_range, ...); so does ppo_dict.
    Pendulum: Gaussian actions, clipping, time-limit bootstraps."""
    first = SB3PPO(
        "MlpPolicy",
        make_vec_env("Pendulum-v1", n_envs=2, seed=3),
        n_steps=64,
        batch_size=32,
        n_epochs=3,
        learning_rate=7e-4,
        clip_range=0.3,
        gae_lambda=0.9,
        seed=3,
        device="cpu",
        policy_kwargs=dict(log_std_init=-0.5),
    )
    first.learn(128)
    zip_path = str(tmp_path / "pendulum.zip")
    sb3 = save_then_continue_sb3(first, zip_path, lambda: make_vec_env("Pendulum-v1", n_envs=2, seed=4), 4, 256)
    cfg, agent, ours = continue_with_ours(
        ["--env", "gym_Pendulum-v1", "--n_envs", "2", "--seed", "4", "--total_timesteps", "256"], zip_path
    )
    assert agent.vecnormalize is None and not cfg.normalize
    assert (
        cfg.n_steps,
        cfg.batch_size,
        cfg.n_epochs,
        cfg.learning_rate,
        cfg.clip_range,
        cfg.gae_lambda,
        cfg.log_std_init,
    ) == (64, 32, 3, 7e-4, 0.3, 0.9, -0.5)
    assert_same_record(sb3, ours)


def test_continuing_a_gsde_agent_equals_sb3_load_learn(tmp_path) -> None:
    """gSDE (rl-zoo's Pendulum settings): sb3's load draws one exploration matrix from the loaded
    log_std after the parameters, then learn() draws one per env; every sde_sample_freq steps after."""
    first = SB3PPO(
        "MlpPolicy",
        make_vec_env("Pendulum-v1", n_envs=2, seed=5),
        n_steps=32,
        batch_size=32,
        n_epochs=2,
        use_sde=True,
        sde_sample_freq=4,
        seed=5,
        device="cpu",
        policy_kwargs=dict(log_std_init=-1.0, full_std=False, use_expln=True),
    )
    first.learn(64)
    zip_path = str(tmp_path / "pendulum_sde.zip")
    sb3 = save_then_continue_sb3(first, zip_path, lambda: make_vec_env("Pendulum-v1", n_envs=2, seed=6), 6, 128)
    cfg, agent, ours = continue_with_ours(
        ["--env", "gym_Pendulum-v1", "--n_envs", "2", "--seed", "6", "--total_timesteps", "128"], zip_path
    )
    assert (cfg.use_sde, cfg.sde_sample_freq, cfg.full_std, cfg.use_expln, cfg.log_std_init) == (True, 4, False, True, -1.0)
    assert_same_record(sb3, ours)
    # a flag that contradicts the zip's gSDE policy is refused with the other problems
    cfg = config_from_args(
        ["--env", "gym_Pendulum-v1", "--trained_agent", zip_path, "--full_std", "True"], base=agent.saved, pinned=agent.pinned
    )
    with pytest.raises(
        ConfigError, match=r"full_std=True: the trained agent's full_std is False \(its policy\); drop --full_std"
    ):
        validate(cfg, agent)


def test_continuing_a_multi_discrete_agent_on_dict_observations_equals_sb3_load_learn(tmp_path) -> None:
    """MultiInputPolicy over every observation leaf, MultiDiscrete actions, with VecNormalize of its Box key."""
    kwargs = dict(observation="dict", action="multi_discrete")
    import ppo_dict.envs.toy  # noqa: F401  (registers PPODictToy-v0 for sb3's make_vec_env)

    venv = VecNormalize(make_vec_env("PPODictToy-v0", n_envs=2, seed=7, env_kwargs=kwargs), norm_obs_keys=["box"])
    first = SB3PPO("MultiInputPolicy", venv, n_steps=16, batch_size=16, n_epochs=2, seed=7, device="cpu")
    first.learn(32)
    os.makedirs(tmp_path / "toy")
    pkl = str(tmp_path / "toy" / "vecnormalize.pkl")  # --export_sb3's layout: <zip without .zip>/vecnormalize.pkl
    venv.save(pkl)
    venv.close()
    zip_path = str(tmp_path / "toy.zip")
    sb3 = save_then_continue_sb3(
        first,
        zip_path,
        lambda: VecNormalize.load(pkl, make_vec_env("PPODictToy-v0", n_envs=2, seed=8, env_kwargs=kwargs)),
        8,
        64,
    )
    cfg, agent, ours = continue_with_ours(
        [
            "--env",
            "gym_PPODictToy-v0",
            "--gym_packages",
            "ppo_dict.envs.toy",
            "--env_kwargs",
            repr(kwargs),
            "--n_envs",
            "2",
            "--seed",
            "8",
            "--total_timesteps",
            "64",
        ],
        zip_path,
    )
    assert agent.normalized_keys == ("box",) and cfg.normalize
    assert_same_record(sb3, ours)


def test_zips_of_other_algorithms_spaces_or_policies_are_refused_clearly(tmp_path) -> None:
    cartpole = make_vec_env("CartPole-v1", n_envs=1, seed=0)
    A2C("MlpPolicy", cartpole, device="cpu").save(str(tmp_path / "a2c.zip"))
    SB3PPO("MlpPolicy", cartpole, device="cpu", policy_kwargs=dict(net_arch=[16])).save(str(tmp_path / "ppo.zip"))
    SAC("MlpPolicy", make_vec_env("Pendulum-v1", n_envs=1), device="cpu", buffer_size=10).save(str(tmp_path / "sac.zip"))
    (tmp_path / "junk.zip").write_bytes(b"not a zip")
    expected = {
        "a2c.zip": "not an sb3 PPO model: it has no clip_range, n_epochs, batch_size (an A2C zip has the same policy class)",
        "sac.zip": "not an sb3 PPO model: its policy is stable_baselines3.sac.policies.SACPolicy (SAC)",
        "junk.zip": "junk.zip: not a zip file (an sb3 model is the .zip PPO.save writes)",
    }
    for name, message in expected.items():
        with pytest.raises(CheckpointError, match=message.replace("(", r"\(").replace(")", r"\)")):
            read_trained_agent(str(tmp_path / name), "gym_CartPole-v1")
    # Other spaces, and a flag that contradicts the zip's policy, are listed with the other problems.
    agent = read_trained_agent(str(tmp_path / "ppo.zip"), "gym_Acrobot-v1")
    cfg = config_from_args(
        ["--env", "gym_Acrobot-v1", "--trained_agent", str(tmp_path / "ppo.zip"), "--net_arch", "64,64", "--gamma", "2"],
        base=agent.saved,
        pinned=agent.pinned,
    )
    with pytest.raises(ConfigError) as info:
        validate(cfg, agent)
    assert (
        [" ".join(p.split()) for p in info.value.problems]
        == [  # numpy pads the bounds with spaces
            "gamma=2.0: must be in [0.0, 1.0]",
            f"trained_agent='{tmp_path}/ppo.zip': Observation spaces do not match: "
            "Box([-4.8 -inf -0.41887903 -inf], [4.8 inf 0.41887903 inf], (4,), float32) != "
            "Box([ -1. -1. -1. -1. -12.566371 -28.274334], [ 1. 1. 1. 1. 12.566371 28.274334], (6,), "
            "float32) (env gym_Acrobot-v1)",
            "trained_agent='" + str(tmp_path) + "/ppo.zip': Action spaces do not match: "
            "Discrete(2) != Discrete(3) (env gym_Acrobot-v1)",
            "net_arch=[64, 64]: the trained agent's net_arch is [16] (its policy); drop --net_arch, the zip decides it",
        ]
    )


def test_cli_refuses_another_algorithm_before_anything_starts(tmp_path) -> None:
    SAC("MlpPolicy", make_vec_env("Pendulum-v1", n_envs=1), device="cpu", buffer_size=10).save(str(tmp_path / "sac.zip"))
    before = os.listdir(tmp_path)
    proc = run_here(
        "--env", "gym_Pendulum-v1", "--trained_agent", str(tmp_path / "sac.zip"), "--run_dir", str(tmp_path / "run")
    )
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.startswith(
        "error: 1 invalid setting(s):\n"
        f"  - trained_agent='{tmp_path}/sac.zip': not an sb3 PPO model: "
        "its policy is stable_baselines3.sac.policies.SACPolicy (SAC)"
    )
    assert os.listdir(tmp_path) == before  # no run directory, the zip untouched
    missing = run_here("--env", "gym_Pendulum-v1", "--trained_agent", str(tmp_path / "nope.zip"))
    assert missing.returncode == 2 and f"trained_agent='{tmp_path}/nope.zip': no such .zip file" in missing.stderr


ZOO_TRAIN_ENTRY = ZOO_ENTRY.replace(
    'policy_kwargs: "dict(net_arch=[64])"', 'policy_kwargs: "dict(net_arch=[32, 32], activation_fn=nn.ReLU)"'
).replace("  learning_rate:", "  ent_coef: 0.01\n  learning_rate:")


@pytest.mark.slow
@needs_zoo
def test_rl_zoo_train_continued_by_rl_zoo_and_by_ppo_dict_from_the_command_line(tmp_path) -> None:
    """rl-zoo's own train.py trains and saves; rl-zoo's --trained-agent and ppo_dict's --trained_agent
    continue it; the two final policies, Adam states and VecNormalize statistics are equal."""
    import pickle
    import subprocess
    import sys

    import numpy as np
    from stable_baselines3.common.save_util import load_from_zip_file

    (tmp_path / "train.yml").write_text(ZOO_TRAIN_ENTRY)
    (tmp_path / "continue.yml").write_text(ZOO_ENTRY)
    zoo = [
        sys.executable,
        "-m",
        "rl_zoo3.train",
        "--algo",
        "ppo",
        "--env",
        "CartPole-v1",
        "--num-threads",
        "1",
        "--eval-freq",
        "-1",
    ]
    for args in (
        ["-f", "first", "-n", "256", "--seed", "0", "-conf", "train.yml"],
        ["-f", "second", "-n", "384", "--seed", "1", "-conf", "continue.yml", "-i", "first/ppo/CartPole-v1_1/CartPole-v1.zip"],
    ):
        proc = subprocess.run(zoo + args, cwd=tmp_path, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr[-2000:]
    ours = run_cli(
        "--env",
        "gym_CartPole-v1",
        "--hyperparams",
        str(tmp_path / "continue.yml"),
        "--seed",
        "1",
        "--num_workers",
        "0",
        "--trained_agent",
        str(tmp_path / "first/ppo/CartPole-v1_1/CartPole-v1.zip"),
        "--total_timesteps",
        "384",
        "--save_path",
        str(tmp_path / "ours"),
        "--run_dir",
        str(tmp_path / "run"),
        "--plot",
        "False",
        "--verbose",
        "0",
    )
    assert ours.returncode == 0, ours.stderr
    assert f"starting from the trained agent {tmp_path}/first/ppo/CartPole-v1_1/CartPole-v1.zip and " in ours.stdout
    data, params, _ = load_from_zip_file(str(tmp_path / "second/ppo/CartPole-v1_1/CartPole-v1.zip"), device="cpu")
    state = torch.load(tmp_path / "ours" / "model.pt", weights_only=True)
    assert list(params["policy"]) == list(state["policy"])
    assert all(torch.equal(params["policy"][k], state["policy"][k]) for k in params["policy"])
    zoo_adam, our_adam = params["policy.optimizer"]["state"], state["optimizer"]["state"]
    assert all(torch.equal(zoo_adam[i][k], our_adam[i][k]) for i in zoo_adam for k in ("exp_avg", "exp_avg_sq", "step"))
    assert data["_n_updates"] == state["n_updates"] == 10
    with open(tmp_path / "second/ppo/CartPole-v1_1/CartPole-v1/vecnormalize.pkl", "rb") as f:
        vec_normalize = pickle.load(f)
    ours_rms = state["normalizer"]["obs_rms"]["obs"]
    assert np.array_equal(vec_normalize.obs_rms.mean, ours_rms["mean"].numpy()) and np.array_equal(
        vec_normalize.obs_rms.var, ours_rms["var"].numpy()
    )
    assert np.array_equal(vec_normalize.ret_rms.var, state["normalizer"]["ret_rms"]["var"].numpy())


def test_statistics_of_another_shape_are_refused_before_anything_starts() -> None:
    """A pkl whose statistics have other keys or shapes than the observations ppo_dict normalises
    (e.g. rl-zoo's unstacked VecNormalize beside a stacked env) is named, not loaded into a crash."""
    box = spaces.Box(-1, 1, (3,), np.float32)
    rms = {"mean": np.zeros(3), "var": np.ones(3), "count": 1.0}
    agent = TrainedAgent(
        path="a.zip",
        saved={},
        pinned={},
        policy_state={},
        optimizer_state={},
        n_updates=0,
        observation_space=box,
        action_space=box,
        vecnormalize="a/vecnormalize.pkl",
        normalizer_state={"obs_rms": {"obs": rms}},
    )
    cfg = Config(env="gym_Pendulum-v1", normalize=True)
    assert agent_problems(agent, cfg, box, box) == []
    stacked = spaces.Box(-1, 1, (9,), np.float32)
    assert agent_problems(agent, cfg, stacked, box)[-1] == (
        "trained_agent: a/vecnormalize.pkl normalises {'obs': (3,)} (key: shape), ppo_dict normalises the vector keys {'obs': "
        "(9,)}"
    )
