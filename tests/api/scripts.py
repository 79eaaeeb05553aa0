"""Scripts written as sb3's documentation writes them, run under either import, and what they saw.

Each script takes ``api`` (the names a script imports: sb3's, or ppo_dict's for the ones changed),
a temporary folder and a :class:`Record`, and records what its callbacks observed at every step
(``Watch``), every log dump (sb3's ``Logger``, with a capturing output beside the script's), every
rollout buffer, the final parameters and Adam state, and what it evaluated. The tests compare the
records of both imports with ``==`` (``tests.parity.sides.assert_same_value``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, Callable, Optional

import numpy as np
import torch
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.logger import KVWriter

import ppo_dict
import ppo_dict.envs.masked  # noqa: F401  (registers PPODictMaskedJump-v0)
import ppo_dict.envs.toy  # noqa: F401  (registers PPODictToy-v0)
from ppo_dict.envs.dummy import GYM_ID as PIXELS_ID

#: wall-clock keys: they differ between any two runs
TIMED = ("time/fps", "time/time_elapsed")


def imports(which: str) -> SimpleNamespace:
    """The names a script imports: ``sb3``'s; ``ppo_dict`` for the one import changed (``PPO``,
    ``MaskablePPO``, ``RecurrentPPO``; sb3's ``make_vec_env`` stays); ``ppo_dict_envs``: ppo_dict's ``make_vec_env`` too."""
    from sb3_contrib import MaskablePPO, RecurrentPPO
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_vec_env

    if which == "sb3":
        return SimpleNamespace(PPO=PPO, MaskablePPO=MaskablePPO, RecurrentPPO=RecurrentPPO, make_vec_env=make_vec_env)
    algorithms = dict(PPO=ppo_dict.PPO, MaskablePPO=ppo_dict.MaskablePPO, RecurrentPPO=ppo_dict.RecurrentPPO)
    return SimpleNamespace(**algorithms, make_vec_env=make_vec_env if which == "ppo_dict" else ppo_dict.make_vec_env)


class Capture(KVWriter):
    """An sb3 logger output that keeps each dump (less the wall-clock keys)."""

    def __init__(self, dumps: list):
        self.dumps = dumps

    def write(self, key_values: dict[str, Any], key_excluded: dict, step: int = 0) -> None:
        self.dumps.append({k: v for k, v in key_values.items() if k not in TIMED})


def untimed(episode: dict[str, Any]) -> dict[str, Any]:
    """Monitor's episode statistics without its wall-clock time (``t``: seconds since construction)."""
    assert "t" in episode, episode  # present, as sb3's Monitor writes it
    return {k: v for k, v in episode.items() if k != "t"}


def plain_info(info: dict[str, Any]) -> dict[str, Any]:
    """An info dict without Monitor's episode time."""
    out = dict(info)
    if "episode" in out:
        out["episode"] = untimed(out["episode"])
    return out


@dataclass
class Record:
    steps: list = field(default_factory=list)
    rollouts: list = field(default_factory=list)
    dumps: list = field(default_factory=list)
    events: list = field(default_factory=list)
    results: dict = field(default_factory=dict)

    def attach(self, model: Any) -> None:
        """A capturing output beside the model's logger outputs, for every later ``learn``."""
        from stable_baselines3.common.logger import configure

        logger = configure(None, ["stdout"] if model.verbose else [])
        logger.output_formats.append(Capture(self.dumps))
        model.set_logger(logger)

    def keep(self, name: str, model: Any) -> None:
        """The model's parameters and Adam state under ``name``."""
        self.results[name] = {
            "params": {k: v.clone() for k, v in model.policy.state_dict().items()},
            "adam": model.policy.optimizer.state_dict()["state"],
        }


