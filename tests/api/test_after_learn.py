"""The state sb3 leaves when ``learn`` returns, and the views of the VecEnv wrappers a script puts around the envs.

Scripts as sb3's documentation and common user code write them, under sb3's import and ppo_dict's (its
``make_vec_env`` too, whose envs the trainer's pool steps), compared with ``==``:

* ``VecNormalize``'s ``get_original_obs()`` / ``get_original_reward()`` at every step and after ``learn``;
* ``model.rollout_buffer`` after ``learn`` (sb3's ``get()`` flattened it; after a stop, the steps added);
* ``evaluate_policy(model, model.get_env())`` between two ``learn(reset_num_timesteps=False)`` calls: the next
  rollout starts from sb3's ``_last_obs`` while the envs go on from where the evaluation left them
  (MaskablePPO's masks asked of the envs then);
* the zip's ``_last_obs`` and ``_last_episode_starts``; ``load(print_system_info=True)``'s two blocks;
* ``VecMonitor``'s float32 episode statistics in ``rollout/ep_rew_mean``.
"""

from __future__ import annotations

import contextlib
import io
import os
from types import SimpleNamespace

import numpy as np
import pytest
from stable_baselines3.common.callbacks import BaseCallback

import ppo_dict.envs.masked  # noqa: F401  (registers PPODictMaskedJump-v0)
from tests.api.scripts import Record, Watch, run
from tests.api.test_scripts import assert_same_run

#: sb3's rollout buffer's arrays and what says how they are laid out
BUFFER = (
    "observations",
    "actions",
    "rewards",
    "episode_starts",
    "values",
    "log_probs",
    "advantages",
    "returns",
    "pos",
    "full",
    "generator_ready",
)


def buffer_of(model) -> dict:
    b = model.rollout_buffer
    return {name: np.array(getattr(b, name)).copy() for name in BUFFER}


class Originals(BaseCallback):
    """What a callback reads of the training env's VecNormalize at each step: its raw observations and rewards."""

    def __init__(self, record: Record):
        super().__init__()
        self.record = record

    def _on_step(self) -> bool:
        vn = self.model.get_vec_normalize_env()
        self.record.events.append(
            ("original", self.num_timesteps, vn.get_original_obs(), vn.get_original_reward(), vn.returns.copy())
        )
        return True


def normalized(api: SimpleNamespace, tmp: str, record: Record) -> None:
    """VecNormalize's own views during and after learn; the buffer and _last_obs after it; evaluate on the training
    env between two learn calls; the zip's _last_obs; load(print_system_info=True)."""
    from stable_baselines3 import PPO as SB3PPO
    from stable_baselines3.common.evaluation import evaluate_policy
    from stable_baselines3.common.vec_env import VecNormalize

    env = VecNormalize(api.make_vec_env("Pendulum-v1", n_envs=2, seed=4), gamma=0.9)
    model = api.PPO("MlpPolicy", env, n_steps=64, batch_size=64, n_epochs=2, gamma=0.9, seed=0, verbose=0)
    record.attach(model)
    model.learn(256, callback=[Originals(record), Watch(record)])
    record.results["after"] = (
        buffer_of(model),
        env.get_original_obs(),
        env.get_original_reward(),
        model._last_obs.copy(),
        model._last_episode_starts.copy(),
        model._last_original_obs.copy(),
    )
    # steps and resets the training envs
    record.results["evaluated"] = evaluate_policy(model, model.get_env(), n_eval_episodes=1)
    # from sb3's _last_obs; the envs where evaluation left them
    model.learn(256, reset_num_timesteps=False, callback=Watch(record))
    record.results["again"] = (buffer_of(model), env.get_original_obs(), env.get_original_reward(), env.obs_rms.mean.copy())
    record.keep("trained", model)
    model.save(os.path.join(tmp, "model"))
    loaded = SB3PPO.load(os.path.join(tmp, "model"), device="cpu")  # no env: sb3 keeps the zip's _last_obs
    record.results["zip"] = (loaded._last_obs, loaded._last_episode_starts, loaded._last_original_obs)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        api.PPO.load(os.path.join(tmp, "model"), device="cpu", print_system_info=True)
    record.results["system_info"] = [line for line in printed.getvalue().splitlines() if line.startswith("==")]
    env.close()


