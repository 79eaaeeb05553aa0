"""Running observation and return normalisation with sb3 ``VecNormalize`` semantics, bit for bit.

The arithmetic is sb3's expression for expression (``running_mean_std.py``, ``vec_normalize.py``):
statistics in float64, batch moments in the data's dtype, outputs cast to float32. Normalised
values are written back in place into the rollout storage, so no per-step arrays are kept.
"""
from __future__ import annotations

from typing import Any

import numpy as np


class RunningMeanStd:
    """sb3 ``RunningMeanStd``: parallel-algorithm mean and (population) variance."""

    def __init__(self, shape: tuple[int, ...] = (), epsilon: float = 1e-4):
        self.mean = np.zeros(shape, np.float64)
        self.var = np.ones(shape, np.float64)
        self.count: float = epsilon

    def update(self, arr: np.ndarray) -> None:
        """Fold in a batch ``arr: [batch, *shape]``; moments are taken in ``arr``'s dtype, as sb3 does."""
        self.update_from_moments(np.mean(arr, axis=0), np.var(arr, axis=0), arr.shape[0])

    def update_from_moments(self, batch_mean: np.ndarray, batch_var: np.ndarray, batch_count: float) -> None:
        delta = batch_mean - self.mean
        tot_count = self.count + batch_count
        new_mean = self.mean + delta * batch_count / tot_count
        m_a = self.var * self.count
        m_b = batch_var * batch_count
        m_2 = m_a + m_b + np.square(delta) * self.count * batch_count / (self.count + batch_count)
        self.mean = new_mean
        self.var = m_2 / (self.count + batch_count)
        self.count = batch_count + self.count

    def state_dict(self) -> dict[str, Any]:
        return {"mean": self.mean.copy(), "var": self.var.copy(), "count": float(self.count)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.mean, self.var, self.count = np.array(state["mean"]), np.array(state["var"]), float(state["count"])


class Normalizer:
    """Observation (per dict key) and reward normalisation for ``n_envs`` parallel envs.

    ``keys`` are the observation keys to normalise (all vector keys; uint8 images are left alone).
    """

    def __init__(
        self,
        obs_shapes: dict[str, tuple[int, ...]],
        n_envs: int,
        norm_obs: bool = True,
        norm_reward: bool = True,
        clip_obs: float = 10.0,
        clip_reward: float = 10.0,
        gamma: float = 0.99,
        epsilon: float = 1e-8,
    ):
        self.norm_obs, self.norm_reward = norm_obs, norm_reward
        self.clip_obs, self.clip_reward = clip_obs, clip_reward
        self.gamma, self.epsilon = gamma, epsilon
        self.training = True
        self.obs_rms = {key: RunningMeanStd(shape=shape) for key, shape in obs_shapes.items()}
        self.ret_rms = RunningMeanStd(shape=())
        self.returns = np.zeros(n_envs)

    # -------------------------------------------------------------- sb3 VecNormalize.reset / step_wait
    def reset(self, obs: dict[str, np.ndarray]) -> None:
        """After ``env.reset()``: ``obs[key]: [n_envs, ...]`` raw, normalised in place."""
        self.returns = np.zeros(len(self.returns))
        if self.training and self.norm_obs:
            for key, rms in self.obs_rms.items():
                rms.update(obs[key])
        self.normalize_obs_(obs)

    def step(self, obs: dict[str, np.ndarray], rewards: np.ndarray, dones: np.ndarray, terminal_obs: dict[str, np.ndarray]) -> None:
        """After ``env.step()``, in sb3's order; every array is normalised in place.

        obs[key]: [n_envs, ...] (done envs hold their reset obs), rewards: float32[n_envs],
        dones: bool[n_envs], terminal_obs[key]: [n_envs, ...] (only rows of done envs are used).
        """
        if self.training and self.norm_obs:
            for key, rms in self.obs_rms.items():
                rms.update(obs[key])
        self.normalize_obs_(obs)
        if self.training:
            self.returns = self.returns * self.gamma + rewards
            self.ret_rms.update(self.returns)
        rewards[...] = self.normalize_reward(rewards)
        done_rows = np.flatnonzero(dones)
        if len(done_rows):
            terminal = {key: terminal_obs[key][done_rows] for key in terminal_obs}
            self.normalize_obs_(terminal)
            for key in terminal_obs:
                terminal_obs[key][done_rows] = terminal[key]
        self.returns[dones] = 0

    # -------------------------------------------------------------- pure functions of the statistics
    def normalize_obs_(self, obs: dict[str, np.ndarray]) -> None:
        """Normalise the vector keys of ``obs`` in place (float32 values, stored in obs's dtype)."""
        if not self.norm_obs:
            return
        for key, rms in self.obs_rms.items():
            obs[key][...] = np.clip((obs[key] - rms.mean) / np.sqrt(rms.var + self.epsilon), -self.clip_obs, self.clip_obs).astype(np.float32)

    def normalize_reward(self, reward: np.ndarray) -> np.ndarray:
        if self.norm_reward:
            reward = np.clip(reward / np.sqrt(self.ret_rms.var + self.epsilon), -self.clip_reward, self.clip_reward)
        return reward.astype(np.float32)

    def state_dict(self) -> dict[str, Any]:
        return {
            "obs_rms": {key: rms.state_dict() for key, rms in self.obs_rms.items()},
            "ret_rms": self.ret_rms.state_dict(),
            "returns": self.returns.copy(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for key, rms in self.obs_rms.items():
            rms.load_state_dict(state["obs_rms"][key])
        self.ret_rms.load_state_dict(state["ret_rms"])
        self.returns = np.array(state["returns"])
