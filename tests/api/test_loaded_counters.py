"""A saved model loaded again, with or without ``env=``, as sb3's ``load`` gives it: its counters (``_n_updates``,
``num_timesteps``, ``_episode_num``, ``_current_progress_remaining``, ``_stats_window_size``), its episodes
(``ep_info_buffer``), the zip's ``start_time`` and ``rollout_buffer_class``, the zip it saves again, and the episodes
``set_env`` + ``learn(reset_num_timesteps=False)`` then logs, for PPO, MaskablePPO and RecurrentPPO; a command-line
run's ``best_model.pt`` loaded without env; ``rollout_buffer.compute_returns_and_advantage`` in a callback. Under sb3's
import and ppo_dict's, compared with ``==``.
"""

from __future__ import annotations

import pytest
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.save_util import load_from_zip_file

import ppo_dict.envs.masked  # noqa: F401  (registers PPODictMaskedJump-v0)
from tests.api.scripts import imports, untimed
from tests.parity.sides import assert_same_value

#: algorithm -> (policy, env id, its settings)
CASES = {
    "PPO": ("MlpPolicy", "CartPole-v1", dict(n_steps=64, batch_size=64, n_epochs=2)),
    "MaskablePPO": ("MlpPolicy", "PPODictMaskedJump-v0", dict(n_steps=64, batch_size=64, n_epochs=2)),
    "RecurrentPPO": (
        "MlpLstmPolicy",
        "CartPole-v1",
        dict(n_steps=32, batch_size=64, n_epochs=2, policy_kwargs=dict(lstm_hidden_size=8)),
    ),
}


def counters(model) -> dict:
    return {
        "num_timesteps": model.num_timesteps,
        "_n_updates": model._n_updates,
        "_episode_num": model._episode_num,
        "_current_progress_remaining": model._current_progress_remaining,
        "_stats_window_size": model._stats_window_size,
        "episodes": [untimed(e) for e in model.ep_info_buffer],
        "started": model.start_time > 0,
    }


def saved(path: str) -> dict:
    data = load_from_zip_file(path, device="cpu")[0]
    buffer_class = data.get("rollout_buffer_class")
    return {
        "_n_updates": data["_n_updates"],
        "num_timesteps": data["num_timesteps"],
        "started": data["start_time"] > 0,
        "episodes": [untimed(e) for e in data["ep_info_buffer"]],
        "rollout_buffer_class": getattr(buffer_class, "__name__", buffer_class),
    }


def loaded_record(which: str, name: str, tmp_path) -> dict:
    api = imports(which)
    cls, (policy, env_id, settings) = getattr(api, name), CASES[name]
    model = cls(policy, api.make_vec_env(env_id, n_envs=2, seed=0), seed=0, device="cpu", **settings)
    model.learn(256)
    model.save(tmp_path / "model")
    record = {"trained": counters(model), "zip": saved(str(tmp_path / "model.zip"))}
    bare = cls.load(tmp_path / "model", device="cpu")  # no env: to predict, or to save again
    record["loaded without env"] = counters(bare)
    assert bare.start_time == record["zip"]["started"] * bare.start_time and bare.start_time > 0
    bare.save(tmp_path / "again")
    record["saved again"] = saved(str(tmp_path / "again.zip"))
    bare.set_env(api.make_vec_env(env_id, n_envs=2, seed=1))
    bare.learn(128, reset_num_timesteps=False)
    record["continued after set_env"] = counters(bare)
    with_env = cls.load(tmp_path / "model", env=api.make_vec_env(env_id, n_envs=2, seed=1), device="cpu")
    record["loaded with env"] = counters(with_env)
    return record


