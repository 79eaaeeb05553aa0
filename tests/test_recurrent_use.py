"""A recurrent model used outside training, against sb3-contrib 2.9.2: ``Model.predict`` with the LSTM states
(``RecurrentPPO.predict``), evaluation and ``enjoy`` carrying them, ``--export_sb3`` to a ``RecurrentPPO`` zip,
the ONNX graph with states in and out, and what a recurrent model file refuses."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

from ppo_dict.algo.model import Model
from ppo_dict.algo.networks.recurrent_policy import build_policy
from ppo_dict.core.config import Config
from tests.parity.sides import make_recurrent

#: (config, deterministic): actions sampled (torch seeded alike before each call) or the mode
PREDICT_CASES = {
    "discrete_3_envs_sampled": (Config(env="gym_CartPole-v1", model="mlp_lstm", lstm_hidden_size=16, n_envs=3, seed=0), False),
    "box_two_layers_shared": (
        Config(
            env="gym_Pendulum-v1",
            env_kwargs=dict(max_episode_steps=40),
            model="mlp_lstm",
            lstm_hidden_size=8,
            n_lstm_layers=2,
            shared_lstm=True,
            enable_critic_lstm=False,
            n_envs=2,
            seed=1,
        ),
        True,
    ),
    "multi_discrete": (
        Config(
            env="gym_PPODictToy-v0",
            gym_packages=("ppo_dict.envs.toy",),
            model="mlp_lstm",
            lstm_hidden_size=8,
            env_kwargs=dict(observation="box", action="multi_discrete", episode_length=7),
            n_envs=2,
            seed=2,
        ),
        False,
    ),
    "dict": (
        Config(
            env="gym_PPODictMaskedJump-v0",
            gym_packages=("ppo_dict.envs.masked",),
            env_kwargs=dict(observation="dict"),
            model="mlp_lstm",
            lstm_hidden_size=8,
            share_features_extractor=False,
            n_envs=3,
            seed=4,
        ),
        False,
    ),
    "cnn_image": (
        Config(
            env="test_dummy",
            env_kwargs=dict(image_size=36, channels=1, episode_length=6),
            model="cnn_lstm",
            lstm_hidden_size=8,
            n_envs=2,
            seed=3,
        ),
        True,
    ),
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
            assert a.dtype == b.dtype == np.float32 and a.shape == b.shape and np.array_equal(a, b), (
                f"step {step}: states differ"
            )
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

    cfg = Config(
        env="gym_CartPole-v1", model="mlp_lstm", lstm_hidden_size=16, n_envs=1, n_steps=64, batch_size=64, n_epochs=2, seed=0
    )
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
            returns, lengths = evaluate_policy(
                sb3, venv, n_eval_episodes=4, deterministic=deterministic, return_episode_rewards=True
            )
        venv.close()
        env = gym.make("CartPole-v1")
        torch.manual_seed(3)
        mine = run_episodes(ours, env, 4, seed=7, deterministic=deterministic)
        env.close()
        assert (returns, lengths) == mine and len(set(lengths)) > 1
    # without the states (each step a new episode) the episodes differ: the test can tell
    stateless = Model(cfg, ours.policy, None, ours.observation_space, ours.action_space)
    stateless.predict = lambda obs, state, start, deterministic, action_masks=None: Model.predict(
        ours, obs, None, None, deterministic
    )
    env = gym.make("CartPole-v1")
    assert run_episodes(stateless, env, 4, seed=7)[1] != mine[1]
    env.close()


def test_a_recurrent_run_evaluates_records_and_replays(tmp_path) -> None:
    """The command line: periodic evaluation with a video, the best model, then ``enjoy`` of it with a video."""
    import json

    from tests.cli_here import run_here
    from tests.test_main_ppo import summary_line

    run_dir = tmp_path / "run"
    proc = run_here(
        "--env",
        "gym_CartPole-v1",
        "--model",
        "mlp_lstm",
        "--lstm_hidden_size",
        "16",
        "--num_workers",
        "0",
        "--n_envs",
        "2",
        "--n_steps",
        "64",
        "--batch_size",
        "64",
        "--n_epochs",
        "1",
        "--total_timesteps",
        "256",
        "--seed",
        "0",
        "--verbose",
        "0",
        "--run_dir",
        str(run_dir),
        "--eval_freq",
        "128",
        "--eval_episodes",
        "2",
        "--video",
        "--video_length",
        "10",
        "--plot",
        "False",
    )
    assert proc.returncode == 0, proc.stderr
    assert (run_dir / "videos" / "eval-000000000256.mp4").is_file() and (run_dir / "best_model.pt").is_file()
    assert summary_line(proc.stdout)["metrics"]["eval/mean_ep_length"] > 0
    with np.load(run_dir / "evaluations.npz") as data:
        assert data["timesteps"].tolist() == [128, 256]
    enjoy = run_here(str(run_dir), "--episodes", "2", "--video", module="ppo_dict.enjoy")
    assert enjoy.returncode == 0, enjoy.stderr
    result = json.loads(enjoy.stdout.strip().splitlines()[-1])
    assert len(result["lengths"]) == 2 and result["video"].endswith(".mp4")


def test_export_sb3_writes_a_zip_recurrent_ppo_loads_with_equal_parameters(tmp_path) -> None:
    """``--export_sb3`` of a recurrent run: ``RecurrentPPO.load`` opens it with the run's parameters and Adam state
    (``==``), its LSTM settings, and ``VecNormalize.load`` the statistics beside it; it predicts as the run's model."""
    from sb3_contrib import RecurrentPPO

    from ppo_dict.core.files import load_model_state
    from tests.cli_here import run_here

    zip_path, save_dir = tmp_path / "CartPole-v1.zip", tmp_path / "model"
    proc = run_here(
        "--env",
        "gym_CartPole-v1",
        "--model",
        "mlp_lstm",
        "--lstm_hidden_size",
        "12",
        "--n_lstm_layers",
        "2",
        "--enable_critic_lstm",
        "False",
        "--num_workers",
        "0",
        "--n_envs",
        "2",
        "--n_steps",
        "32",
        "--batch_size",
        "32",
        "--n_epochs",
        "2",
        "--total_timesteps",
        "128",
        "--seed",
        "0",
        "--verbose",
        "0",
        "--normalize",
        "True",
        "--run_dir",
        str(tmp_path / "run"),
        "--save_path",
        str(save_dir),
        "--export_sb3",
        str(zip_path),
    )
    assert proc.returncode == 0, proc.stderr
    assert f"exported {zip_path} (sb3_contrib.RecurrentPPO.load)" in proc.stdout
    saved = load_model_state(str(save_dir))
    loaded = RecurrentPPO.load(str(zip_path), device="cpu")
    theirs = loaded.policy.state_dict()
    assert list(theirs) == list(saved["policy"]) and "critic.weight" in theirs and "lstm_critic.weight_ih_l0" not in theirs
    for key, value in saved["policy"].items():
        assert torch.equal(theirs[key], value), key
    assert (loaded.policy.lstm_actor.hidden_size, loaded.policy.lstm_actor.num_layers) == (12, 2)
    assert loaded.num_timesteps == 128 and loaded._n_updates == saved["n_updates"]
    adam = loaded.policy.optimizer.state_dict()["state"]
    for index, entry in saved["optimizer"]["state"].items():
        assert all(torch.equal(adam[index][k], v) for k, v in entry.items())
    assert (tmp_path / "CartPole-v1" / "vecnormalize.pkl").is_file()
    ours = Model.from_file(str(save_dir))
    obs = np.random.default_rng(0).normal(size=(5, 4)).astype(np.float32)
    a, sa = loaded.predict(obs, deterministic=True)
    # unnormalised, as the zip
    b, sb = Model(ours.cfg, ours.policy, None, ours.observation_space, ours.action_space).predict(obs, deterministic=True)
    assert np.array_equal(a, b) and all(np.array_equal(x, y) for x, y in zip(sa, sb))


