"""sb3's ``learn`` on ppo_dict's trainer: ``_setup_learn``, the callbacks and the logger, as sb3 has them.

The trainer's loop (``ppo_dict.algo.ppo.PPO.learn``) is sb3's; the callbacks enter it through the
collector's hooks (``ppo_dict.algo.rollout.collect.RolloutHooks``) and its ``on_rollout``:

* ``on_training_start(locals, globals)`` with ``learn``'s arguments; ``on_rollout_start()`` after a
  rollout's exploration noise; ``on_step()`` once per vectorised step, after the envs stepped and
  the normaliser saw it, with ``num_timesteps`` counted so far and ``locals`` holding what sb3's
  ``collect_rollouts`` holds then (``infos``, ``dones``, ``rewards``, ``new_obs``, ``actions``,
  ``values``, ``log_probs``, ...): False stops training there, as in sb3; ``on_rollout_end()`` after
  GAE; ``on_training_end()``.
* With no callback (and no progress bar) there are no hooks: nothing is asked per step, and the
  workers send no infos.

The trainer logs through :class:`LoggerBridge` into the algorithm's sb3 ``Logger`` (``configure``
works; EvalCallback's ``eval/*`` join the same dumps), sb3's keys only.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Optional

import numpy as np
import torch
from gymnasium import spaces
from stable_baselines3.common.base_class import BaseAlgorithm
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.utils import configure_logger

from ppo_dict.api.buffer import batch_obs, keep_after_learn
from ppo_dict.api.carry import carry_in, carry_out, rnn_states, show_reset, show_reset_infos, show_step
from ppo_dict.data.storage import OBS_KEY, channel_first, obs_parts

if TYPE_CHECKING:
    from ppo_dict.algo.ppo import PPO as Trainer

#: an algorithm of sb3's API (``ppo_dict.api.base.Algorithm``, which imports this module)
Algorithm = Any

#: the keys sb3 records with ``exclude="tensorboard"``
EXCLUDED = {
    "time/iterations": "tensorboard",
    "time/time_elapsed": "tensorboard",
    "time/total_timesteps": "tensorboard",
    "train/n_updates": "tensorboard",
}


class LoggerBridge:
    """The trainer's ``record``/``record_many``/``dump`` into ``algorithm.logger`` (whichever it is at the time)."""

    def __init__(self, algorithm: Algorithm):
        self.algorithm = algorithm

    def record(self, key: str, value: Any) -> None:
        self.algorithm.logger.record(key, value, exclude=EXCLUDED.get(key))

    def record_many(self, values: dict[str, Any]) -> None:
        for key, value in values.items():
            self.record(key, value)

    def dump(self, step: int = 0) -> None:
        self.algorithm.logger.dump(step=step)


