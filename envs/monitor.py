"""Episode statistics from beneath the training-only wrappers: sb3's ``Monitor``, without its file.

sb3's ``make_vec_env`` wraps ``gym.make(id)`` in a ``Monitor`` *before* any other wrapper, so
with ``make_atari_env`` the ``Monitor`` sits under ``AtariWrapper``: ``rollout/ep_rew_mean`` is the
sum of the game's unclipped rewards over a whole game (all lives), and ``ep_len_mean`` counts
emulator frames, noop and fire steps included. :func:`~envs.make.make_env` puts an
:class:`EpisodeMonitor` at that same place whenever a spec has training-only wrappers; the
trainer's runner and evaluation then read ``info["episode"]`` from the top of the stack, as sb3's
``_update_info_buffer`` and ``evaluate_policy`` do, instead of counting what they see up there.
"""

from __future__ import annotations

import time
from typing import Any, SupportsFloat

import gymnasium as gym

#: the info key an episode's statistics arrive under (sb3 ``Monitor``'s)
EPISODE = "episode"


class EpisodeMonitor(gym.Wrapper):
    """sb3 ``Monitor(env, filename=None)``: at the step an episode ends, ``info["episode"] =
    {"r": return rounded to 6 decimals, "l": steps, "t": seconds since construction}``.

    The return is ``sum`` of the rewards as Python floats, as ``Monitor.step`` computes it (not a
    running total: from Python 3.12 ``sum`` of floats is compensated).
    """

    def __init__(self, env: gym.Env):
        super().__init__(env)
        self.t_start = time.time()
        self.rewards: list[float] = []
        self.needs_reset = True

    def reset(self, **kwargs: Any):
        self.rewards = []
        self.needs_reset = False
        return self.env.reset(**kwargs)

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        if self.needs_reset:  # sb3's Monitor refuses this too; a wrapper above stepped past an end
            raise RuntimeError("Tried to step environment that needs reset")
        observation, reward, terminated, truncated, info = self.env.step(action)
        self.rewards.append(float(reward))
        if terminated or truncated:
            self.needs_reset = True
            info[EPISODE] = {
                "r": round(sum(self.rewards), 6),
                "l": len(self.rewards),
                "t": round(time.time() - self.t_start, 6),
            }
        return observation, reward, terminated, truncated, info


def is_wrapped(env: gym.Env, wrapper_class: type) -> bool:
    """Whether ``wrapper_class`` is anywhere in ``env``'s wrapper stack (sb3 ``env_util.is_wrapped``)."""
    while isinstance(env, gym.Wrapper):
        if isinstance(env, wrapper_class):
            return True
        env = env.env
    return False


def is_monitored(env: gym.Env) -> bool:
    """Whether ``env``'s episode statistics come from an :class:`EpisodeMonitor` beneath its wrappers."""
    return is_wrapped(env, EpisodeMonitor)
