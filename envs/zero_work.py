"""``PPODictZeroWork-v0``: an env that does no work, to measure what stepping costs besides the env.

Every step returns the same fixed observation (a float32 vector of ``obs_dim`` values, made once),
reward 0 and no termination; episodes are cut at ``episode_length`` steps (truncated), so resets
and episode statistics are part of what is measured. No physics, no random draws, no copies: what
a vec env or a pool spends per step on top of this is its own cost (``benchmarks/bench_pipeline.py``).
Registered without gymnasium's env checker and order enforcer, whose wrappers would add their own
work to every step; sb3 and ppo_dict make the very same env.

``python -m ppo_dict.main_ppo --env gym_PPODictZeroWork-v0 --gym_packages ppo_dict.envs.zero_work
--env_kwargs "dict(obs_dim=4, action_dim=1)"``
"""
from __future__ import annotations

from typing import Any, Optional

import gymnasium as gym
import numpy as np
from gymnasium import spaces

GYM_ID = "PPODictZeroWork-v0"
#: the gymnasium package to import (``--gym_packages``) for the id to be registered, in any process
MODULE = "ppo_dict.envs.zero_work"


class ZeroWorkEnv(gym.Env):
    """A fixed observation ``float32[obs_dim]`` (0.5 everywhere), a ``Box(-1, 1, (action_dim,))``
    action that is ignored, reward 0.0, truncation every ``episode_length`` steps."""

    metadata = {"render_modes": ["rgb_array"]}  # the trainer may ask for frames (videos): a blank one

    def __init__(self, obs_dim: int = 4, action_dim: int = 1, episode_length: int = 1000, render_mode: Optional[str] = None):
        problems = [f"{name}={value!r}: must be an int >= 1" for name, value in
                    (("obs_dim", obs_dim), ("action_dim", action_dim), ("episode_length", episode_length))
                    if not (isinstance(value, int) and not isinstance(value, bool) and value >= 1)]
        if problems:
            raise ValueError(f"{GYM_ID}: " + "; ".join(problems))
        self.observation_space = spaces.Box(-1.0, 1.0, (obs_dim,), np.float32)
        self.action_space = spaces.Box(-1.0, 1.0, (action_dim,), np.float32)
        self.render_mode = render_mode
        self.episode_length = episode_length
        self._obs = np.full((obs_dim,), 0.5, np.float32)
        self._t = 0

    def reset(self, *, seed: Optional[int] = None, options: Optional[dict] = None) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        self._t = 0
        return self._obs, {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        """The fixed observation again (the same array: callers copy it into their buffers)."""
        self._t += 1
        return self._obs, 0.0, False, self._t >= self.episode_length, {}  # a new info: Monitor writes into it

    def render(self) -> np.ndarray:
        """A blank 8x8 RGB frame."""
        return np.zeros((8, 8, 3), np.uint8)


if GYM_ID not in gym.registry:
    gym.register(id=GYM_ID, entry_point=f"{MODULE}:ZeroWorkEnv", disable_env_checker=True, order_enforce=False)