class Watch(BaseCallback):
    """Records what sb3's callbacks see: every hook, and at each step the counters and ``locals``."""

    def __init__(self, record: Record, stop_at: int = 0):
        super().__init__()
        self.record, self.stop_at = record, stop_at

    def _on_training_start(self) -> None:
        self.record.events.append(("training_start", self.num_timesteps, sorted(self.locals)))

    def _on_rollout_start(self) -> None:
        self.record.events.append(("rollout_start", self.num_timesteps))

    def _on_step(self) -> bool:
        seen = self.locals
        new_obs = (
            {k: np.array(v) for k, v in seen["new_obs"].items()}
            if isinstance(seen["new_obs"], dict)
            else np.array(seen["new_obs"])
        )
        self.record.steps.append(
            (
                self.num_timesteps,
                self.n_calls,
                self.model.num_timesteps,
                seen["n_steps"],
                seen["rewards"].copy(),
                np.array(seen["dones"]),
                new_obs,
                np.array(seen["actions"]),
                seen["values"].clone(),
                seen["log_probs"].clone(),
                [plain_info(i) for i in seen["infos"]],
                seen["total_timesteps"],
                seen["tb_log_name"],
                None if self.model.get_vec_normalize_env() is None else self.model.get_vec_normalize_env().obs_rms.mean.copy(),
            )
        )
        return not (self.stop_at and self.n_calls >= self.stop_at)

    def _on_rollout_end(self) -> None:
        b = self.model.rollout_buffer
        names = ("observations", "actions", "rewards", "episode_starts", "values", "log_probs", "advantages", "returns")
        self.record.rollouts.append(
            {
                n: (
                    {k: v.copy() for k, v in getattr(b, n).items()}
                    if isinstance(getattr(b, n), dict)
                    else np.array(getattr(b, n)).copy()
                )
                for n in names
            }
        )
        self.record.events.append(
            ("rollout_end", self.num_timesteps, [untimed(e) for e in list(self.model.ep_info_buffer)[-3:]])
        )

    def _on_training_end(self) -> None:
        self.record.events.append(("training_end", self.num_timesteps))


# ------------------------------------------------------------------------------------- the scripts
def pendulum_eval(api: SimpleNamespace, tmp: str, record: Record) -> None:
    """The issue's example, shortened: gSDE on Pendulum, EvalCallback, save, evaluate_policy(PPO.load(...))."""
    from stable_baselines3.common.callbacks import EvalCallback
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.evaluation import evaluate_policy

    eval_env = make_vec_env("Pendulum-v1", n_envs=1, seed=5)  # seeded: gym.make's env would start from the OS's entropy
    model = api.PPO("MlpPolicy", "Pendulum-v1", n_steps=256, gamma=0.9, use_sde=True, seed=0, verbose=0)
    record.attach(model)
    evaluation = EvalCallback(
        eval_env, eval_freq=256, n_eval_episodes=2, best_model_save_path=os.path.join(tmp, "best"), log_path=tmp, verbose=0
    )
    model.learn(total_timesteps=768, callback=[evaluation, Watch(record)])
    model.save(os.path.join(tmp, "ppo_pendulum"))
    record.keep("trained", model)
    mean, std = evaluate_policy(api.PPO.load(os.path.join(tmp, "ppo_pendulum")), eval_env, n_eval_episodes=2)
    with np.load(os.path.join(tmp, "evaluations.npz")) as f:
        record.results["evaluations"] = {k: f[k] for k in f.files}
    record.results["evaluated"] = (mean, std, evaluation.best_mean_reward)
    model.get_env().close()


def stop_early(api: SimpleNamespace, tmp: str, record: Record) -> None:
    """A custom callback that stops training in the middle of a rollout; then learning continues."""
    model = api.PPO("MlpPolicy", "CartPole-v1", n_steps=64, batch_size=32, n_epochs=2, seed=1, verbose=0)
    record.attach(model)
    model.learn(1000, callback=Watch(record, stop_at=150))
    record.results["stopped_at"] = model.num_timesteps
    model.learn(256, reset_num_timesteps=False, callback=Watch(record))
    record.keep("continued", model)
    model.get_env().close()


def save_load_continue(api: SimpleNamespace, tmp: str, record: Record) -> None:
    """Train, save, delete, load with an env, continue (sb3's docs' "save and load" with a vec env)."""
    env = api.make_vec_env("CartPole-v1", n_envs=2, seed=3)
    schedules = dict(learning_rate=lambda p: 1e-3 * p, clip_range=lambda p: 0.1 + 0.1 * p)
    model = api.PPO("MlpPolicy", env, n_steps=64, batch_size=64, n_epochs=3, seed=2, verbose=0, **schedules)
    record.attach(model)
    model.learn(256, callback=Watch(record))
    model.save(os.path.join(tmp, "cartpole"))
    del model
    # the functions given again: the zip holds them as pickles, which ppo_dict reads only with trust_pickles=True
    model = api.PPO.load(os.path.join(tmp, "cartpole"), env=env, custom_objects=schedules)
    record.attach(model)
    model.learn(256, reset_num_timesteps=False, callback=Watch(record))
    record.keep("continued", model)
    env.close()


