"""GAE(lambda) advantages and TD(lambda) returns of a rollout, and the explained variance of its values, as sb3
computes them (``RolloutBuffer.compute_returns_and_advantage``, ``explained_variance``), expression for expression.
"""

from __future__ import annotations

import numpy as np


def compute_gae(
    rewards: np.ndarray,
    values: np.ndarray,
    episode_starts: np.ndarray,
    last_values: np.ndarray,
    last_dones: np.ndarray,
    gamma: float,
    gae_lambda: float,
) -> tuple[np.ndarray, np.ndarray]:
    """GAE(lambda) advantages and TD(lambda) returns, all float32, in sb3's evaluation order.

    rewards, values, episode_starts: float32[T, N]; last_values: float32[N] (V of the obs after
    the last step); last_dones: bool[N] (episode ends of the last step). A float64 GAE cast back
    to float32 differs from sb3 by ~1e-6, so the loop stays float32 like sb3's.
    Returns ``(advantages, returns)``, float32[T, N].
    """
    n_steps = rewards.shape[0]
    advantages = np.zeros_like(rewards)
    last_gae_lam = 0
    for step in reversed(range(n_steps)):
        if step == n_steps - 1:
            next_non_terminal = 1.0 - last_dones.astype(np.float32)
            next_values = last_values
        else:
            next_non_terminal = 1.0 - episode_starts[step + 1]
            next_values = values[step + 1]
        delta = rewards[step] + gamma * next_values * next_non_terminal - values[step]
        last_gae_lam = delta + gamma * gae_lambda * next_non_terminal * last_gae_lam
        advantages[step] = last_gae_lam
    return advantages, advantages + values


def explained_variance(y_pred: np.ndarray, y_true: np.ndarray) -> float:
    """``1 - Var[y - y_pred] / Var[y]`` (nan when Var[y] == 0), sb3's ``explained_variance``."""
    var_y = np.var(y_true)
    return np.nan if var_y == 0 else float(1 - np.var(y_true - y_pred) / var_y)