def test_continuing_a_recurrent_ppo_zip_equals_recurrent_ppo_load_learn(tmp_path) -> None:
    """``--trained_agent`` from a RecurrentPPO zip: sb3-contrib trains 128 steps and saves; ``RecurrentPPO.load(zip, env,
    seed).learn(192)`` and ppo_dict continuing from the zip for 192 steps give the same run, ``==``: every rollout buffer
    (the LSTM states, from zeros as after sb3-contrib's load), log, parameter and Adam state. Pendulum cut at 40 steps
    (the time-limit bootstrap from each env's critic state), two layers, the critic's Linear, the zip's settings."""
    from sb3_contrib import RecurrentPPO
    from stable_baselines3.common.env_util import make_vec_env

    from tests.parity.sides import assert_same_record, learn_sb3
    from tests.parity.test_trained_agent import continue_with_ours

    kwargs = dict(max_episode_steps=40)
    first = RecurrentPPO(
        "MlpLstmPolicy",
        make_vec_env("Pendulum-v1", n_envs=2, seed=3, env_kwargs=kwargs),
        n_steps=32,
        batch_size=48,
        n_epochs=2,
        learning_rate=7e-4,
        seed=3,
        device="cpu",
        policy_kwargs=dict(lstm_hidden_size=12, n_lstm_layers=2, enable_critic_lstm=False, log_std_init=-0.5),
    )
    first.learn(128)
    zip_path = str(tmp_path / "pendulum_lstm.zip")
    first.save(zip_path)
    env = make_vec_env("Pendulum-v1", n_envs=2, seed=4, env_kwargs=kwargs)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sb3 = learn_sb3(RecurrentPPO.load(zip_path, env=env, seed=4, device="cpu"), 192)
    env.close()
    cfg, agent, ours = continue_with_ours(
        ["--env", "gym_Pendulum-v1", "--env_kwargs", repr(kwargs), "--n_envs", "2", "--seed", "4", "--total_timesteps", "192"],
        zip_path,
    )
    assert (cfg.model, cfg.lstm_hidden_size, cfg.n_lstm_layers, cfg.enable_critic_lstm, cfg.shared_lstm) == (
        "mlp_lstm",
        12,
        2,
        False,
        False,
    )
    assert (cfg.n_steps, cfg.batch_size, cfg.learning_rate, cfg.log_std_init) == (32, 48, 7e-4, -0.5)
    assert agent.n_updates == first._n_updates > 0
    assert_same_record(sb3, ours)


