"""Frame stacking inside the env (``--frame_stack K``), with sb3 ``VecFrameStack``'s numbers.

sb3 stacks in the vec env, in the main process (``StackedObservations``); ppo_dict stacks in each
env, so that stacked uint8 frames are written once, by the worker, into shared memory. Per env
the two agree exactly: the newest observation last on the stacking axis, older ones before it,
zeros after a reset; the observation that ends an episode is the stack with its last frame (sb3's
``terminal_observation``), and the reset that follows starts a zeroed stack.

The stacking axis is sb3's (``StackedObservations.compute_stacking`` with ``channels_order=None``):
the first axis of a channel-first image, the last axis of anything else (channel-last images such
as Atari's ``[84, 84, 1]``, and vectors).
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from .spaces import is_channel_last, is_image_space


class StackedFrames:
    """The last ``n_stack`` observations of one Box space, for one env.

    ``space``: one observation ``[*shape]``; :attr:`space` is the stacked one, with the stacking
    axis ``n_stack`` times longer and ``low``/``high`` repeated as sb3 repeats them.
    """

    def __init__(self, space: spaces.Box, n_stack: int):
        if not isinstance(space, spaces.Box):
            raise ValueError(f"frame stacking takes Box observations (sb3 VecFrameStack), not {space}")
        channels_first = is_image_space(space) and not is_channel_last(space)
        self.axis = 0 if channels_first else len(space.shape) - 1
        self.width = space.shape[self.axis]  # channels per observation
        low = np.repeat(space.low, n_stack, axis=self.axis)
        high = np.repeat(space.high, n_stack, axis=self.axis)
        self.space = spaces.Box(low=low, high=high, dtype=space.dtype)
        self.frames = np.zeros(self.space.shape, dtype=space.dtype)

    def _newest(self) -> tuple[slice, ...]:
        return (slice(None),) * self.axis + (slice(-self.width, None),)

    def reset(self, obs: np.ndarray) -> np.ndarray:
        """Zero the stack and put ``obs`` last; returns a copy of the stack."""
        self.frames[...] = 0
        self.frames[self._newest()] = obs
        return self.frames.copy()

    def push(self, obs: np.ndarray) -> np.ndarray:
        """Drop the oldest observation, put ``obs`` last; returns a copy of the stack.

        The same values as sb3's ``np.roll(stack, -width, axis)`` followed by writing the newest
        frame, without allocating a rolled array (numpy buffers overlapping slice copies).
        """
        older = (slice(None),) * self.axis + (slice(self.width, None),)
        newer = (slice(None),) * self.axis + (slice(None, -self.width),)
        self.frames[newer] = self.frames[older]
        self.frames[self._newest()] = obs
        return self.frames.copy()


class FrameStack(gym.Wrapper):
    """Observe the last ``n_stack`` observations (sb3 ``VecFrameStack(venv, n_stack)``, per env).

    A Box observation is stacked whole; of a Dict observation only ``keys`` are stacked (None:
    every key, as sb3 stacks every key of a Dict), the others pass through.
    """

    def __init__(self, env: gym.Env, n_stack: int, keys: Optional[Sequence[str]] = None):
        super().__init__(env)
        space = env.observation_space
        self.is_dict = isinstance(space, spaces.Dict)
        subspaces = dict(space.spaces) if self.is_dict else {None: space}
        self.stacks = {key: StackedFrames(sub, n_stack) for key, sub in subspaces.items() if keys is None or key in keys}
        if self.is_dict:  # the Dict's own key order, stacked subspaces in place
            self.observation_space = spaces.Dict(
                {k: self.stacks[k].space if k in self.stacks else sub for k, sub in subspaces.items()}
            )
        else:
            self.observation_space = self.stacks[None].space

    def _stacked(self, obs: Any, put: str) -> Any:
        if not self.is_dict:
            return getattr(self.stacks[None], put)(obs)
        return {k: getattr(self.stacks[k], put)(v) if k in self.stacks else v for k, v in obs.items()}

    def reset(self, **kwargs: Any):
        obs, info = self.env.reset(**kwargs)
        return self._stacked(obs, "reset"), info

    def step(self, action: Any):
        obs, reward, terminated, truncated, info = self.env.step(action)
        return self._stacked(obs, "push"), reward, terminated, truncated, info

    # the stacked frames as plain data (envs.state: a resumed run's envs as they were)
    def state_dict(self) -> dict[str, Any]:
        return {"frames": [stack.frames.copy() for stack in self.stacks.values()]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        frames = state.get("frames") if isinstance(state, dict) else None
        stacks = list(self.stacks.values())
        if not (
            isinstance(frames, list)
            and len(frames) == len(stacks)
            and all(isinstance(f, np.ndarray) and f.shape == s.frames.shape for f, s in zip(frames, stacks))
        ):
            raise ValueError(
                f"FrameStack: saved frames that are not {len(stacks)} arrays of {[s.frames.shape for s in stacks]}"
            )
        for stack, saved in zip(stacks, frames):
            stack.frames[...] = saved
