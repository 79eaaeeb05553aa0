"""Threads during the update: an update with the machine's cores gives the same bits as with one
thread (MLP and CNN), so the run keeps sb3's numbers while the update uses the cores the idle
workers leave free."""
import warnings

import pytest
import torch

from ppo_dict.config import Config
from tests.parity.sides import assert_same_record, run_ours, run_sb3

CONFIGS = {
    # rl-zoo's MuJoCo size: 256x256, a 2048-sample minibatch
    "mlp-256": Config(env="gym_Reacher-v5", n_envs=8, num_workers=0, n_steps=256, batch_size=512, n_epochs=3, seed=1,
                      net_arch="256,256", total_timesteps=2 * 8 * 256, max_grad_norm=0.05),
    # NatureCNN: a 1.6M-parameter linear layer, its gradient norm clipped
    "cnn": Config(env="test_dummy", model="cnn", n_envs=4, num_workers=0, n_steps=64, batch_size=128, n_epochs=2, seed=2,
                  total_timesteps=2 * 4 * 64, max_grad_norm=0.05),
}


@pytest.mark.parametrize("name", list(CONFIGS))
def test_two_threads_give_the_bits_of_one_and_of_sb3(name: str) -> None:
    cfg = CONFIGS[name]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        one = run_ours(cfg.replace(update_threads=1))
        two = run_ours(cfg.replace(update_threads=2))
        sb3 = run_sb3(cfg)
    assert_same_record(one, two)
    assert_same_record(sb3, two)
    assert torch.get_num_threads() == 1  # the rollout and this process are back to one thread
