"""ppo_dict: PPO with Stable-Baselines3's numbers, bit for bit, and shared-memory env workers.

``PPO``, ``MaskablePPO``, ``RecurrentPPO``, ``MaskableRecurrentPPO`` and ``make_vec_env`` (sb3's API on ppo_dict's
trainer: ``ppo_dict.api``) and ``ShmVecEnv`` (an sb3 ``VecEnv``) are loaded on first use, so that importing ppo_dict
does not import stable_baselines3, an optional dependency.
"""

from typing import Any

#: name -> module of the names loaded on first use
_LAZY = {
    "ShmVecEnv": "ppo_dict.vec.shm_vec_env",
    "PPO": "ppo_dict.api",
    "MaskablePPO": "ppo_dict.api",
    "RecurrentPPO": "ppo_dict.api",
    "MaskableRecurrentPPO": "ppo_dict.api",
    "make_vec_env": "ppo_dict.api",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'ppo_dict' has no attribute {name!r}")
