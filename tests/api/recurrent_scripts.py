"""sb3-contrib's RecurrentPPO in scripts written as its documentation writes them, under either import.

As ``tests/api/scripts.py``, whose :class:`~tests.api.scripts.Record` they fill; the callback also
records what RecurrentPPO's ``collect_rollouts`` adds to ``locals`` (the LSTM states after each
step's forward, the episode starts) and the rollout buffer's stored states.
"""

from __future__ import annotations

import os
from types import SimpleNamespace
from typing import Callable

import numpy as np

import ppo_dict.envs.masked  # noqa: F401  (registers PPODictMaskedJump-v0)
from tests.api.scripts import Record, Watch

#: RecurrentPPO's buffer arrays besides PPO's
STATES = ("hidden_states_pi", "cell_states_pi", "hidden_states_vf", "cell_states_vf")


class WatchStates(Watch):
    """:class:`Watch`, with the LSTM states the callbacks see at each step and in each rollout."""

    def _on_step(self) -> bool:
        states = self.locals["lstm_states"]
        self.record.events.append(
            ("states", self.num_timesteps, [t.clone() for pair in states for t in pair], self.locals["episode_starts"].clone())
        )
        return super()._on_step()

    def _on_rollout_end(self) -> None:
        super()._on_rollout_end()
        self.record.rollouts[-1].update({name: np.array(getattr(self.model.rollout_buffer, name)) for name in STATES})


def lstm_stop_continue(api: SimpleNamespace, tmp: str, record: Record) -> None:
    """sb3-contrib's example, shortened: MlpLstmPolicy on CartPole (two LSTM layers), a callback that
    stops in the middle of a rollout, then ``learn(reset_num_timesteps=False)``, then ``learn`` again
    from reset envs (whose first rollout row stores the LSTM states the last one left: sb3-contrib
    zeros them once, when it builds the model)."""
    model = api.RecurrentPPO(
        "MlpLstmPolicy",
        "CartPole-v1",
        n_steps=32,
        batch_size=24,
        n_epochs=2,
        seed=0,
        verbose=0,
        policy_kwargs=dict(lstm_hidden_size=16, n_lstm_layers=2, net_arch=dict(pi=[16], vf=[16])),
    )
    record.attach(model)
    model.learn(1000, callback=WatchStates(record, stop_at=45))
    record.results["stopped_at"] = model.num_timesteps
    model.learn(64, reset_num_timesteps=False, callback=WatchStates(record))
    record.keep("continued", model)
    model.learn(32, callback=WatchStates(record))
    record.keep("learned again", model)
    model.get_env().close()


def lstm_time_limits(api: SimpleNamespace, tmp: str, record: Record) -> None:
    """Pendulum cut by a 40-step time limit (the bootstrap from each env's critic states), a shared LSTM
    (the critic reads the actor's), lr and clip schedules, two envs from ``make_vec_env``."""
    env = api.make_vec_env("Pendulum-v1", n_envs=2, seed=1, env_kwargs=dict(max_episode_steps=40))
    model = api.RecurrentPPO(
        "MlpLstmPolicy",
        env,
        n_steps=48,
        batch_size=32,
        n_epochs=2,
        gamma=0.9,
        seed=2,
        verbose=0,
        learning_rate=lambda p: 1e-3 * p,
        clip_range=lambda p: 0.1 + 0.1 * p,
        policy_kwargs=dict(lstm_hidden_size=8, shared_lstm=True, enable_critic_lstm=False),
    )
    record.attach(model)
    model.learn(192, callback=WatchStates(record))
    record.keep("trained", model)
    env.close()


def lstm_multi_input(api: SimpleNamespace, tmp: str, record: Record) -> None:
    """MultiInputLstmPolicy on a Dict observation (two vectors), the critic a Linear layer (no LSTM of its own)."""
    env = api.make_vec_env("PPODictMaskedJump-v0", n_envs=2, seed=3, env_kwargs=dict(observation="dict"))
    model = api.RecurrentPPO(
        "MultiInputLstmPolicy",
        env,
        n_steps=16,
        batch_size=16,
        n_epochs=2,
        seed=4,
        verbose=0,
        policy_kwargs=dict(lstm_hidden_size=8, enable_critic_lstm=False),
    )
    record.attach(model)
    model.learn(64, callback=WatchStates(record))
    record.keep("trained", model)
    env.close()


