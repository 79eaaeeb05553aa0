"""rl-zoo's ``NoVel`` envs: classic-control and Box2D tasks with their velocities hidden (partially observed: what a
recurrent policy is for), registered as rl-zoo registers them (``rl_zoo3.import_envs``) without importing rl_zoo3,
whose import replaces gymnasium's ``TimeLimit`` for the whole process.

``<Name>NoVel-v<version>`` makes ``gymnasium.make("<Name>-v<version>")`` inside :class:`MaskVelocityWrapper`, which
multiplies each observation by a mask of ones with zeros at the velocity entries: rl-zoo's wrapper and arithmetic
(``observation * mask``, the mask in the observation's dtype), so the observations are rl-zoo's bit for bit. Where
rl_zoo3 registered an id first (``--gym_packages rl_zoo3.import_envs``), its registration is kept.
"""

from __future__ import annotations

from typing import Optional

import gymnasium as gym
import numpy as np

MODULE = "ppo_dict.envs.no_velocity"
#: rl-zoo's ``MaskVelocityWrapper.velocity_indices``: the observation entries that are velocities
VELOCITY_INDICES = {
    "CartPole-v1": (1, 3),
    "MountainCar-v0": (1,),
    "MountainCarContinuous-v0": (1,),
    "Pendulum-v1": (2,),
    "LunarLander-v3": (2, 3, 5),
    "LunarLanderContinuous-v3": (2, 3, 5),
}


def no_velocity_id(env_id: str) -> str:
    """``CartPole-v1`` -> ``CartPoleNoVel-v1`` (rl-zoo's naming)."""
    name, version = env_id.split("-v")
    return f"{name}NoVel-v{version}"


#: the NoVel ids -> the env each hides the velocities of
NO_VELOCITY_IDS = {no_velocity_id(env_id): env_id for env_id in VELOCITY_INDICES}


class MaskVelocityWrapper(gym.ObservationWrapper):
    """rl-zoo's ``MaskVelocityWrapper``: observations times a mask that zeroes the velocity entries of ``env_id``."""

    def __init__(self, env: gym.Env, env_id: str):
        super().__init__(env)
        self.mask = np.ones_like(env.observation_space.sample())
        self.mask[np.array(VELOCITY_INDICES[env_id])] = 0.0

    def observation(self, observation: np.ndarray) -> np.ndarray:
        return observation * self.mask


def make_no_velocity(env_id: str, render_mode: Optional[str] = None, **kwargs) -> gym.Env:
    """``env_id`` made by gymnasium (its time limit included), its velocities masked (rl-zoo's ``create_no_vel_env``)."""
    return MaskVelocityWrapper(gym.make(env_id, render_mode=render_mode, **kwargs), env_id)


def register() -> None:
    """Register every NoVel id that nothing registered yet (idempotent)."""
    for no_vel, env_id in NO_VELOCITY_IDS.items():
        if no_vel not in gym.registry:
            gym.register(id=no_vel, entry_point=f"{MODULE}:make_no_velocity", kwargs={"env_id": env_id})


register()