def test_recurrent_and_plain_zips_refuse_the_other_kind_of_model(tmp_path) -> None:
    """A RecurrentPPO zip continued with ``--model mlp``, or a PPO zip with ``--model mlp_lstm``: one ConfigError
    naming the model the zip holds, before anything starts."""
    from sb3_contrib import RecurrentPPO
    from stable_baselines3 import PPO as SB3PPO
    from stable_baselines3.common.env_util import make_vec_env

    from ppo_dict.core.errors import ConfigError
    from ppo_dict.interop.trained_agent import read_trained_agent
    from ppo_dict.run.checks import validate
    from ppo_dict.run.cli import config_from_args

    venv = make_vec_env("CartPole-v1", n_envs=1, seed=0)
    for algo, policy, flag, held in (
        (RecurrentPPO, "MlpLstmPolicy", "mlp", "mlp_lstm"),
        (SB3PPO, "MlpPolicy", "mlp_lstm", "mlp"),
    ):
        path = str(tmp_path / f"{held}.zip")
        algo(policy, venv, n_steps=16, batch_size=16, device="cpu").save(path)
        agent = read_trained_agent(path, "gym_CartPole-v1")
        cfg = config_from_args(
            ["--env", "gym_CartPole-v1", "--model", flag, "--trained_agent", path], base=agent.saved, pinned=agent.pinned
        )
        with pytest.raises(
            ConfigError, match=rf"model='{flag}': the trained agent's model is '{held}' \(its policy\); drop --model"
        ):
            validate(cfg, agent)
    venv.close()


# ------------------------------------------------------------------------------------ checkpoints and --resume
RECURRENT_SMALL = [
    "--env",
    "gym_CartPole-v1",
    "--model",
    "mlp_lstm",
    "--lstm_hidden_size",
    "16",
    "--num_workers",
    "0",
    "--n_envs",
    "2",
    "--n_steps",
    "64",
    "--batch_size",
    "64",
    "--n_epochs",
    "2",
    "--seed",
    "0",
    "--normalize",
    "True",
    "--verbose",
    "0",
    "--plot",
    "False",
]