def lstm_eval_save_load(api: SimpleNamespace, tmp: str, record: Record) -> None:
    """sb3-contrib's README example, shortened: train with an EvalCallback, ``evaluate_policy``, save, load without
    an env, then ``predict`` with states over an episode; the zip opened by sb3-contrib's own ``load`` too."""
    from sb3_contrib import RecurrentPPO as ContribRecurrentPPO
    from stable_baselines3.common.callbacks import EvalCallback
    from stable_baselines3.common.evaluation import evaluate_policy

    eval_env = api.make_vec_env("CartPole-v1", n_envs=2, seed=7)
    model = api.RecurrentPPO(
        "MlpLstmPolicy",
        "CartPole-v1",
        n_steps=32,
        batch_size=32,
        n_epochs=2,
        seed=6,
        verbose=0,
        policy_kwargs=dict(lstm_hidden_size=16),
    )
    record.attach(model)
    evaluation = EvalCallback(
        eval_env, eval_freq=32, n_eval_episodes=3, best_model_save_path=os.path.join(tmp, "best"), log_path=tmp, verbose=0
    )
    model.learn(96, callback=[evaluation, WatchStates(record)])
    record.results["evaluated"] = evaluate_policy(model, eval_env, n_eval_episodes=4, warn=False)
    with np.load(os.path.join(tmp, "evaluations.npz")) as f:
        record.results["evaluations"] = {k: f[k] for k in f.files}
    model.save(os.path.join(tmp, "ppo_recurrent"))
    record.keep("trained", model)
    model.get_env().close()
    del model
    model = api.RecurrentPPO.load(os.path.join(tmp, "ppo_recurrent"))
    obs, lstm_states, episode_starts, episode = eval_env.reset(), None, np.ones((2,), dtype=bool), []
    while not (len(episode) > 1 and episode_starts[0]):  # env 0's first episode, env 1 alongside it
        action, lstm_states = model.predict(obs, state=lstm_states, episode_start=episode_starts, deterministic=True)
        obs, rewards, episode_starts, _ = eval_env.step(action)
        episode.append((action, lstm_states[0].copy(), lstm_states[1].copy(), rewards))
    record.results["episode"] = episode
    record.results["single"] = model.predict(obs[0])  # one observation: zero states, a scalar action
    for name in ("ppo_recurrent", "best/best_model"):
        record.results[name] = ContribRecurrentPPO.load(os.path.join(tmp, name), device="cpu").policy.state_dict()
    eval_env.close()


def lstm_zip_continue(api: SimpleNamespace, tmp: str, record: Record) -> None:
    """A zip sb3-contrib wrote (gSDE on Pendulum: ``load`` draws a new exploration matrix), loaded with an env and
    trained on."""
    from sb3_contrib import RecurrentPPO as ContribRecurrentPPO

    model = ContribRecurrentPPO(
        "MlpLstmPolicy",
        api.make_vec_env("Pendulum-v1", n_envs=2, seed=8),
        n_steps=32,
        batch_size=32,
        n_epochs=2,
        use_sde=True,
        seed=9,
        policy_kwargs=dict(lstm_hidden_size=8),
    )
    model.learn(64)
    model.save(os.path.join(tmp, "contrib"))
    model.get_env().close()
    env = api.make_vec_env("Pendulum-v1", n_envs=2, seed=10)
    model = api.RecurrentPPO.load(os.path.join(tmp, "contrib"), env=env, n_epochs=3)
    record.results["loaded"] = (model.n_epochs, model.num_timesteps)
    record.attach(model)
    model.learn(64, reset_num_timesteps=False, callback=WatchStates(record))
    record.keep("continued", model)
    env.close()


RECURRENT_SCRIPTS: dict[str, Callable[[SimpleNamespace, str, Record], None]] = {
    "lstm_stop_continue": lstm_stop_continue,
    "lstm_time_limits": lstm_time_limits,
    "lstm_multi_input": lstm_multi_input,
    "lstm_eval_save_load": lstm_eval_save_load,
    "lstm_zip_continue": lstm_zip_continue,
}