@pytest.mark.parametrize("name", list(CASES))
def test_a_loaded_model_has_sb3s_counters_and_episodes_with_or_without_env(name: str, tmp_path) -> None:
    sb3 = loaded_record("sb3", name, tmp_path / "sb3")
    ours = loaded_record("ppo_dict", name, tmp_path / "ours")
    assert sb3["loaded without env"]["_n_updates"] > 0 and sb3["loaded without env"]["episodes"]
    assert sb3["zip"]["rollout_buffer_class"] == (
        None if name == "RecurrentPPO" else "MaskableRolloutBuffer" if name == "MaskablePPO" else "RolloutBuffer"
    )
    for key in sb3:
        assert_same_value(sb3[key], ours[key], key)


def test_a_command_line_runs_best_model_loads_without_env(tmp_path) -> None:
    """``PPO.load("run/best_model.pt")`` (and a checkpoint) without ``env=``, as sb3 loads its ``best_model.zip``: the spaces
    from one env of the saved config, the weights (the same actions as ppo_dict's own Model of the file), the counters."""
    import numpy as np
    import torch

    import ppo_dict
    from ppo_dict.algo.model import Model
    from ppo_dict.core.files import load_model_state
    from tests.cli_here import run_here

    proc = run_here(
        "--env",
        "CartPole-v1",
        "--n_steps",
        "32",
        "--batch_size",
        "32",
        "--n_epochs",
        "1",
        "-n",
        "128",
        "--eval_freq",
        "64",
        "--eval_episodes",
        "1",
        "--seed",
        "0",
        "--run_dir",
        str(tmp_path / "run"),
        "--progress",
        "none",
        "--plot",
        "False",
    )
    assert proc.returncode == 0, proc.stderr
    observations = np.random.default_rng(0).normal(size=(16, 4)).astype(np.float32)
    for path in (tmp_path / "run" / "best_model.pt", tmp_path / "run" / "checkpoints" / "checkpoint_000000000128.pt"):
        model, state = ppo_dict.PPO.load(path), load_model_state(str(path))
        assert model.env is None and str(model.observation_space) == state["observation_space"]
        assert (model.num_timesteps, model._n_updates) == (state["num_timesteps"], state["n_updates"]) and model._n_updates > 0
        assert np.array_equal(
            model.predict(observations, deterministic=True)[0],
            Model.from_file(str(path)).predict(observations, deterministic=True)[0],
        )
        assert all(torch.equal(a, b) for a, b in zip(model.policy.state_dict().values(), state["policy"].values()))


class RecomputeAdvantages(BaseCallback):
    """Sets the buffer's gamma at each rollout's end and recomputes GAE with sb3's ``compute_returns_and_advantage``
    from the rollout's last ``values`` and ``dones``; records the advantages and returns."""

    def __init__(self, seen: list):
        super().__init__()
        self.seen = seen

    def _on_step(self) -> bool:
        return True

    def _on_rollout_end(self) -> None:
        buffer = self.model.rollout_buffer
        buffer.gamma = 0.5
        buffer.compute_returns_and_advantage(last_values=self.locals["values"], dones=self.locals["dones"])
        self.seen.append((buffer.advantages.copy(), buffer.returns.copy()))


@pytest.mark.parametrize("name", ["PPO", "RecurrentPPO"])
def test_rollout_buffers_compute_returns_and_advantage_is_sb3s(name: str) -> None:
    """Recomputed in a callback with another gamma: the same advantages as sb3's, and the update trains on them."""
    import torch

    records = {}
    for which in ("sb3", "ppo_dict"):
        api, seen = imports(which), []
        policy, env_id, settings = CASES[name]
        model = getattr(api, name)(policy, api.make_vec_env(env_id, n_envs=2, seed=0), seed=0, device="cpu", **settings)
        model.learn(256, callback=RecomputeAdvantages(seen))
        records[which] = (seen, [p.detach().clone() for p in model.policy.parameters()])
    (sb3_seen, sb3_params), (our_seen, our_params) = records["sb3"], records["ppo_dict"]
    assert len(sb3_seen) == len(our_seen) > 1
    assert_same_value(sb3_seen, our_seen, "advantages and returns")
    assert all(torch.equal(a, b) for a, b in zip(sb3_params, our_params))
