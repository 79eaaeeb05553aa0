"""Rendered frames as the observation (``--pixel_obs_wrapper True``).

Each worker renders its own envs (``render_mode="rgb_array"``) straight at ``image_size`` where the
env can (MuJoCo takes ``width``/``height``), else resizes with OpenCV. Frames are uint8,
channel-first (what sb3's ``VecTransposeImage`` gives its CNN), optionally grey. The observation
is a Dict: ``pixels`` and, with ``keep_state``, ``state``; ``--frame_stack`` stacks ``pixels``
only (``envs.frame_stack``, applied by ``envs.make.make_env``).
"""

from __future__ import annotations

from typing import Any

import cv2
import gymnasium as gym
import numpy as np
from gymnasium import spaces

from .render import render_frame, select_mujoco_gl
from .spec import PIXELS, STATE, PixelOptions


def check_pixel_env(spec: gym.envs.registration.EnvSpec) -> None:
    """Refuse, before any process starts, envs that cannot render frames for us."""
    entry = spec.entry_point if isinstance(spec.entry_point, str) else ""
    if not entry.startswith("gymnasium.envs.mujoco"):
        raise ValueError(f"--pixel_obs_wrapper renders MuJoCo envs; {spec.id} is not one ({entry or spec.entry_point})")


def make_pixel_env(gym_id: str, kwargs: dict[str, Any], opts: PixelOptions) -> gym.Env:
    select_mujoco_gl()
    cv2.setNumThreads(0)  # several workers share few cores: no OpenCV thread pool per worker
    kwargs = {"width": opts.image_size, "height": opts.image_size, **kwargs}
    return PixelObservation(gym.make(gym_id, render_mode="rgb_array", **kwargs), opts)


class PixelObservation(gym.Wrapper):
    """Replace the observation by rendered frames (and optionally keep the state)."""

    def __init__(self, env: gym.Env, opts: PixelOptions):
        super().__init__(env)
        self.opts = opts
        channels = 1 if opts.grayscale else 3
        obs_spaces: dict[str, spaces.Space] = {
            PIXELS: spaces.Box(0, 255, (channels, opts.image_size, opts.image_size), np.uint8)
        }
        if opts.keep_state:
            obs_spaces[STATE] = env.observation_space
        self.observation_space = spaces.Dict(obs_spaces)

    def _frame(self) -> np.ndarray:
        frame = render_frame(self.env)  # [H, W, 3] uint8
        size = self.opts.image_size
        if frame.shape[0] != size or frame.shape[1] != size:
            frame = cv2.resize(frame, (size, size), interpolation=cv2.INTER_AREA)
        if self.opts.grayscale:
            return cv2.cvtColor(frame, cv2.COLOR_RGB2GRAY)[None]
        return np.ascontiguousarray(frame.transpose(2, 0, 1))  # its own array: the renderer may reuse its buffer

    def _observe(self, state: Any) -> dict[str, np.ndarray]:
        obs = {PIXELS: self._frame()}
        if self.opts.keep_state:
            obs[STATE] = state
        return obs

    def reset(self, **kwargs: Any):
        state, info = self.env.reset(**kwargs)
        return self._observe(state), info

    def step(self, action: Any):
        state, reward, terminated, truncated, info = self.env.step(action)
        return self._observe(state), reward, terminated, truncated, info