class CallbackHooks:
    """The collector's hooks for one ``learn`` call with ``callback`` (``learn_locals``: its locals dict)."""

    def __init__(
        self,
        algorithm: Algorithm,
        trainer: "Trainer",
        callback: BaseCallback,
        learn_locals: dict[str, Any],
        masks: Optional[bool],
    ):
        self.algorithm, self.trainer, self.callback, self.locals = algorithm, trainer, callback, learn_locals
        self.masks = masks  # None: PPO (no masks); else MaskablePPO's use_masking

    def rollout_start(self) -> None:
        self.algorithm._rollout_steps = 0
        self.algorithm._buffer.new_rollout(self.trainer.storage)  # sb3's rollout_buffer.reset()
        self.callback.on_rollout_start()

    def step(self, t: int) -> bool:
        """sb3's ``callback.update_locals(locals()); callback.on_step()`` after rollout step ``t``."""
        self.algorithm._rollout_steps, self.algorithm._buffer.pos = (t + 1) * self.trainer.n_envs, t
        show_step(self.algorithm, self.trainer, t + 1, t)  # a VecNormalize's views, as its step_wait left them
        show_reset_infos(self.algorithm, self.trainer, recorded=True)  # DummyVecEnv's, as its step_wait left them
        self.callback.update_locals(self.step_locals(t))
        return self.callback.on_step()

    def step_locals(self, t: int) -> dict[str, Any]:
        """What ``collect_rollouts`` holds when it calls ``on_step``: its variables, as arrays and tensors of their own."""
        algorithm, s, n = self.algorithm, self.trainer.storage, self.trainer.n_envs
        space = algorithm.observation_space
        actions = s.actions[t].reshape(n, *algorithm.action_space.shape).copy()
        values = {
            "self": algorithm,
            "env": algorithm.env,
            "callback": self.callback,
            "rollout_buffer": algorithm.rollout_buffer,
            "n_rollout_steps": s.n_steps,
            "n_steps": t,
            "obs_tensor": torch.as_tensor(np.array(s.as_policy_input(s.obs_at(t))))
            if not s.is_dict_obs
            else {k: torch.as_tensor(np.array(v)) for k, v in s.as_policy_input(s.obs_at(t)).items()},
            "actions": actions,
            "values": torch.from_numpy(s.values[t].copy()).reshape(n, 1),
            "log_probs": torch.from_numpy(s.log_probs[t].copy()),
            "new_obs": batch_obs(s.as_policy_input(s.obs_at(t + 1)), space, n),
            "rewards": self.rewards(t),
            "dones": s.terminated[t] | s.truncated[t],
            "infos": self.infos(s.terminated[t] | s.truncated[t]),
        }
        if self.masks is None:  # PPO, RecurrentPPO: what the envs were given (Box: clipped)
            values["clipped_actions"] = s.env_actions.copy() if isinstance(algorithm.action_space, spaces.Box) else actions
        else:
            values["action_masks"] = s.action_masks[t].copy() if self.masks else None
            values["use_masking"] = self.masks
        # RecurrentPPO's: the states after the step's forward, its episode starts
        if self.trainer.collector.states is not None:
            values["lstm_states"] = rnn_states(self.trainer, t + 1)
            values["episode_starts"] = torch.tensor(self.trainer.collector.last_dones, dtype=torch.float32)
        return values

    def rewards(self, t: int) -> np.ndarray:
        """Step ``t``'s rewards as the vec env returned them: an sb3 vec env's own array (float64 from a
        ``SubprocVecEnv``), else the storage's float32 ones (normalised), as ``DummyVecEnv`` (``VecNormalize``) returns
        them."""
        if self.algorithm.envs.facade is None:
            return np.array(self.trainer.pool.rewards)
        return self.trainer.storage.rewards[t].copy()

    def infos(self, dones: np.ndarray) -> list[dict[str, Any]]:
        """The envs' infos as sb3's vec env wrappers return them: a terminal observation normalised
        (``VecNormalize``, with the statistics after the step) and channel-first (``VecTransposeImage``),
        taken from the storage's terminal observations, which the trainer made so."""
        infos, s, normalizer = list(self.trainer.pool.infos), self.trainer.storage, self.trainer.normalizer
        changed = (
            (normalizer.normalized_keys if normalizer is not None else ()) if self.algorithm.envs.facade is not None else ()
        )
        transposed = s.channel_last_keys if self.algorithm.envs.facade is not None else frozenset()
        if not (changed or transposed):
            return infos
        for i in np.flatnonzero(dones):
            raw = infos[i].get("terminal_observation")
            if raw is None:
                continue
            parts = dict(obs_parts(s.observation_space, raw))
            for key in changed:
                parts[key] = s.terminal_obs[key][i].reshape(np.shape(parts[key])).copy()
            for key in transposed:
                parts[key] = channel_first(parts[key])
            infos[i] = {**infos[i], "terminal_observation": type(raw)(parts) if isinstance(raw, dict) else parts[OBS_KEY]}
        return infos

    def rollout_end(self) -> None:
        """sb3's end of ``collect_rollouts`` (after GAE): PPO's last ``update_locals``, then ``on_rollout_end()``."""
        self.algorithm._rollout_steps = 0
        if self.masks is None and self.trainer.collector.states is None:  # sb3-contrib's have no last update_locals
            self.callback.update_locals({"values": self.trainer.last_values, "n_steps": self.trainer.storage.n_steps})
        self.callback.on_rollout_end()


