"""Running observation and return normalisation with sb3 ``VecNormalize`` semantics, bit for bit.

The arithmetic is sb3's expression for expression (``running_mean_std.py``, ``vec_normalize.py``):
statistics in float64, batch moments in the data's dtype, outputs cast to float32. It returns
normalised arrays; the caller keeps them apart from what the env wrote (``RolloutStorage.obs``).
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
        return rms_state(self)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        load_rms(self, state)


def rms_state(rms: Any) -> dict[str, Any]:
    """The statistics of a running mean/std, this module's or sb3's (``ppo_dict.PPO`` keeps a
    ``VecNormalize``'s own objects): copies of ``mean``, ``var`` and ``count``."""
    return {"mean": rms.mean.copy(), "var": rms.var.copy(), "count": float(rms.count)}


def load_rms(rms: Any, state: dict[str, Any]) -> None:
    """Put :func:`rms_state`'s values into ``rms``, in place (the object stays the one shared)."""
    rms.mean, rms.var, rms.count = np.array(state["mean"]), np.array(state["var"]), float(state["count"])


class Normalizer:
    """Observation (per dict key) and reward normalisation for ``n_envs`` parallel envs.

    ``obs_shapes`` are the observation keys to normalise (:func:`~ppo_dict.data.storage.vector_obs_shapes`:
    every Box key but uint8 images; the integer keys of Discrete, MultiDiscrete and MultiBinary are left alone).
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

    @property
    def normalized_keys(self) -> tuple[str, ...]:
        """The observation keys whose values this normaliser changes."""
        return tuple(self.obs_rms) if self.norm_obs else ()

    # -------------------------------------------------------------- sb3 VecNormalize.reset / step_wait
    def reset(self, obs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """After ``env.reset()``: ``obs[key]: [n_envs, ...]`` raw; returns the normalised keys."""
        self.returns = np.zeros(len(self.returns))
        if self.training and self.norm_obs:
            for key, rms in self.obs_rms.items():
                rms.update(obs[key])
        return self.normalize_obs(obs)

    def step(
        self,
        obs: dict[str, np.ndarray],
        rewards: np.ndarray,
        dones: np.ndarray,
        terminal_obs: dict[str, np.ndarray],
        rows: slice = slice(None),
    ) -> tuple[dict[str, np.ndarray], np.ndarray, dict[str, np.ndarray]]:
        """After ``env.step()``, in sb3's order: ``(obs, rewards, terminal_obs)`` normalised.

        obs[key]: [n, ...] raw (done envs hold their reset obs), rewards: float32[n], dones:
        bool[n], terminal_obs[key]: [n_done, ...] raw, the done envs' last observations in env
        order; ``rows``: which of the ``n_envs`` envs these are (all of them, except for a half of a
        double-buffered rollout). Returned observations hold the normalised keys only.
        """
        self.observe(obs, rewards, dones, rows)
        normalized = self.normalize_obs(obs)
        normalized_rewards = self.normalize_reward(rewards)
        terminal = self.normalize_obs(terminal_obs) if dones.any() else {}
        return normalized, normalized_rewards, terminal

    def observe(self, obs: dict[str, np.ndarray], rewards: np.ndarray, dones: np.ndarray, rows: slice = slice(None)) -> None:
        """:meth:`step`'s statistics alone (sb3's order: the observations', then the discounted returns' and
        their statistics; the returns of ended episodes zeroed); the normalised values are the caller's to
        compute, row by row if it likes (:meth:`normalize_obs`, :meth:`normalize_reward`: elementwise)."""
        if self.training and self.norm_obs:
            for key, rms in self.obs_rms.items():
                rms.update(obs[key])
        returns = self.returns[rows]  # a view
        if self.training:
            returns[...] = returns * self.gamma + rewards
            self.ret_rms.update(returns)
        returns[dones] = 0

    # -------------------------------------------------------------- pure functions of the statistics
    def normalize_obs(self, obs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """float32 ``{key: clip((obs - mean) / sqrt(var + eps))}`` for the normalised keys of ``obs``."""
        return {
            key: np.clip((obs[key] - rms.mean) / np.sqrt(rms.var + self.epsilon), -self.clip_obs, self.clip_obs).astype(
                np.float32
            )
            for key, rms in self.obs_rms.items()
            if self.norm_obs
        }

    def normalize_reward(self, reward: np.ndarray) -> np.ndarray:
        if self.norm_reward:
            reward = np.clip(reward / np.sqrt(self.ret_rms.var + self.epsilon), -self.clip_reward, self.clip_reward)
        return reward.astype(np.float32)

    def state_dict(self) -> dict[str, Any]:
        return {
            "obs_rms": {key: rms_state(rms) for key, rms in self.obs_rms.items()},
            "ret_rms": rms_state(self.ret_rms),
            "returns": self.returns.copy(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for key, rms in self.obs_rms.items():
            load_rms(rms, state["obs_rms"][key])
        load_rms(self.ret_rms, state["ret_rms"])
        self.returns = np.array(state["returns"])
