"""The training vec env's ``reset_infos`` during and after ``learn``, as sb3's ``DummyVecEnv`` keeps them (each
env's last reset info, an auto-reset's too): what a callback reads at every step and a script reads after ``learn``,
with and without a callback, for sb3's ``make_vec_env`` and ppo_dict's (its envs in this process, and in two worker
processes that sample their envs' actions), compared with ``==``."""

from __future__ import annotations

import warnings

import gymnasium as gym
import pytest
from stable_baselines3.common.callbacks import BaseCallback

from tests.api.scripts import imports


class ResetCount(gym.Wrapper):
    """The env's reset, its info numbered (sb3's envs give ``{}``: nothing to compare)."""

    def __init__(self, env: gym.Env):
        super().__init__(env)
        self.resets = 0

    def reset(self, **kwargs):
        obs, info = self.env.reset(**kwargs)
        self.resets += 1
        return obs, {**info, "resets": self.resets}


class Watch(BaseCallback):
    def __init__(self, seen: list):
        super().__init__()
        self.seen = seen

    def _on_step(self) -> bool:
        self.seen.append([dict(info) for info in self.training_env.reset_infos])
        return True


def record(which: str, layout: dict) -> dict:
    api = imports(which)
    env = api.make_vec_env("CartPole-v1", n_envs=3, seed=0, wrapper_class=ResetCount, **layout)
    model = api.PPO("MlpPolicy", env, n_steps=64, batch_size=64, n_epochs=1, seed=0, verbose=0)
    seen: list = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model.learn(192, callback=Watch(seen))
        rec = {"steps": seen, "after learn": list(env.reset_infos), "get_env": list(model.get_env().reset_infos)}
        model.learn(192, reset_num_timesteps=False)  # no callback: the infos do not cross per step
        rec["after a learn without callback"] = list(env.reset_infos)
        model.learn(64)  # a reset: the first reset infos of the new seeds' episodes
        rec["after a reset"] = list(env.reset_infos)
    env.close()
    return rec


@pytest.mark.parametrize("layout", [{}, dict(vec_env_kwargs=dict(num_workers=2))], ids=["in_process", "two_workers"])
def test_reset_infos_are_dummy_vec_envs(layout: dict) -> None:
    sb3, ours = record("sb3", {}), record("ppo_dict_envs", layout)
    assert sb3["steps"][0] != sb3["steps"][-1] and sb3["after a reset"][0]["resets"] > 1  # the guard: they change
    assert sb3 == ours