def masked_stop(api: SimpleNamespace, tmp: str, record: Record) -> None:
    """MaskablePPO stopped by a callback in a rollout (the buffer as the stop left it), sb3-contrib's evaluate_policy
    on the training env, then learn on: the masks of the next rollout's first step are the envs' as they are then."""
    from sb3_contrib.common.maskable.evaluation import evaluate_policy

    env = api.make_vec_env("PPODictMaskedJump-v0", n_envs=2, seed=8)
    model = api.MaskablePPO("MlpPolicy", env, n_steps=32, batch_size=32, n_epochs=2, seed=0, verbose=0)
    record.attach(model)
    model.learn(256, callback=Watch(record, stop_at=45))
    record.results["stopped"] = (buffer_of(model), np.array(model.rollout_buffer.action_masks), model._last_obs.copy())
    record.results["evaluated"] = evaluate_policy(model, model.get_env(), n_eval_episodes=3)
    record.results["evaluated_buffer"] = buffer_of(model)  # the evaluation stepped the envs: sb3's buffer is as learn left it
    model.learn(64, reset_num_timesteps=False, callback=Watch(record))
    record.results["after"] = (buffer_of(model), np.array(model.rollout_buffer.action_masks))
    record.keep("trained", model)
    env.close()


def evaluate_between(api: SimpleNamespace, tmp: str, record: Record) -> None:
    """The training envs evaluated between two learn calls: the buffer as learn left it, the next rollout from _last_obs."""
    from stable_baselines3.common.evaluation import evaluate_policy

    env = api.make_vec_env("Pendulum-v1", n_envs=2, seed=6)
    model = api.PPO("MlpPolicy", env, n_steps=32, batch_size=32, n_epochs=1, seed=0, verbose=0)
    record.attach(model)
    model.learn(64, callback=Watch(record))
    last_obs = model._last_obs.copy()
    record.results["evaluated"] = evaluate_policy(model, model.get_env(), n_eval_episodes=1)
    record.results["after"] = (buffer_of(model), last_obs, model._last_obs)
    model.learn(64, reset_num_timesteps=False, callback=Watch(record))
    record.keep("trained", model)
    env.close()


def vec_monitor(api: SimpleNamespace, tmp: str, record: Record) -> None:
    """A VecMonitor around the envs: its float32 returns and int32 lengths are the episode statistics sb3 logs."""
    from stable_baselines3.common.vec_env import VecMonitor

    env = VecMonitor(api.make_vec_env("CartPole-v1", n_envs=2, seed=1))
    model = api.PPO("MlpPolicy", env, n_steps=64, batch_size=64, n_epochs=1, seed=0, verbose=0)
    record.attach(model)
    model.learn(384, callback=Watch(record))
    record.results["episodes"] = [(e["r"], type(e["r"]), e["l"], type(e["l"])) for e in model.ep_info_buffer]
    env.close()


SCRIPTS = {
    "normalized": normalized,
    "masked_stop": masked_stop,
    "evaluate_between": evaluate_between,
    "vec_monitor": vec_monitor,
}


@pytest.mark.parametrize(
    "name,which",
    [
        ("normalized", "ppo_dict_envs"),
        ("normalized", "ppo_dict"),
        ("masked_stop", "ppo_dict_envs"),
        ("evaluate_between", "ppo_dict_envs"),
        ("vec_monitor", "ppo_dict_envs"),
    ],
)
def test_what_learn_leaves_is_sb3s(name: str, which: str, tmp_path) -> None:
    import warnings

    sb3 = run(name, "sb3", os.path.join(tmp_path, "sb3"), SCRIPTS)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ours = run(name, which, os.path.join(tmp_path, "ours"), SCRIPTS)
    if name == "normalized":
        buffer, original_obs, original_reward = ours.results["after"][:3]
        assert buffer["observations"].shape == (128, 3) and buffer["rewards"].shape == (64, 2) and buffer["generator_ready"]
        assert original_obs.shape == (2, 3) and original_reward.dtype == np.float32
        assert ours.results["zip"][0].shape == (2, 3) and ours.results["system_info"] == [
            "== CURRENT SYSTEM INFO ==",
            "== SAVED MODEL SYSTEM INFO ==",
        ]
    if name == "masked_stop":
        buffer = ours.results["stopped"][0]
        assert (
            buffer["pos"] == 45 - 32 - 1
            and not buffer["generator_ready"]
            and not buffer["values"][12:].any()
            and buffer["values"][:12].all()
        )
    if name == "vec_monitor":
        assert ours.results["episodes"] and {kinds for _, kinds, _, _ in ours.results["episodes"]} == {np.float32}
        assert any("rollout/ep_rew_mean" in dump for dump in ours.dumps)
    assert_same_run(sb3, ours)