def test_a_recurrent_checkpoint_restores_bit_for_bit_its_states_included() -> None:
    """``model_state`` of a recurrent run holds the LSTM states that start its next rollout, one set per
    ``--double_buffer`` half; a fresh run restored from it holds exactly what was saved, and its first rollout
    stores those states in its row 0 (what the interrupted run would have stored)."""
    from ppo_dict.run.checkpoint import model_state, restore
    from ppo_dict.run.run_plan import build_env_pool
    from tests.test_checkpoint import assert_same
    from tests.test_recurrent import DOUBLE_BUFFERED

    from ppo_dict.algo.ppo import PPO

    cfg = DOUBLE_BUFFERED.replace(total_timesteps=2 * 256)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        first = PPO(cfg, build_env_pool(cfg))
        try:
            first.learn()
            saved = {k: v for k, v in model_state(first).items()}
        finally:
            first.close()
        assert len(saved["lstm_states"]) == 2 and saved["lstm_states"][0]["hidden_states_pi"].shape == (1, 4, 32)
        assert all(float(g[name].abs().max()) > 0.01 for g in saved["lstm_states"] for name in g)
        torch.manual_seed(5)
        fresh = PPO(cfg, build_env_pool(cfg))
        try:
            restore(fresh, saved, "memory")
            # the model's part (the envs' is put back when they start: tests/test_checkpoint.py)
            assert_same(model_state(fresh, envs=False), {k: v for k, v in saved.items() if k not in ("envs", "carry")})
            fresh.start_envs()
            for arrays, group in zip(fresh.collector.states.arrays, saved["lstm_states"]):
                for name, arr in arrays.items():
                    assert np.array_equal(arr[0], group[name].numpy())
        finally:
            fresh.close()


@pytest.fixture(scope="module")
def recurrent_runs(tmp_path_factory):
    """A: 512 steps uninterrupted (checkpoint every 128). B: 256 steps, then resumed to 512; C: B resumed again."""
    from tests.test_checkpoint import interrupted_runs

    return interrupted_runs(tmp_path_factory.mktemp("recurrent_runs"), RECURRENT_SMALL, 512, 128)


def test_a_recurrent_run_resumes_as_the_others_do(recurrent_runs) -> None:
    """What the interrupted run saved equals what the uninterrupted one had at that step (the LSTM states with every
    other saved value, ``==``); resuming is deterministic; the counters continue."""
    from ppo_dict.core.files import load_model_state
    from tests.test_checkpoint import assert_same, without_config

    def checkpoint(run: str, step: int) -> dict:
        return without_config(load_model_state(str(recurrent_runs / run / "checkpoints" / f"checkpoint_{step:012d}.pt")))

    a256, b256 = checkpoint("a", 256), checkpoint("b_at_256", 256)
    assert "lstm_states" in b256 and float(b256["lstm_states"][0]["cell_states_vf"].abs().max()) > 0.01
    assert_same(b256, a256)
    b_end, c_end, a_end = checkpoint("b", 512), checkpoint("c", 512), checkpoint("a", 512)
    assert_same(b_end, c_end)
    assert (b_end["num_timesteps"], b_end["iteration"], b_end["n_updates"]) == (
        a_end["num_timesteps"],
        a_end["iteration"],
        a_end["n_updates"],
    )


def test_resuming_with_another_kind_of_model_is_refused_before_anything_starts(recurrent_runs, tmp_path) -> None:
    """A recurrent checkpoint resumed with ``--model mlp`` (or other LSTMs), or a plain one with ``--model mlp_lstm``:
    exit 2, one error naming what differs, no run directory touched."""
    from tests.cli_here import run_here

    ckpt = recurrent_runs / "b_at_256" / "checkpoints" / "checkpoint_000000000256.pt"
    proc = run_here("--resume", str(ckpt), "--model", "mlp", "--run_dir", str(tmp_path / "x"))
    assert (
        proc.returncode == 2
        and "the checkpoint holds a recurrent model and this run asks for a model without LSTM" in proc.stderr
    )
    assert "model='mlp_lstm' there, 'mlp' here" in proc.stderr and not (tmp_path / "x").exists()
    proc = run_here("--resume", str(ckpt), "--lstm_hidden_size", "32", "--run_dir", str(tmp_path / "y"))
    assert proc.returncode == 2 and "lstm_hidden_size=16 there, 32 here" in proc.stderr
    from ppo_dict.algo.ppo import PPO
    from ppo_dict.run.checkpoint import CheckpointManager
    from ppo_dict.run.run_plan import build_env_pool

    cfg = Config(
        env="gym_CartPole-v1",
        n_envs=1,
        num_workers=0,
        n_steps=16,
        batch_size=16,
        n_epochs=1,
        total_timesteps=16,
        seed=0,
        verbose=0,
    )
    plain = PPO(cfg, build_env_pool(cfg))
    try:
        plain_file = CheckpointManager(str(tmp_path / "plain"), keep=1).save(plain.learn())
    finally:
        plain.close()
    proc = run_here("--resume", plain_file, "--model", "mlp_lstm", "--run_dir", str(tmp_path / "z"))
    assert (
        proc.returncode == 2
        and "the checkpoint holds a model without LSTM and this run asks for a recurrent model" in proc.stderr
    )


