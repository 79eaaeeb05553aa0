"""``test_dummy``: a cheap, learnable pixel env for benchmarking and testing the pipeline.

Every step shows one of ``n_targets`` images (a bright vertical stripe in band k of the image,
channel-first uint8) chosen at random; the reward says how well the action named the band shown:
Discrete actions earn 1 for the right band, Box actions ``1 - mean((a - y)^2) / 4`` with y the
target's +-1 code. Random play earns ``episode_length / n_targets`` (Discrete) per episode, a
policy that reads the image earns ``episode_length``. Episodes end by time limit (truncation).
With ``state_dim > 0`` the observation is a Dict of the image (``"image"``) and a float32 vector of
``state_dim`` uniform numbers in [-1, 1] (``"state"``): an image beside a vector, as sb3's
MultiInputPolicy takes them. Registered as a gymnasium id, so sb3 can make the very same env.
"""

from __future__ import annotations

from typing import Any, Optional

import gymnasium as gym
import numpy as np
from gymnasium import spaces

GYM_ID = "PPODictTestDummy-v0"
DEFAULTS = dict(image_size=84, channels=3, n_targets=4, continuous=False, episode_length=100, channel_last=False, state_dim=0)


def check_kwargs(kwargs: dict[str, Any]) -> None:
    unknown = sorted(set(kwargs) - set(DEFAULTS))
    if unknown:
        raise ValueError(f"test_dummy has no option(s) {unknown}; it takes {sorted(DEFAULTS)}")
    merged = {**DEFAULTS, **kwargs}
    if not (isinstance(merged["image_size"], int) and merged["image_size"] >= 8):
        raise ValueError(f"test_dummy image_size={merged['image_size']!r}: must be an int >= 8")
    if not (isinstance(merged["n_targets"], int) and 2 <= merged["n_targets"] <= merged["image_size"]):
        raise ValueError(f"test_dummy n_targets={merged['n_targets']!r}: must be an int in [2, image_size]")
    if not (isinstance(merged["state_dim"], int) and merged["state_dim"] >= 0):
        raise ValueError(f"test_dummy state_dim={merged['state_dim']!r}: must be an int >= 0")


class DummyPixelEnv(gym.Env):
    metadata = {"render_modes": ["rgb_array"]}

    def __init__(
        self,
        image_size: int = 84,
        channels: int = 3,
        n_targets: int = 4,
        continuous: bool = False,
        episode_length: int = 100,
        channel_last: bool = False,
        state_dim: int = 0,
        render_mode: Optional[str] = None,
    ):
        self.n_targets, self.episode_length, self.continuous = n_targets, episode_length, continuous
        self.render_mode = render_mode
        self.channel_last = channel_last  # [H, W, C] like most image envs (sb3 then transposes)
        shape = (image_size, image_size, channels) if channel_last else (channels, image_size, image_size)
        self.state_dim = state_dim
        image_space = spaces.Box(0, 255, shape, np.uint8)
        if state_dim:
            self.observation_space = spaces.Dict(
                {"image": image_space, "state": spaces.Box(-1.0, 1.0, (state_dim,), np.float32)}
            )
        else:
            self.observation_space = image_space
        if continuous:
            self.action_space = spaces.Box(-1.0, 1.0, (n_targets,), np.float32)
        else:
            self.action_space = spaces.Discrete(n_targets)
        self._images = np.zeros((n_targets, channels, image_size, image_size), dtype=np.uint8)
        edges = np.linspace(0, image_size, n_targets + 1).astype(int)
        for k in range(n_targets):
            self._images[k, :, :, edges[k] : edges[k + 1]] = 255
        self._codes = np.where(np.eye(n_targets, dtype=np.float32) > 0, 1.0, -1.0).astype(np.float32)
        self._target, self._t = 0, 0

    def _observe(self) -> Any:
        self._target = int(self.np_random.integers(self.n_targets))
        image = self._images[self._target]
        image = np.ascontiguousarray(image.transpose(1, 2, 0)) if self.channel_last else image.copy()
        if not self.state_dim:
            return image
        return {"image": image, "state": self.np_random.uniform(-1.0, 1.0, self.state_dim).astype(np.float32)}

    def reset(self, *, seed: Optional[int] = None, options: Optional[dict] = None):
        super().reset(seed=seed)
        self._t = 0
        return self._observe(), {}

    def step(self, action: Any):
        if self.continuous:
            a = np.clip(np.asarray(action, dtype=np.float32), -1.0, 1.0)
            reward = 1.0 - float(np.mean((a - self._codes[self._target]) ** 2)) / 4.0
        else:
            reward = 1.0 if int(action) == self._target else 0.0
        self._t += 1
        return self._observe(), reward, False, self._t >= self.episode_length, {}

    def render(self) -> np.ndarray:
        return self._images[self._target].transpose(1, 2, 0).copy()


if GYM_ID not in gym.registry:
    gym.register(id=GYM_ID, entry_point="ppo_dict.envs.dummy:DummyPixelEnv")