def vec_normalize(api: SimpleNamespace, tmp: str, record: Record) -> None:
    """sb3's docs' VecNormalize example: train, save model and statistics, load both, evaluate."""
    from stable_baselines3.common.evaluation import evaluate_policy
    from stable_baselines3.common.vec_env import VecNormalize

    env = VecNormalize(api.make_vec_env("Pendulum-v1", n_envs=2, seed=4), gamma=0.9)
    model = api.PPO("MlpPolicy", env, n_steps=128, gamma=0.9, seed=0, verbose=0)
    record.attach(model)
    model.learn(512, callback=Watch(record))
    model.save(os.path.join(tmp, "ppo_pendulum"))
    env.save(os.path.join(tmp, "vec_normalize.pkl"))
    record.results["stats"] = (env.obs_rms.mean.copy(), env.obs_rms.var.copy(), env.obs_rms.count, env.ret_rms.var.copy())
    env.close()
    env = VecNormalize.load(os.path.join(tmp, "vec_normalize.pkl"), api.make_vec_env("Pendulum-v1", n_envs=2, seed=5))
    env.training, env.norm_reward = False, False
    model = api.PPO.load(os.path.join(tmp, "ppo_pendulum"), env=env)
    record.results["evaluated"] = evaluate_policy(model, env, n_eval_episodes=2)
    record.keep("loaded", model)
    env.close()


def multi_input(api: SimpleNamespace, tmp: str, record: Record) -> None:
    """MultiInputPolicy on a Dict observation (Box, Discrete, MultiDiscrete, MultiBinary keys)."""
    env = api.make_vec_env("PPODictToy-v0", n_envs=2, seed=6, env_kwargs=dict(observation="dict", action="multi_discrete"))
    model = api.PPO("MultiInputPolicy", env, n_steps=32, batch_size=32, n_epochs=2, seed=0, verbose=0)
    record.attach(model)
    model.learn(128, callback=Watch(record))
    record.keep("trained", model)
    obs = env.reset()
    record.results["predicted"] = model.predict(obs, deterministic=True)[0]
    env.close()


def cnn(api: SimpleNamespace, tmp: str, record: Record) -> None:
    """CnnPolicy on channel-last uint8 images (sb3 adds VecTransposeImage), with separate extractors."""
    env = api.make_vec_env(PIXELS_ID, n_envs=2, seed=7, env_kwargs=dict(image_size=36, channels=1, episode_length=20))
    model = api.PPO(
        "CnnPolicy",
        env,
        n_steps=16,
        batch_size=16,
        n_epochs=1,
        seed=0,
        verbose=0,
        policy_kwargs=dict(share_features_extractor=False),
    )
    record.attach(model)
    model.learn(64, callback=Watch(record))
    record.keep("trained", model)
    obs = model.get_env().reset()
    record.results["predicted"] = model.predict(obs)[0]
    env.close()


def maskable(api: SimpleNamespace, tmp: str, record: Record) -> None:
    """sb3-contrib's MaskablePPO with MaskableEvalCallback, its evaluate_policy and predict(action_masks=...)."""
    from sb3_contrib.common.maskable.callbacks import MaskableEvalCallback
    from sb3_contrib.common.maskable.evaluation import evaluate_policy
    from sb3_contrib.common.maskable.utils import get_action_masks

    env = api.make_vec_env("PPODictMaskedJump-v0", n_envs=2, seed=8)
    eval_env = api.make_vec_env("PPODictMaskedJump-v0", n_envs=1, seed=9)
    model = api.MaskablePPO("MlpPolicy", env, n_steps=64, batch_size=64, n_epochs=2, seed=0, verbose=0)
    record.attach(model)
    model.learn(256, callback=[MaskableEvalCallback(eval_env, eval_freq=64, n_eval_episodes=3, verbose=0), Watch(record)])
    record.keep("trained", model)
    record.results["evaluated"] = evaluate_policy(model, eval_env, n_eval_episodes=3)
    obs = eval_env.reset()
    record.results["predicted"] = model.predict(obs, action_masks=get_action_masks(eval_env), deterministic=True)[0]
    env.close()
    eval_env.close()


