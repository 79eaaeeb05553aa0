"""``PPODictKeyDoor-v0``: a small room that needs both memory and invalid-action masks.

The agent starts at the middle of the bottom row of a ``height x width`` room. At its first step
only, the observation shows the colour of the key it holds (one of ``colours``); after that the
cue is gone. The top row holds one door per colour, spread along it. Walking onto a door and
opening it (the ``open`` action) ends the episode: +1 for the door of the key's colour, -1 for any
other. Each step costs 0.01; episodes are cut at ``episode_length`` steps (truncated).

Actions, ``Discrete(5)``: 0 up, 1 down, 2 left, 3 right, 4 open. ``action_masks()`` says which are
valid: a move that would leave the room is invalid, and ``open`` is valid only on a door. An
invalid action (taken without masks) costs ``invalid_penalty`` and changes nothing, so an agent
without masks can still play, slower.

So a policy without memory (a masked MLP) can do no better than guess a door once the cue is gone
(half its episodes with two colours); one without masks first has to learn the walls and when
``open`` does anything.

Observations, float32: the agent's cell one-hot (``height * width``), then the key's colour one-hot
(``colours`` entries; all zero after the first step).

``all_valid=True``: ``action_masks()`` allows every action (the game's rules unchanged): a masked
run whose masks change nothing (``tests/test_recurrent_masking.py`` compares it with sb3-contrib).

``python -m ppo_dict.main_ppo --env gym_PPODictKeyDoor-v0 --gym_packages ppo_dict.envs.key_door
--model mlp_lstm --action_masks True``
"""
from __future__ import annotations

from typing import Any, Optional

import gymnasium as gym
import numpy as np
from gymnasium import spaces

GYM_ID = "PPODictKeyDoor-v0"
UP, DOWN, LEFT, RIGHT, OPEN = range(5)
MOVES = {UP: (-1, 0), DOWN: (1, 0), LEFT: (0, -1), RIGHT: (0, 1)}


class KeyDoorEnv(gym.Env):
    """The room (see the module doc)."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": 4}

    def __init__(self, height: int = 3, width: int = 5, colours: int = 2, episode_length: int = 30,
                 invalid_penalty: float = 0.05, all_valid: bool = False, render_mode: Optional[str] = None):
        if height < 2 or width < colours or colours < 2 or episode_length < 1:
            raise ValueError(f"{GYM_ID}: needs height >= 2, colours >= 2, width >= colours and episode_length >= 1; "
                             f"got height={height}, width={width}, colours={colours}, episode_length={episode_length}")
        self.height, self.width, self.colours = height, width, colours
        self.episode_length, self.invalid_penalty, self.all_valid = episode_length, invalid_penalty, all_valid
        self.render_mode = render_mode
        self.action_space = spaces.Discrete(5)
        self.observation_space = spaces.Box(0.0, 1.0, (height * width + colours,), np.float32)
        # the doors: one per colour, spread along the top row
        self.doors = [(0, int(round(i * (width - 1) / (colours - 1)))) for i in range(colours)]
        self._pos, self._key, self._t = (height - 1, width // 2), 0, 0

    def _observe(self) -> np.ndarray:
        obs = np.zeros(self.observation_space.shape, dtype=np.float32)
        obs[self._pos[0] * self.width + self._pos[1]] = 1.0
        if self._t == 0:  # the cue: only before the first action
            obs[self.height * self.width + self._key] = 1.0
        return obs

    def valid_actions(self) -> np.ndarray:
        """bool ``[5]``: the moves that stay in the room, and ``open`` on a door."""
        valid = np.zeros(5, dtype=bool)
        for action, (dr, dc) in MOVES.items():
            valid[action] = 0 <= self._pos[0] + dr < self.height and 0 <= self._pos[1] + dc < self.width
        valid[OPEN] = self._pos in self.doors
        return valid

    def action_masks(self) -> np.ndarray:
        """sb3-contrib's method: :meth:`valid_actions` (every action with ``all_valid``)."""
        return np.ones(5, dtype=bool) if self.all_valid else self.valid_actions()

    def reset(self, *, seed: Optional[int] = None, options: Optional[dict] = None):
        super().reset(seed=seed)
        self._pos, self._key, self._t = (self.height - 1, self.width // 2), int(self.np_random.integers(self.colours)), 0
        return self._observe(), {}

    def step(self, action: Any):
        action = int(np.asarray(action).reshape(-1)[0])
        valid = self.valid_actions()[action]
        self._t += 1
        reward, terminated = -0.01, False
        if not valid:
            reward -= self.invalid_penalty
        elif action == OPEN:
            reward += 1.0 if self.doors.index(self._pos) == self._key else -1.0
            terminated = True
        else:
            dr, dc = MOVES[action]
            self._pos = (self._pos[0] + dr, self._pos[1] + dc)
        return self._observe(), float(reward), terminated, self._t >= self.episode_length, {}

    def render(self) -> np.ndarray:
        """``uint8[height, width, 3]``: the agent white, the doors grey (the key's door light grey)."""
        picture = np.zeros((self.height, self.width, 3), dtype=np.uint8)
        for i, (r, c) in enumerate(self.doors):
            picture[r, c] = 200 if i == self._key else 100
        picture[self._pos] = 255
        return picture


if GYM_ID not in gym.registry:
    gym.register(id=GYM_ID, entry_point="ppo_dict.envs.key_door:KeyDoorEnv")
