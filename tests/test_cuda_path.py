"""The CUDA path's code, run on the CPU (no GPU here, or in CI): each piece forced on and compared with
the exact path it replaces, to float tolerance. What needs a GPU itself (graph capture, pinned copies,
the timings) runs in ``benchmarks/gpu.sh`` on a GPU host."""
import warnings

import numpy as np
import pytest
import torch

from ppo_dict.algo.ppo import PPO
from ppo_dict.core.config import Config
from ppo_dict.run.run_plan import build_env_pool

# Pendulum's time limit cuts every env at step 199: one batched bootstrap of all of them
PENDULUM = Config(env="gym_Pendulum-v1", n_envs=4, n_steps=256, batch_size=64, n_epochs=2, seed=3, total_timesteps=1024, verbose=0)


def rollout_rewards(cfg: Config, device_bootstrap: bool) -> tuple[np.ndarray, np.ndarray]:
    """``(rewards, env_rewards)`` of one rollout, the time-limit bootstrap batched (as on CUDA) or per env."""
    with warnings.catch_warnings(), PPO(cfg, build_env_pool(cfg)) as model:
        warnings.simplefilter("ignore")
        model.collector.device_bootstrap = device_bootstrap
        model.start_envs()
        model.collect_rollout()
        return model.storage.rewards.copy(), model.storage.env_rewards.copy()


@pytest.mark.parametrize("num_workers", [0, 2])  # settled after the next step's policy (in-process) or while the workers step
def test_the_batched_time_limit_bootstrap_agrees_with_the_per_env_one(num_workers: int) -> None:
    cfg = PENDULUM.replace(num_workers=num_workers)
    exact, env_rewards = rollout_rewards(cfg, False)
    batched, _ = rollout_rewards(cfg, True)
    cut = exact != env_rewards
    assert cut[199].all() and cut.sum() == cfg.n_envs  # every env cut once, at step 199
    assert np.array_equal(batched[~cut], exact[~cut])  # elsewhere nothing added
    np.testing.assert_allclose(batched[cut], exact[cut], rtol=1e-6)