def callbacks(api: SimpleNamespace, tmp: str, record: Record) -> None:
    """sb3's callbacks together: a CallbackList, a function, CheckpointCallback (and its VecNormalize
    pickles), EvalCallback syncing the VecNormalize statistics with StopTrainingOnRewardThreshold on a
    new best, StopTrainingOnMaxEpisodes, LogEveryNTimesteps, the progress bar; the logger configured
    to CSV and TensorBoard."""
    from stable_baselines3 import PPO as SB3PPO
    from stable_baselines3.common.callbacks import (
        CallbackList,
        CheckpointCallback,
        EvalCallback,
        LogEveryNTimesteps,
        StopTrainingOnMaxEpisodes,
        StopTrainingOnRewardThreshold,
    )
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.logger import configure
    from stable_baselines3.common.vec_env import VecNormalize

    env = VecNormalize(api.make_vec_env("Pendulum-v1", n_envs=2, seed=10), gamma=0.9)
    eval_env = VecNormalize(make_vec_env("Pendulum-v1", n_envs=1, seed=11), training=False, norm_reward=False)
    seen = []

    def function(locals_: dict, globals_: dict) -> bool:
        seen.append((locals_["self"].num_timesteps, locals_["n_steps"], locals_["rewards"].copy()))
        return True

    model = api.PPO("MlpPolicy", env, n_steps=64, batch_size=64, n_epochs=2, gamma=0.9, seed=3, verbose=0)
    logger = configure(os.path.join(tmp, "logs"), ["csv", "tensorboard"])
    logger.output_formats.append(Capture(record.dumps))
    model.set_logger(logger)
    stop = StopTrainingOnRewardThreshold(reward_threshold=-1e9)  # the first evaluation is a new best: it stops there
    chain = CallbackList(
        [
            CheckpointCallback(save_freq=32, save_path=os.path.join(tmp, "ckpt"), save_vecnormalize=True),
            EvalCallback(eval_env, eval_freq=100, n_eval_episodes=1, callback_on_new_best=stop, verbose=0),
            StopTrainingOnMaxEpisodes(max_episodes=1),
            LogEveryNTimesteps(n_steps=50),
            Watch(record),
        ]
    )
    model.learn(2000, callback=chain, progress_bar=True)
    record.results["stopped_at"] = model.num_timesteps
    model.learn(128, callback=function, reset_num_timesteps=False)
    record.results["seen"] = seen
    saved = sorted(os.listdir(os.path.join(tmp, "ckpt")))
    record.results["checkpoints"] = {
        name: SB3PPO.load(os.path.join(tmp, "ckpt", name), device="cpu").policy.state_dict()
        for name in saved
        if name.endswith(".zip")
    }
    record.results["statistics"] = {
        name: VecNormalize.load(os.path.join(tmp, "ckpt", name), eval_env).obs_rms.mean
        for name in saved
        if name.endswith(".pkl")
    }
    record.results["eval_statistics"] = (eval_env.obs_rms.mean.copy(), eval_env.ret_rms.var.copy())
    # less time and pid
    record.results["logs"] = sorted(name.split(".tfevents.")[0] for name in os.listdir(os.path.join(tmp, "logs")))
    record.keep("stopped", model)
    env.close()
    eval_env.close()


SCRIPTS: dict[str, Callable[[SimpleNamespace, str, Record], None]] = {
    "callbacks": callbacks,
    "pendulum_eval": pendulum_eval,
    "stop_early": stop_early,
    "save_load_continue": save_load_continue,
    "vec_normalize": vec_normalize,
    "multi_input": multi_input,
    "cnn": cnn,
    "maskable": maskable,
}


def run(
    name: str, which: str, tmp: str, scripts: Optional[dict[str, Callable[[SimpleNamespace, str, Record], None]]] = None
) -> Record:
    """The record of script ``name`` (of ``scripts``, else :data:`SCRIPTS`) under import ``which`` (see
    :func:`imports`), its files in ``tmp``."""
    import warnings

    record = Record()
    os.makedirs(tmp, exist_ok=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        (scripts or SCRIPTS)[name](imports(which), tmp, record)
    torch.set_num_threads(1)
    return record
