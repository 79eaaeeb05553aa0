"""``PPODictToy-v0``: a cheap, learnable env over every observation and action space sb3 takes.

Each step shows a target code, ``k`` digits in ``[0, m)`` drawn at random, encoded in the chosen
observation space; the reward (in [0, 1]) says how well the action named it. A policy that reads
the observation earns 1 per step, random play much less. Episodes are cut at ``episode_length``
steps (truncated) and end at random with probability ``end_probability`` per step (terminated), so
both kinds of episode end occur. ``reward="shown"``: the reward is the shown code's mean digit over ``m - 1``,
whatever the action, so that rollouts that sample other actions step the same envs through the same rewards
(``tests/test_schedules.py``). Used by the parity tests of the spaces sb3 supports, and for ``ShmVecEnv`` with the
spaces sb3's vec envs take (Tuple observations, Dict and Tuple actions).

``python -m ppo_dict.main_ppo --env gym_PPODictToy-v0 --gym_packages ppo_dict.envs.toy
--env_kwargs "dict(observation='dict', action='multi_binary')"``

Observations (``observation=``): ``box`` (one-hot float32), ``discrete`` (the code's index),
``multi_discrete`` (the digits), ``multi_binary`` (one-hot bits), ``dict`` (all four), ``tuple``
(all four; sb3's PPO refuses it, its vec envs take it). Actions (``action=``): ``box`` (+-1 code),
``discrete``, ``multi_discrete``, ``multi_binary``, and ``dict`` / ``tuple`` of a discrete and a
multi-binary part (for vec envs only).
"""

from __future__ import annotations

from typing import Any, Optional

import gymnasium as gym
import numpy as np
from gymnasium import spaces

GYM_ID = "PPODictToy-v0"
OBSERVATIONS = ("box", "discrete", "multi_discrete", "multi_binary", "dict", "tuple")
ACTIONS = ("box", "discrete", "multi_discrete", "multi_binary", "dict", "tuple")
#: ``named``: how well the action named the code; ``shown``: the code's mean digit, whatever the action
REWARDS = ("named", "shown")


def _leaf_spaces(k: int, m: int) -> dict[str, spaces.Space]:
    return {
        "box": spaces.Box(0.0, 1.0, (k * m,), np.float32),
        "discrete": spaces.Discrete(m**k),
        "multi_discrete": spaces.MultiDiscrete([m] * k),
        "multi_binary": spaces.MultiBinary(k * m),
    }


class ToySpacesEnv(gym.Env):
    """Name the shown code: observation and action spaces chosen by name (see the module doc)."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": 30}

    def __init__(
        self,
        observation: str = "box",
        action: str = "multi_discrete",
        k: int = 2,
        m: int = 3,
        episode_length: int = 20,
        end_probability: float = 0.02,
        reward: str = "named",
        render_mode: Optional[str] = None,
    ):
        if observation not in OBSERVATIONS or action not in ACTIONS or reward not in REWARDS:
            raise ValueError(
                f"PPODictToy: observation must be one of {OBSERVATIONS}, action one of {ACTIONS} and reward one "
                f"of {REWARDS}, got {observation!r}, {action!r}, {reward!r}"
            )
        self.reward_kind = reward
        self.k, self.m, self.kind, self.action_kind = k, m, observation, action
        self.episode_length, self.end_probability, self.render_mode = episode_length, end_probability, render_mode
        leaves = _leaf_spaces(k, m)
        if observation == "dict":
            self.observation_space = spaces.Dict(leaves)
        elif observation == "tuple":
            self.observation_space = spaces.Tuple(tuple(leaves.values()))
        else:
            self.observation_space = leaves[observation]
        parts = {"choice": spaces.Discrete(m**k), "bits": spaces.MultiBinary(k * m)}
        if action == "box":
            self.action_space = spaces.Box(-1.0, 1.0, (k * m,), np.float32)
        elif action in ("dict", "tuple"):
            self.action_space = spaces.Dict(parts) if action == "dict" else spaces.Tuple(tuple(parts.values()))
        else:
            self.action_space = leaves[action]
        self._digits, self._t = np.zeros(k, np.int64), 0

    def _encodings(self) -> dict[str, Any]:
        one_hot = np.zeros((self.k, self.m), np.int8)
        one_hot[np.arange(self.k), self._digits] = 1
        return {
            "box": one_hot.reshape(-1).astype(np.float32),
            "discrete": int(np.dot(self._digits, self.m ** np.arange(self.k))),
            "multi_discrete": self._digits.copy(),
            "multi_binary": one_hot.reshape(-1),
        }

    def _observe(self) -> Any:
        self._digits = self.np_random.integers(self.m, size=self.k)
        codes = self._encodings()
        if self.kind == "dict":
            return codes
        if self.kind == "tuple":
            return tuple(codes.values())
        return codes[self.kind]

    def _reward(self, action: Any) -> float:
        if self.reward_kind == "shown":
            return float(np.mean(self._digits)) / (self.m - 1)
        codes = self._encodings()
        if self.action_kind == "box":
            signed = np.where(codes["multi_binary"] > 0, 1.0, -1.0)
            return 1.0 - float(np.mean((np.clip(np.asarray(action, np.float64), -1, 1) - signed) ** 2)) / 4.0
        if self.action_kind == "discrete":
            return float(int(action) == codes["discrete"])
        if self.action_kind == "multi_discrete":
            return float(np.mean(np.asarray(action) == self._digits))
        if self.action_kind == "multi_binary":
            return float(np.mean(np.asarray(action) == codes["multi_binary"]))
        choice, bits = (action["choice"], action["bits"]) if self.action_kind == "dict" else action
        return 0.5 * float(int(choice) == codes["discrete"]) + 0.5 * float(np.mean(np.asarray(bits) == codes["multi_binary"]))

    def reset(self, *, seed: Optional[int] = None, options: Optional[dict] = None):
        super().reset(seed=seed)
        self._t = 0
        return self._observe(), {}

    def step(self, action: Any):
        reward = self._reward(action)
        self._t += 1
        terminated = bool(self.np_random.random() < self.end_probability)
        return self._observe(), reward, terminated, self._t >= self.episode_length, {}

    def render(self) -> np.ndarray:
        """The code as a tiny ``uint8[k, m, 3]`` picture (bright where a digit is)."""
        bits = self._encodings()["multi_binary"].astype(np.uint8).reshape(self.k, self.m, 1)
        return np.repeat(bits * np.uint8(255), 3, axis=2)


if GYM_ID not in gym.registry:
    gym.register(id=GYM_ID, entry_point="ppo_dict.envs.toy:ToySpacesEnv")
