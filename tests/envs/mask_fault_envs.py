"""Envs whose ``action_masks()`` goes wrong, for ``tests/test_masking.py``: imported through
``--gym_packages tests.envs.mask_fault_envs`` (also by each worker process)."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from ppo_dict.envs.masked import MaskedJumpEnv

GYM_ID = "PPODictBadMask-v0"


class BadMaskEnv(MaskedJumpEnv):
    """``PPODictMaskedJump-v0`` (Discrete, 12 cells) whose mask is wrong from step ``at_step`` of its
    life on: ``bad`` = ``shape`` (one entry short), ``dtype`` (floats 0.5), ``none`` (all False)."""

    def __init__(self, bad: str = "shape", at_step: int = 3, **kwargs: Any):
        super().__init__(**kwargs)
        self.bad, self.at_step, self.steps = bad, at_step, 0

    def step(self, action: Any):
        self.steps += 1
        return super().step(action)

    def action_masks(self) -> Any:
        mask = self.valid_actions()
        if self.steps < self.at_step:
            return mask
        if self.bad == "shape":
            return mask[:-1]
        if self.bad == "dtype":
            return mask * 0.5
        return np.zeros_like(mask)


if GYM_ID not in gym.registry:
    gym.register(id=GYM_ID, entry_point="tests.envs.mask_fault_envs:BadMaskEnv")
