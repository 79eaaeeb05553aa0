"""The in-process pool: every env in this process, in env order, seeded as sb3 seeds them."""

import gymnasium as gym
import numpy as np
import pytest

from ppo_dict.envs import resolve_env_name
from ppo_dict.vec import probe_env
from ppo_dict.vec.in_process import InProcessEnvPool


def test_reset_seeds_env_i_with_seed_plus_i_and_close_is_idempotent() -> None:
    pool = InProcessEnvPool(probe_env(resolve_env_name("gym_Pendulum-v1")), 3, n_steps=2)
    pool.reset(10)
    for i in range(3):
        assert np.array_equal(pool.storage.env_obs["obs"][0, i], gym.make("Pendulum-v1").reset(seed=10 + i)[0])
    pool.storage.env_actions[...] = 0.5
    pool.step(0)
    assert pool.storage.env_rewards[0].dtype == np.float32 and (pool.storage.env_rewards[0] < 0).all()
    pool.close()
    pool.close()
    assert pool.closed
    with pytest.raises(ValueError, match=r"^n_envs=0 for gym_Pendulum-v1: must be at least 1$"):
        InProcessEnvPool(probe_env(resolve_env_name("gym_Pendulum-v1")), 0, n_steps=2)