def setup_learn(
    algorithm: Algorithm, trainer: "Trainer", total_timesteps: int, reset_num_timesteps: bool, tb_log_name: str
) -> int:
    """sb3's ``_setup_learn``: counters, episode buffers, the envs' reset (when due), the logger; the total to train to."""
    algorithm.start_time = time.time_ns()
    if reset_num_timesteps:
        trainer.episodes.info_buffer.clear()
        trainer.episodes.success_buffer.clear()
        trainer.num_timesteps, algorithm._episode_num = 0, 0
    else:
        total_timesteps += trainer.num_timesteps  # training timesteps ahead of the counter
    algorithm._total_timesteps, algorithm._num_timesteps_at_start = total_timesteps, trainer.num_timesteps
    if reset_num_timesteps or algorithm._needs_reset:
        facade = algorithm.envs.facade
        if facade is None:
            trainer.reset_envs(None)  # the vec env's own pending seeds
        else:
            trainer.reset_envs(list(facade._seeds), list(facade._options))
            facade._reset_seeds()
            facade._reset_options()
            show_reset(algorithm, trainer)
        vn = algorithm.get_vec_normalize_env()
        if vn is not None:  # sb3's _setup_learn
            algorithm._last_original_obs = vn.get_original_obs()
        algorithm._needs_reset = False
    else:
        carry_in(algorithm, trainer)  # sb3's _last_obs, whatever a script did with the envs since
    algorithm._buffer.first = {}  # no rollout of this call yet
    trainer.iteration = 0  # sb3's iteration counts this call's rollouts
    normalizer, vn = trainer.normalizer, algorithm.envs.vec_normalize
    if vn is not None:  # the settings a script may change between calls (training=False, norm_reward...)
        normalizer.training, normalizer.norm_reward = vn.training, vn.norm_reward
        normalizer.clip_obs, normalizer.clip_reward = vn.clip_obs, vn.clip_reward
        normalizer.gamma, normalizer.epsilon = vn.gamma, vn.epsilon
    if not algorithm._custom_logger:
        algorithm._logger = configure_logger(algorithm.verbose, algorithm.tensorboard_log, tb_log_name, reset_num_timesteps)
    return total_timesteps


def learn(
    algorithm: Algorithm,
    total_timesteps: int,
    callback: Any,
    log_interval: Optional[int],
    tb_log_name: str,
    reset_num_timesteps: bool,
    progress_bar: bool,
    use_masking: Optional[bool] = None,
) -> Algorithm:
    """sb3's ``OnPolicyAlgorithm.learn`` (sb3-contrib's with ``use_masking``) on the algorithm's trainer."""
    trainer = algorithm._require_trainer()
    if use_masking is not None:  # False: sb3-contrib's unmasked rollout (the envs not asked), updated with all-True masks
        trainer.collector.set_masking(bool(use_masking))
    total = setup_learn(algorithm, trainer, total_timesteps, reset_num_timesteps, tb_log_name)
    if callback is not None or progress_bar:
        callback = BaseAlgorithm._init_callback(algorithm, callback, progress_bar)  # sb3's: lists, functions, the progress bar
    learn_locals = {
        "self": algorithm,
        "total_timesteps": total,
        "callback": callback,
        "log_interval": log_interval,
        "tb_log_name": tb_log_name,
        "reset_num_timesteps": reset_num_timesteps,
        "progress_bar": progress_bar,
        "iteration": 0,
    }
    if use_masking is not None:
        learn_locals["use_masking"] = use_masking
    hooks = None if callback is None else CallbackHooks(algorithm, trainer, callback, learn_locals, use_masking)
    if callback is not None:
        callback.on_training_start(learn_locals, globals())

    def on_rollout(_: Any) -> None:
        if hooks is None:
            algorithm._buffer.new_rollout(trainer.storage)
        # the rollout is complete: sb3's buffer is full
        algorithm._buffer.pos, algorithm._buffer.flat = trainer.storage.n_steps, None
        if hooks is not None:
            hooks.rollout_end()
        algorithm._current_progress_remaining = 1.0 - float(trainer.num_timesteps) / float(total)

    trainer.collector.hooks = hooks
    trainer.pool.record_infos(hooks is not None)  # infos cross from the workers only while a callback may read them
    try:
        trainer.learn(total, on_rollout=on_rollout, log_interval=log_interval)
    finally:
        trainer.collector.hooks, algorithm._rollout_steps = None, 0
    after_learn(algorithm, trainer)
    if callback is not None:
        callback.on_training_end()
    return algorithm


def after_learn(algorithm: Algorithm, trainer: "Trainer") -> None:
    """What sb3 leaves once ``learn`` returns: its rollout buffer, its ``_last_obs`` and a VecNormalize's views."""
    trained = trainer.collector.stopped is None
    keep_after_learn(algorithm, trainer.storage, trained)
    carry_out(algorithm, trainer)
    show_reset_infos(algorithm, trainer)
    if trained and algorithm._buffer.first:  # the last step's views (a stopped rollout's were set at its step)
        show_step(algorithm, trainer, 0, trainer.storage.n_steps - 1)
