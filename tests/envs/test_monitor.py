"""The episode monitor against sb3's Monitor: the same ``info["episode"]`` (return, length), the same refusal."""

import gymnasium as gym
import numpy as np
import pytest
from stable_baselines3.common.monitor import Monitor

from ppo_dict.envs.monitor import EpisodeMonitor, is_monitored


def test_episode_monitor_reports_what_sb3s_monitor_reports() -> None:
    ours, theirs = (
        EpisodeMonitor(gym.make("Pendulum-v1", max_episode_steps=13)),
        Monitor(gym.make("Pendulum-v1", max_episode_steps=13)),
    )
    ours.reset(seed=0), theirs.reset(seed=0)
    rng, episodes = np.random.default_rng(0), 0
    for _ in range(40):
        action = rng.uniform(-2, 2, size=1).astype(np.float32)
        *_, terminated, truncated, info = ours.step(action)
        expected = theirs.step(action)[4]
        assert ("episode" in info) == ("episode" in expected)
        if terminated or truncated:
            episodes += 1
            assert (info["episode"]["r"], info["episode"]["l"]) == (expected["episode"]["r"], expected["episode"]["l"])
            # not trivially equal
            assert isinstance(info["episode"]["r"], float) and info["episode"]["r"] != round(info["episode"]["r"], 3)
            ours.reset(), theirs.reset()
    assert episodes == 3
    with pytest.raises(RuntimeError, match="Tried to step environment that needs reset"):  # sb3's words, before a first reset
        EpisodeMonitor(gym.make("Pendulum-v1")).step(np.zeros(1, dtype=np.float32))


def test_is_monitored_looks_through_every_wrapper() -> None:
    env = gym.make("CartPole-v1")
    assert not is_monitored(env)
    assert is_monitored(gym.wrappers.ClipReward(EpisodeMonitor(env), -1, 1))
