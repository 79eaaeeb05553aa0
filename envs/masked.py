"""``PPODictMaskedJump-v0``: a small game where most actions are invalid, for ``--action_masks``.

A token stands on a board and must reach a target cell. Each step the agent names the cell to jump
to, but only cells within ``reach`` of the token are valid (as in sb3-contrib's InvalidActionEnv
tests, most actions are invalid at any time); ``action_masks()`` says which. A valid jump moves
the token; an invalid one costs ``invalid_penalty`` and leaves it where it was (so an agent
without masks can still play, badly). Each step costs 0.05, reaching the target gives 1 and ends
the episode (terminated); episodes are cut at ``episode_length`` steps (truncated).

``python -m ppo_dict.main_ppo --env gym_PPODictMaskedJump-v0 --gym_packages ppo_dict.envs.masked
--action_masks True``

Actions (``action=``):

* ``discrete``: ``Discrete(size)``, the cell of a line of ``size`` cells; valid: the cells at
  distance 1 to ``reach``.
* ``multi_discrete``: ``MultiDiscrete([size, size])``, the column and row on a ``size x size``
  board; valid per axis: within ``reach`` (staying on an axis is allowed, the pair must move).
  The mask is flat, ``2 * size`` entries (sb3-contrib's ``sum(nvec)``).
* ``multi_binary``: ``MultiBinary(size)``, switches that toggle ``size`` lights towards a
  target pattern; each step only ``reach`` switches (drawn at random) may toggle: the mask is
  ``2 * size`` entries, for each switch ``[may stay, may toggle]``.

Observations (``observation=``): ``box``, float32 one-hot position(s) then target(s) (for
``multi_binary``: the lights, then the target bits); ``dict``, the two halves as ``position`` and
``target``; ``image``, that vector drawn as a channel-last uint8 picture ``[image_size, image_size, 1]``
(entry k a square in a grid of ``ceil(sqrt(len))`` squares a side, 255 for a position, 160 for a
target, over a fixed texture of grays below 64, so that pixels take many values; sb3 transposes it,
as any channel-last image); ``dict_image``, the position(s) drawn channel-first ``[1, image_size,
image_size]`` as ``image`` beside the float32 ``target`` (an image and a vector: MultiInputPolicy).
``PPODictMaskedJumpMasker-v0`` is the same game without the ``action_masks`` method, wrapped in
sb3-contrib's ``ActionMasker`` (sb3-contrib needed only for that id).
"""

from __future__ import annotations

from typing import Any, Optional

import gymnasium as gym
import numpy as np
from gymnasium import spaces

GYM_ID = "PPODictMaskedJump-v0"
MASKER_ID = "PPODictMaskedJumpMasker-v0"
ACTIONS = ("discrete", "multi_discrete", "multi_binary")
OBSERVATIONS = ("box", "dict", "image", "dict_image")