# ------------------------------------------------------------------------------------ ONNX
@pytest.mark.parametrize(
    "name", ["discrete_3_envs_sampled", "box_two_layers_shared", pytest.param("cnn_image", marks=pytest.mark.slow)]
)
def test_onnx_graph_takes_and_returns_the_states_as_recurrent_ppo_predict(tmp_path, name: str) -> None:
    """The exported graph (observations, ``lstm_h``, ``lstm_c``, ``episode_start`` -> action, ``lstm_h_out``,
    ``lstm_c_out``) run in onnxruntime over whole episodes of every env, states carried and reset at episode starts,
    against ``RecurrentPPO.predict(obs, state, episode_start, deterministic=True)`` on the same parameters: the same
    discrete actions, Box actions and states within 1e-5 (onnxruntime's kernels are not torch's: allclose)."""
    onnxruntime = pytest.importorskip("onnxruntime", reason="onnxruntime is not installed (the onnx and test extras)")
    from ppo_dict.interop.onnx import check_onnx, export_onnx

    cfg = PREDICT_CASES[name][0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sb3 = make_recurrent(cfg)
    ours = model_like(sb3, cfg)
    out = export_onnx("memory", str(tmp_path / "policy.onnx"), model=ours)
    checked = check_onnx(out, ours, 64)
    assert checked["mismatched"] == 0 or checked["max_abs_diff"] < 1e-5, checked
    assert checked["max_abs_state_diff"] < 1e-5, checked
    session = onnxruntime.InferenceSession(out, providers=["CPUExecutionProvider"])
    assert [i.name for i in session.get_inputs()][-3:] == ["lstm_h", "lstm_c", "episode_start"]
    venv = sb3.get_env()
    obs, state, h, c = venv.reset(), None, None, None
    starts = np.ones(cfg.num_envs, dtype=bool)
    ended = 0
    for _ in range(80):
        actions, state = sb3.predict(obs, state=state, episode_start=starts, deterministic=True)
        if h is None:
            h = c = np.zeros_like(state[0])
        action, h, c = session.run(
            ["action", "lstm_h_out", "lstm_c_out"], {"obs": np.asarray(obs), "lstm_h": h, "lstm_c": c, "episode_start": starts}
        )
        if np.issubdtype(action.dtype, np.integer):
            assert np.array_equal(action, actions)
        else:
            np.testing.assert_allclose(action, actions, atol=1e-5)
        np.testing.assert_allclose(h, state[0], atol=1e-5)
        np.testing.assert_allclose(c, state[1], atol=1e-5)
        h, c = state  # carry sb3-contrib's states: each step is checked from the same inputs
        obs, _, starts, _ = venv.step(actions)
        ended += int(starts.sum())
    venv.close()
    assert ended >= 1


def test_bad_recurrent_input_is_one_error_listing_every_problem(tmp_path) -> None:
    """LSTM flags sb3-contrib refuses together, masks with --export_sb3 (no sb3-contrib class reads them), and a model
    that does not fit the observation: all in one ConfigError from the command line (exit 2), before any process or
    directory; a recurrent flag without a recurrent model, with the others."""
    from tests.cli_here import run_here

    proc = run_here(
        "--env",
        "gym_CartPole-v1",
        "--model",
        "cnn_lstm",
        "--shared_lstm",
        "True",
        "--share_features_extractor",
        "False",
        "--action_masks",
        "True",
        "--export_sb3",
        "model.zip",
        "--run_dir",
        str(tmp_path / "run"),
    )
    assert proc.returncode == 2 and not (tmp_path / "run").exists()
    listed = [line.split(":")[0].strip("- ") for line in proc.stderr.splitlines() if line.startswith("  - ")]
    assert listed == ["shared_lstm=True", "shared_lstm=True", "export_sb3='model.zip'", "model='cnn_lstm'"], proc.stderr
    proc = run_here(
        "--env",
        "gym_CartPole-v1",
        "--model",
        "cnn",
        "--enable_critic_lstm",
        "False",
        "--n_steps",
        "0",
        "--run_dir",
        str(tmp_path / "run"),
    )
    listed = [line.split(":")[0].strip("- ") for line in proc.stderr.splitlines() if line.startswith("  - ")]
    assert proc.returncode == 2 and listed == ["n_steps=0", "enable_critic_lstm=False", "model='cnn'"], proc.stderr
