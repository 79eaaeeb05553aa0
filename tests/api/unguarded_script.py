"""A script as sb3's documentation writes them, with no ``if __name__ == "__main__":`` guard.

Run as ``python tests/api/unguarded_script.py WHICH OUT_DIR`` (``WHICH``: ``tests.api.scripts.imports``'
names). Every run of its top level appends a line to ``OUT_DIR/runs``, so a worker process that
imported the main module again would show there; what it trained and evaluated goes to
``OUT_DIR/record.pt``. A custom wrapper defined here travels to the workers by value.
"""

import os
import sys
import warnings

import gymnasium as gym
import numpy as np
import torch
from stable_baselines3.common.callbacks import EvalCallback
from stable_baselines3.common.evaluation import evaluate_policy
from stable_baselines3.common.vec_env import VecNormalize

from tests.api.scripts import imports

which, out = sys.argv[1], sys.argv[2]
with open(os.path.join(out, "runs"), "a") as f:
    f.write(f"{os.getpid()} {__name__}\n")
warnings.simplefilter("ignore")
torch.set_num_threads(1)
api = imports(which)


class ScaledReward(gym.RewardWrapper):
    def reward(self, reward):
        return 0.5 * reward


# ppo_dict's make_vec_env: two envs in two workers whatever the host's core count (sb3's DummyVecEnv takes no such argument)
workers = {"vec_env_kwargs": {"num_workers": 2}} if which == "ppo_dict_envs" else {}
env = VecNormalize(api.make_vec_env("CartPole-v1", n_envs=2, seed=0, wrapper_class=ScaledReward, **workers), norm_reward=False)
eval_env = api.make_vec_env("CartPole-v1", n_envs=1, seed=1, wrapper_class=ScaledReward)
model = api.PPO("MlpPolicy", env, n_steps=64, batch_size=64, n_epochs=2, seed=0, verbose=0)
evaluation = EvalCallback(
    VecNormalize(eval_env, training=False, norm_reward=False), eval_freq=64, n_eval_episodes=2, log_path=out, verbose=0
)
model.learn(256, callback=evaluation)
env.save(os.path.join(out, "vec_normalize.pkl"))
loaded = VecNormalize.load(
    os.path.join(out, "vec_normalize.pkl"),
    api.make_vec_env("CartPole-v1", n_envs=2, seed=2, wrapper_class=ScaledReward, **workers),
)
loaded.training = False
evaluated = evaluate_policy(model, loaded, n_eval_episodes=4)
torch.save(
    {
        "params": model.policy.state_dict(),
        "adam": model.policy.optimizer.state_dict()["state"],
        "best": evaluation.best_mean_reward,
        "evaluations": dict(np.load(os.path.join(out, "evaluations.npz"))),
        "evaluated": evaluated,
        "obs_rms": (env.obs_rms.mean, env.obs_rms.var),
        "processes": [len(getattr(vec_env.unwrapped, "pids", ())) for vec_env in (env, eval_env, loaded)],
    },
    os.path.join(out, "record.pt"),
)
for vec_env in (env, eval_env, loaded):
    vec_env.close()
