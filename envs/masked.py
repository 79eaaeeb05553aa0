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
``multi_binary``: the lights, then the target bits); ``dict``, the two halves as ``position`` and ``target``.
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
OBSERVATIONS = ("box", "dict")


class JumpGame(gym.Env):
    """The game (see the module doc); :meth:`valid_actions` is its mask, without sb3-contrib's method name."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": 4}

    def __init__(self, action: str = "discrete", size: int = 12, reach: int = 2, episode_length: int = 40,
                 invalid_penalty: float = 0.5, observation: str = "box", render_mode: Optional[str] = None):
        if action not in ACTIONS or observation not in OBSERVATIONS or size < 2 or not 1 <= reach < size:
            raise ValueError(f"{GYM_ID}: action must be one of {ACTIONS}, observation one of {OBSERVATIONS}, size >= 2 and "
                             f"1 <= reach < size; got action={action!r}, observation={observation!r}, size={size}, reach={reach}")
        self.dict_obs, self.render_mode = observation == "dict", render_mode
        self.kind, self.size, self.reach = action, size, reach
        self.episode_length, self.invalid_penalty = episode_length, invalid_penalty
        axes = 2 if action == "multi_discrete" else 1
        if action == "discrete":
            self.action_space = spaces.Discrete(size)
        elif action == "multi_discrete":
            self.action_space = spaces.MultiDiscrete([size, size])
        else:
            self.action_space = spaces.MultiBinary(size)
        half = spaces.Box(0.0, 1.0, (axes * size,), np.float32)
        self.observation_space = spaces.Dict({"position": half, "target": half}) if self.dict_obs else spaces.Box(0.0, 1.0, (2 * axes * size,), np.float32)
        cells = size if action == "multi_binary" else axes  # the lights, or the token's coordinates
        self._pos = np.zeros(cells, dtype=np.int64)
        self._target = np.zeros(cells, dtype=np.int64)
        self._free = np.zeros(size, dtype=bool)  # multi_binary: the switches that may toggle this step
        self._t = 0

    # ------------------------------------------------------------------ state
    def _observe(self) -> Any:
        if self.kind == "multi_binary":
            obs = np.stack([self._pos, self._target]).astype(np.float32)
        else:
            obs = np.zeros((2, len(self._pos), self.size), dtype=np.float32)
            for axis in range(len(self._pos)):
                obs[0, axis, self._pos[axis]] = obs[1, axis, self._target[axis]] = 1.0
        obs = obs.reshape(2, -1)
        return {"position": obs[0].copy(), "target": obs[1].copy()} if self.dict_obs else obs.reshape(-1)

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
        obs = self._observe()
        flat = np.concatenate([obs["position"], obs["target"]]) if self.dict_obs else obs
        return np.repeat((flat.reshape(2, -1, 1) * 255).astype(np.uint8), 3, axis=2)


class MaskedJumpEnv(JumpGame):
    """The game with sb3-contrib's method name: ``action_masks()``."""

    def action_masks(self) -> np.ndarray:
        return self.valid_actions()


def make_masker(**kwargs: Any) -> gym.Env:
    """The game in sb3-contrib's ``ActionMasker`` (sb3-contrib imported here only)."""
    from sb3_contrib.common.wrappers import ActionMasker

    return ActionMasker(JumpGame(**kwargs), lambda env: env.valid_actions())


if GYM_ID not in gym.registry:
    gym.register(id=GYM_ID, entry_point="ppo_dict.envs.masked:MaskedJumpEnv")
if MASKER_ID not in gym.registry:
    gym.register(id=MASKER_ID, entry_point="ppo_dict.envs.masked:make_masker")
