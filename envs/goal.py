"""``PPODictGoal-v0``: walk to a goal on a line; the info says whether the goal was reached.

An agent on cells ``0..size-1`` sees its cell and the goal's (float32, scaled to [0, 1]) and steps
left, stays or steps right (Discrete(3)). Reaching the goal ends the episode (terminated, reward
1); every other step costs 0.05; an episode is cut at ``episode_length`` steps (truncated). A
policy that reads the observation reaches the goal within ``size`` steps; random play often does not.

Like gymnasium-robotics' goal envs, the info carries ``is_success`` (what sb3 logs as
``rollout/success_rate``) and the goal ``distance`` (a value for rl-zoo's ``info_keywords``), at
every step (``success_every_step=True``, as the robotics envs give them) or only at episode ends.
``success_type`` picks the value's type: ``float32`` (numpy's, what gymnasium-robotics gives),
``bool``, ``float``, ``numpy_bool``, or ``mixed`` (one of those four per episode, drawn at its reset).

``python -m ppo_dict.main_ppo --env gym_PPODictGoal-v0 --gym_packages ppo_dict.envs.goal --info_keywords distance``
"""

from __future__ import annotations

from typing import Any, Callable, Optional

import gymnasium as gym
import numpy as np
from gymnasium import spaces

GYM_ID = "PPODictGoal-v0"
MODULE = "ppo_dict.envs.goal"
SUCCESS_TYPES: dict[str, Callable[[bool], Any]] = {"float32": np.float32, "bool": bool, "float": float, "numpy_bool": np.bool_}
MIXED = "mixed"


class GoalLineEnv(gym.Env):
    """Walk to the goal (see the module doc)."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": 10}

    def __init__(
        self,
        size: int = 6,
        episode_length: int = 12,
        success_type: str = "float32",
        success_every_step: bool = True,
        render_mode: Optional[str] = None,
    ):
        if success_type not in (*SUCCESS_TYPES, MIXED):
            raise ValueError(
                f"PPODictGoal: success_type must be one of {', '.join((*SUCCESS_TYPES, MIXED))}, got {success_type!r}"
            )
        if size < 2 or episode_length < 1:
            raise ValueError(
                f"PPODictGoal: size must be at least 2 and episode_length at least 1, got {size}, {episode_length}"
            )
        self.size, self.episode_length, self.success_type, self.success_every_step = (
            size,
            episode_length,
            success_type,
            success_every_step,
        )
        self.render_mode = render_mode
        self.observation_space = spaces.Box(0.0, 1.0, (2,), np.float32)
        self.action_space = spaces.Discrete(3)

    def _observe(self) -> np.ndarray:
        return np.array([self._position, self._goal], dtype=np.float32) / np.float32(self.size - 1)

    def reset(self, *, seed: Optional[int] = None, options: Optional[dict] = None):
        super().reset(seed=seed)
        self._t = 0
        self._position, self._goal = (int(c) for c in self.np_random.choice(self.size, 2, replace=False))
        kind = self.success_type
        self._kind = list(SUCCESS_TYPES)[int(self.np_random.integers(len(SUCCESS_TYPES)))] if kind == MIXED else kind
        return self._observe(), {}

    def step(self, action: Any):
        self._t += 1
        self._position = min(max(self._position + int(action) - 1, 0), self.size - 1)
        reached = self._position == self._goal
        truncated = self._t >= self.episode_length
        info: dict[str, Any] = {}
        if self.success_every_step or reached or truncated:
            info = {"is_success": SUCCESS_TYPES[self._kind](reached), "distance": float(abs(self._position - self._goal))}
        return self._observe(), 1.0 if reached else -0.05, reached, truncated, info

    def render(self) -> np.ndarray:
        """The line as a ``uint8[1, size, 3]`` picture: the agent green, the goal red."""
        frame = np.zeros((1, self.size, 3), dtype=np.uint8)
        frame[0, self._goal, 0] = frame[0, self._position, 1] = 255
        return frame


if GYM_ID not in gym.registry:
    gym.register(id=GYM_ID, entry_point=f"{MODULE}:GoalLineEnv")
