"""Custom envs registered the ways gymnasium's docs show: a class, a ``"module:Class"`` string and a
function as entry point. Imported through ``--gym_packages tests.envs.custom_envs`` (also by each
worker process, which registers them again in its own registry)."""

from __future__ import annotations

from typing import Any, Optional

import gymnasium as gym
import numpy as np
from gymnasium import spaces


class GoalEnv(gym.Env):
    """Walk on a line from 0 to ``goal`` (kwargs reach the constructor): actions 0 left, 1 right;
    reward 1 at the goal (terminated), episodes cut at ``max_steps``."""

    def __init__(self, goal: int = 3, max_steps: int = 16):
        self.goal, self.max_steps = goal, max_steps
        self.observation_space = spaces.Box(-np.inf, np.inf, (2,), np.float32)
        self.action_space = spaces.Discrete(2)
        self._x, self._t = 0, 0

    def _obs(self) -> np.ndarray:
        return np.array([self._x, self.goal - self._x], np.float32)

    def reset(self, *, seed: Optional[int] = None, options: Optional[dict] = None):
        super().reset(seed=seed)
        self._x, self._t = 0, 0
        return self._obs(), {}

    def step(self, action: Any):
        self._x += 1 if int(action) == 1 else -1
        self._t += 1
        reached = self._x == self.goal
        return self._obs(), float(reached), reached, self._t >= self.max_steps, {}


def make_goal_env(**kwargs: Any) -> GoalEnv:
    return GoalEnv(**kwargs)


for env_id, entry_point in (
    ("PPODictCustomClass-v0", GoalEnv),
    ("PPODictCustomString-v0", "tests.envs.custom_envs:GoalEnv"),
    ("PPODictCustomFunction-v0", make_goal_env),
):
    if env_id not in gym.registry:
        gym.register(env_id, entry_point=entry_point)


class SpacesEnv(gym.Env):
    """Any observation and action space, given as kwargs (to check what is refused before anything starts)."""

    def __init__(self, observation_space: spaces.Space, action_space: spaces.Space):
        self.observation_space, self.action_space = observation_space, action_space

    def reset(self, *, seed: Optional[int] = None, options: Optional[dict] = None):
        super().reset(seed=seed)
        return self.observation_space.sample(), {}

    def step(self, action: Any):
        return self.observation_space.sample(), 0.0, False, False, {}


if "PPODictCustomSpaces-v0" not in gym.registry:
    gym.register("PPODictCustomSpaces-v0", entry_point=SpacesEnv)
