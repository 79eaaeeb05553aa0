"""ppo_dict: PPO with Stable-Baselines3's numbers, bit for bit, and shared-memory env workers.

``ShmVecEnv`` (an sb3 ``VecEnv``) is loaded on first use, so that importing ppo_dict does not
import stable_baselines3, an optional dependency.
"""
from typing import Any


def __getattr__(name: str) -> Any:
    if name == "ShmVecEnv":
        from ppo_dict.vec.shm_vec_env import ShmVecEnv

        return ShmVecEnv
    raise AttributeError(f"module 'ppo_dict' has no attribute {name!r}")
