"""``PPODictZeroWork-v0``: an env that does no work, to measure what stepping costs besides the env.

Every step returns the same fixed observation (a float32 vector of ``obs_dim`` values, made once),
reward 0 and no termination; episodes are cut at ``episode_length`` steps (truncated), so resets
and episode statistics are part of what is measured. No physics, no random draws, no copies: what
a vec env or a pool spends per step on top of this is its own cost (``benchmarks/bench_pipeline.py``).
Registered without gymnasium's env checker and order enforcer, whose wrappers would add their own
work to every step; sb3 and ppo_dict make the very same env.

``step_us`` > 0 makes each step take that much wall time asleep, with no CPU: an env that stands in
for a core's worth of env on a host with fewer cores (``benchmarks/bench_scale.py --emulate``): W
workers of such envs step as W cores would, so what the pipeline itself costs per step shows as it
would on a many-core host. Its timer slack is set to 1 us (Linux), so a sleep overshoots by little.

``python -m ppo_dict.main_ppo --env gym_PPODictZeroWork-v0 --gym_packages ppo_dict.envs.zero_work
--env_kwargs "dict(obs_dim=4, action_dim=1)"``
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys
import time
from typing import Any, Optional

import gymnasium as gym
import numpy as np
from gymnasium import spaces

GYM_ID = "PPODictZeroWork-v0"
#: the gymnasium package to import (``--gym_packages``) for the id to be registered, in any process
MODULE = "ppo_dict.envs.zero_work"


class ZeroWorkEnv(gym.Env):
    """A fixed observation ``float32[obs_dim]`` (0.5 everywhere), a ``Box(-1, 1, (action_dim,))``
    action that is ignored, reward 0.0, truncation every ``episode_length`` steps; each step asleep
    for ``step_us`` microseconds (0: returns at once)."""

    metadata = {"render_modes": ["rgb_array"]}  # the trainer may ask for frames (videos): a blank one

    def __init__(
        self,
        obs_dim: int = 4,
        action_dim: int = 1,
        episode_length: int = 1000,
        render_mode: Optional[str] = None,
        step_us: float = 0.0,
    ):
        problems = [
            f"{name}={value!r}: must be an int >= 1"
            for name, value in (("obs_dim", obs_dim), ("action_dim", action_dim), ("episode_length", episode_length))
            if not (isinstance(value, int) and not isinstance(value, bool) and value >= 1)
        ]
        if isinstance(step_us, bool) or not isinstance(step_us, (int, float)) or not 0 <= step_us <= 1e6:
            problems.append(f"step_us={step_us!r}: must be a number of microseconds in [0, 1e6]")
        if problems:
            raise ValueError(f"{GYM_ID}: " + "; ".join(problems))
        self.observation_space = spaces.Box(-1.0, 1.0, (obs_dim,), np.float32)
        self.action_space = spaces.Box(-1.0, 1.0, (action_dim,), np.float32)
        self.render_mode = render_mode
        self.episode_length = episode_length
        self._obs = np.full((obs_dim,), 0.5, np.float32)
        self._t = 0
        self._sleep = step_us / 1e6
        if self._sleep:
            fine_timer_slack()

    def reset(self, *, seed: Optional[int] = None, options: Optional[dict] = None) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        self._t = 0
        return self._obs, {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        """The fixed observation again (the same array: callers copy it into their buffers)."""
        self._t += 1
        if self._sleep:
            time.sleep(self._sleep)
        return self._obs, 0.0, False, self._t >= self.episode_length, {}  # a new info: Monitor writes into it

    def render(self) -> np.ndarray:
        """A blank 8x8 RGB frame."""
        return np.zeros((8, 8, 3), np.uint8)


def fine_timer_slack() -> None:
    """This thread's timer slack to 1 ns (``prctl(PR_SET_TIMERSLACK)``; Linux only, else nothing): a
    sleep then ends within microseconds of its time instead of the default 50 us later."""
    if not sys.platform.startswith("linux"):
        return
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    libc.prctl(29, 1, 0, 0, 0)  # PR_SET_TIMERSLACK


if GYM_ID not in gym.registry:
    gym.register(id=GYM_ID, entry_point=f"{MODULE}:ZeroWorkEnv", disable_env_checker=True, order_enforce=False)