class JumpGame(gym.Env):
    """The game (see the module doc); :meth:`valid_actions` is its mask, without sb3-contrib's method name."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": 4}

    def __init__(
        self,
        action: str = "discrete",
        size: int = 12,
        reach: int = 2,
        episode_length: int = 40,
        invalid_penalty: float = 0.5,
        observation: str = "box",
        render_mode: Optional[str] = None,
        image_size: int = 36,
    ):
        axes = 2 if action == "multi_discrete" else 1
        grid = int(np.ceil(np.sqrt(2 * axes * size)))  # squares a side when the whole vector is drawn
        if action not in ACTIONS or observation not in OBSERVATIONS or size < 2 or not 1 <= reach < size or image_size < grid:
            raise ValueError(
                f"{GYM_ID}: action must be one of {ACTIONS}, observation one of {OBSERVATIONS}, size >= 2, "
                f"1 <= reach < size and image_size >= {grid}; got action={action!r}, "
                f"observation={observation!r}, size={size}, reach={reach}, image_size={image_size}"
            )
        self.observation, self.render_mode, self.image_size = observation, render_mode, image_size
        self.kind, self.size, self.reach = action, size, reach
        self.episode_length, self.invalid_penalty = episode_length, invalid_penalty
        if action == "discrete":
            self.action_space = spaces.Discrete(size)
        elif action == "multi_discrete":
            self.action_space = spaces.MultiDiscrete([size, size])
        else:
            self.action_space = spaces.MultiBinary(size)
        self.observation_space = self._space(axes * size)
        cells = size if action == "multi_binary" else axes  # the lights, or the token's coordinates
        self._pos = np.zeros(cells, dtype=np.int64)
        self._target = np.zeros(cells, dtype=np.int64)
        self._free = np.zeros(size, dtype=bool)  # multi_binary: the switches that may toggle this step
        self._t = 0

    def _space(self, half: int) -> spaces.Space:
        """The observation space of ``self.observation``; ``half``: entries of the position(s) (and of the target(s))."""
        vector = spaces.Box(0.0, 1.0, (half,), np.float32)
        picture = (self.image_size, self.image_size)
        if self.observation == "dict":
            return spaces.Dict({"position": vector, "target": vector})
        if self.observation == "image":
            return spaces.Box(0, 255, (*picture, 1), np.uint8)
        if self.observation == "dict_image":
            return spaces.Dict({"image": spaces.Box(0, 255, (1, *picture), np.uint8), "target": vector})
        return spaces.Box(0.0, 1.0, (2 * half,), np.float32)

    def _draw(self, levels: np.ndarray) -> np.ndarray:
        """uint8 levels (0: not drawn) as a ``[image_size, image_size]`` picture: entry k a square of its
        level in a row-major grid, over the texture ``(7 (row + col)) % 64``."""
        grid = int(np.ceil(np.sqrt(len(levels))))
        square = self.image_size // grid
        cells = np.zeros(grid * grid, dtype=np.uint8)
        cells[: len(levels)] = levels
        squares = np.zeros((self.image_size, self.image_size), dtype=np.uint8)
        squares[: grid * square, : grid * square] = np.kron(
            cells.reshape(grid, grid), np.ones((square, square), dtype=np.uint8)
        )
        lines = np.arange(self.image_size)
        texture = ((7 * np.add.outer(lines, lines)) % 64).astype(np.uint8)
        return np.where(squares > 0, squares, texture)

    # ------------------------------------------------------------------ state
    def _halves(self) -> np.ndarray:
        """float32 ``[2, half]``: the position(s) (or lights), then the target(s), as the module doc lays them out."""
        if self.kind == "multi_binary":
            obs = np.stack([self._pos, self._target]).astype(np.float32)
        else:
            obs = np.zeros((2, len(self._pos), self.size), dtype=np.float32)
            for axis in range(len(self._pos)):
                obs[0, axis, self._pos[axis]] = obs[1, axis, self._target[axis]] = 1.0
        return obs.reshape(2, -1)

    def _observe(self) -> Any:
        halves = self._halves()
        if self.observation == "dict":
            return {"position": halves[0].copy(), "target": halves[1].copy()}
        levels = (halves * np.array([[255], [160]], dtype=np.float32)).astype(np.uint8)  # positions 255, targets 160
        if self.observation == "image":
            return self._draw(levels.reshape(-1))[:, :, None]
        if self.observation == "dict_image":
            return {"image": self._draw(levels[0])[None], "target": halves[1].copy()}
        return halves.reshape(-1)

    def _draw_free(self) -> None:
        self._free[:] = False
        self._free[self.np_random.choice(self.size, self.reach, replace=False)] = True

    def valid_actions(self) -> np.ndarray:
        """bool ``[mask_dim]``: the actions that are valid now (the layout of the module doc)."""
        if self.kind == "multi_binary":
            return np.stack([np.ones(self.size, dtype=bool), self._free], axis=1).reshape(-1)
        cells = np.arange(self.size)
        rows = [np.abs(cells - p) <= self.reach for p in self._pos]
        if self.kind == "discrete":
            rows[0][self._pos[0]] = False  # a jump must move
        return np.concatenate(rows)

    def _is_valid(self, action: np.ndarray) -> bool:
        if self.kind == "multi_binary":
            return bool(np.all(self._free[action.astype(bool)]))
        inside = np.all(np.abs(action - self._pos) <= self.reach)
        return bool(inside and np.any(action != self._pos))

    # ------------------------------------------------------------------ gymnasium API
    def reset(self, *, seed: Optional[int] = None, options: Optional[dict] = None):
        super().reset(seed=seed)
        self._t = 0
        if self.kind == "multi_binary":
            self._pos[:] = self.np_random.integers(0, 2, self.size)
            self._target[:] = self.np_random.integers(0, 2, self.size)
            self._draw_free()
        else:
            self._pos[:] = self.np_random.integers(0, self.size, len(self._pos))
            self._target[:] = self.np_random.integers(0, self.size, len(self._pos))
        return self._observe(), {}

    def step(self, action: Any):
        action = np.asarray(action, dtype=np.int64).reshape(-1)
        self._t += 1
        reward = -0.05
        if not self._is_valid(action):
            reward -= self.invalid_penalty
        elif self.kind == "multi_binary":
            self._pos ^= action
        else:
            self._pos[:] = action
        if self.kind == "multi_binary":
            self._draw_free()
        reached = bool(np.array_equal(self._pos, self._target))
        reward += 1.0 if reached else 0.0
        return self._observe(), float(reward), reached, self._t >= self.episode_length, {}

    def render(self) -> np.ndarray:
        """The observation as a tiny ``uint8[2, cells, 3]`` picture: position(s) above, target(s) below."""
        return np.repeat((self._halves()[:, :, None] * 255).astype(np.uint8), 3, axis=2)


class MaskedJumpEnv(JumpGame):
    """The game with sb3-contrib's method name: ``action_masks()``; ``all_valid=True``: masks allowing every action
    (the game's rules unchanged: a masked run whose masks change nothing, ``tests/parity/test_masked_recurrent_parity.py``)."""

    def __init__(self, *args: Any, all_valid: bool = False, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.all_valid = all_valid

    def action_masks(self) -> np.ndarray:
        valid = self.valid_actions()
        return np.ones_like(valid) if self.all_valid else valid


def make_masker(**kwargs: Any) -> gym.Env:
    """The game in sb3-contrib's ``ActionMasker`` (sb3-contrib imported here only)."""
    from sb3_contrib.common.wrappers import ActionMasker

    return ActionMasker(JumpGame(**kwargs), lambda env: env.valid_actions())


if GYM_ID not in gym.registry:
    gym.register(id=GYM_ID, entry_point="ppo_dict.envs.masked:MaskedJumpEnv")
if MASKER_ID not in gym.registry:
    gym.register(id=MASKER_ID, entry_point="ppo_dict.envs.masked:make_masker")
