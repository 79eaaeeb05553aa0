"""``PPODictKeyDoor-v0``: a small room that needs both memory and invalid-action masks.

The agent starts at the bottom of a corridor ``corridor`` cells long, one cell wide, that leads up
into the middle of the bottom row of a ``height x width`` room. At its first step only, the
observation shows the colour of the key it holds (one of ``colours``); after that the cue is gone.
The top row holds one door per colour, spread along it. Walking onto a door and
opening it (the ``open`` action) ends the episode: +1 for the door of the key's colour, -1 for any
other. Each step costs 0.01; episodes are cut at ``episode_length`` steps (truncated).

Actions, ``Discrete(5)``: 0 up, 1 down, 2 left, 3 right, 4 open. ``action_masks()`` says which are
valid: a move that would leave the room is invalid, and ``open`` is valid only on a door. An
invalid action (taken without masks) costs ``invalid_penalty`` and changes nothing, so an agent
without masks can still play, slower.

At the start "up" is the only valid move, so a masked policy cannot write the colour into its
position (a different first move for each colour), and after it the cue is gone: a
policy without memory (a masked MLP) can do no better than guess a door (half its episodes with two
colours); one without masks first has to learn the walls and when ``open`` does anything.

Observations, float32: the agent's cell one-hot over the ``(height + corridor) x width`` grid, then the
key's colour one-hot (``colours`` entries; all zero after the first step).

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

    def __init__(
        self,
        height: int = 3,
        width: int = 5,
        colours: int = 2,
        corridor: int = 1,
        episode_length: int = 30,
        invalid_penalty: float = 0.05,
        all_valid: bool = False,
        render_mode: Optional[str] = None,
    ):
        if height < 2 or width < colours or colours < 2 or corridor < 1 or episode_length < 1:
            raise ValueError(
                f"{GYM_ID}: needs height >= 2, colours >= 2, width >= colours, corridor >= 1 and episode_length "
                f">= 1; got height={height}, width={width}, colours={colours}, corridor={corridor}, "
                f"episode_length={episode_length}"
            )
        self.height, self.width, self.colours, self.rows = height, width, colours, height + corridor
        self.episode_length, self.invalid_penalty, self.all_valid = episode_length, invalid_penalty, all_valid
        self.render_mode = render_mode
        self.action_space = spaces.Discrete(5)
        self.observation_space = spaces.Box(0.0, 1.0, (self.rows * width + colours,), np.float32)
        # the cells: the room, then the corridor below its middle column; the doors: one per colour, spread along the top row
        self.cells = {(r, c) for r in range(height) for c in range(width)} | {
            (r, width // 2) for r in range(height, self.rows)
        }
        self.doors = [(0, int(round(i * (width - 1) / (colours - 1)))) for i in range(colours)]
        self.start = (self.rows - 1, width // 2)
        self._pos, self._key, self._t = self.start, 0, 0

    def _observe(self) -> np.ndarray:
        obs = np.zeros(self.observation_space.shape, dtype=np.float32)
        obs[self._pos[0] * self.width + self._pos[1]] = 1.0
        if self._t == 0:  # the cue: only before the first action
            obs[self.rows * self.width + self._key] = 1.0
        return obs

    def valid_actions(self) -> np.ndarray:
        """bool ``[5]``: the moves onto a cell (of the room or the corridor), and ``open`` on a door."""
        valid = np.zeros(5, dtype=bool)
        for action, (dr, dc) in MOVES.items():
            valid[action] = (self._pos[0] + dr, self._pos[1] + dc) in self.cells
        valid[OPEN] = self._pos in self.doors
        return valid

    def action_masks(self) -> np.ndarray:
        """sb3-contrib's method: :meth:`valid_actions` (every action with ``all_valid``)."""
        return np.ones(5, dtype=bool) if self.all_valid else self.valid_actions()

    def reset(self, *, seed: Optional[int] = None, options: Optional[dict] = None):
        super().reset(seed=seed)
        self._pos, self._key, self._t = self.start, int(self.np_random.integers(self.colours)), 0
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
        """``uint8[height + corridor, width, 3]``: the cells dark grey, the agent white, the doors grey (the key's door
        light grey)."""
        picture = np.zeros((self.rows, self.width, 3), dtype=np.uint8)
        for cell in self.cells:
            picture[cell] = 40
        for i, (r, c) in enumerate(self.doors):
            picture[r, c] = 200 if i == self._key else 100
        picture[self._pos] = 255
        return picture


if GYM_ID not in gym.registry:
    gym.register(id=GYM_ID, entry_point="ppo_dict.envs.key_door:KeyDoorEnv")
