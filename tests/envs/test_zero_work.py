"""``PPODictZeroWork-v0``, the env that does no work (benchmarks/bench_pipeline.py): its spaces, its
fixed observation, its truncations, its argument checks, and the same steps through ppo_dict's
worker pool as through sb3's DummyVecEnv."""

import time

import numpy as np
import pytest
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.vec_env import DummyVecEnv

from ppo_dict.core.config import Config
from ppo_dict.envs import zero_work
from ppo_dict.run.run_plan import build_env_pool


def test_fixed_observation_no_reward_truncated_by_length() -> None:
    env = zero_work.ZeroWorkEnv(obs_dim=3, action_dim=2, episode_length=2)
    assert env.observation_space.shape == (3,) and env.action_space.shape == (2,)
    obs, _ = env.reset(seed=0)
    assert obs.dtype == np.float32 and obs.tolist() == [0.5, 0.5, 0.5] and env.observation_space.contains(obs)
    assert env.step(env.action_space.sample())[1:4] == (0.0, False, False)
    assert env.step(env.action_space.sample())[1:4] == (0.0, False, True)


def test_bad_arguments_are_all_named() -> None:
    with pytest.raises(
        ValueError,
        match=r"obs_dim=0: must be an int >= 1; episode_length=1.5: must be an int >= 1; "
        r"step_us=-1: must be a number of microseconds in \[0, 1e6\]",
    ):
        zero_work.ZeroWorkEnv(obs_dim=0, episode_length=1.5, step_us=-1)


def test_step_us_takes_wall_time_asleep() -> None:
    """The emulated core's env: each step at least ``step_us`` of wall time, spent asleep (a busy
    wait would use the CPU the emulation stands in for)."""
    env = zero_work.ZeroWorkEnv(step_us=2000.0)
    env.reset(seed=0)
    wall, cpu = time.perf_counter(), time.thread_time()
    for _ in range(20):
        env.step(env.action_space.sample())
    wall, cpu = time.perf_counter() - wall, time.thread_time() - cpu
    assert wall >= 20 * 2000e-6 and cpu < wall / 2, (wall, cpu)


def test_pool_with_workers_steps_it_as_sb3_does() -> None:
    n_envs, steps = 6, 5
    cfg = Config(
        env=f"gym_{zero_work.GYM_ID}",
        gym_packages=(zero_work.MODULE,),
        env_kwargs=dict(episode_length=3),
        n_envs=n_envs,
        num_workers=2,
        n_steps=steps,
        seed=0,
        verbose=0,
        main_steps_envs=False,
    )
    pool = build_env_pool(cfg)
    venv = make_vec_env(zero_work.GYM_ID, n_envs=n_envs, seed=0, vec_env_cls=DummyVecEnv, env_kwargs=dict(episode_length=3))
    try:
        pool.reset(0)
        first = venv.reset()
        np.testing.assert_array_equal(pool.storage.env_obs["obs"][0], first)
        pool.storage.env_actions[...] = 0.1
        for t in range(steps):
            pool.step(t)
            obs, rewards, dones, _ = venv.step(np.full((n_envs, 1), 0.1, np.float32))
            np.testing.assert_array_equal(pool.storage.env_obs["obs"][t + 1], obs)
            np.testing.assert_array_equal(pool.storage.env_rewards[t], rewards)
            np.testing.assert_array_equal(pool.storage.truncated[t], dones)
        assert pool.storage.truncated[2].all() and not pool.storage.truncated[:2].any()  # episode_length 3
    finally:
        pool.close()
        venv.close()
