"""Threads during the update: the contract the run keeps, on any CPU.

With ``update_threads`` unset, one epoch of the first update is tried with the machine's physical cores and
with ``torch_threads``, and the run keeps the cores only if they give the same bits; either way the run is sb3's. Whether
more threads round the same is a property of the CPU (on an AVX-512 host two threads split
NatureCNN's gradient reductions differently, on this AVX2 host they do not), so the tests assert
the contract, never the CPU's answer: the run equals sb3 whichever count was kept, and where the
trial is made to differ, one thread is kept and the run is still sb3's.
"""

import warnings

import pytest
import torch

import ppo_dict.algo.ppo
import ppo_dict.algo.training.update_threads
from ppo_dict.algo.ppo import PPO
from ppo_dict.core.config import Config, physical_cores
from tests.parity.sides import assert_same_record, run_ours, run_sb3

CONFIGS = {
    # rl-zoo's MuJoCo size: 256x256, a 2048-sample minibatch
    "mlp-256": Config(
        env="gym_Reacher-v5",
        n_envs=8,
        num_workers=0,
        n_steps=256,
        batch_size=512,
        n_epochs=3,
        seed=1,
        net_arch="256,256",
        total_timesteps=2 * 8 * 256,
        max_grad_norm=0.05,
    ),
    # NatureCNN: a 1.6M-parameter linear layer, its gradient norm clipped
    "cnn": Config(
        env="test_dummy",
        model="cnn",
        n_envs=4,
        num_workers=0,
        n_steps=64,
        batch_size=128,
        n_epochs=2,
        seed=2,
        total_timesteps=2 * 4 * 64,
        max_grad_norm=0.05,
    ),
}


#: The same two policy kinds over 20 updates: a choice made at the first update must hold for the run.
LONG = {
    "mlp-256": CONFIGS["mlp-256"].replace(n_steps=64, batch_size=256, total_timesteps=20 * 8 * 64),
    "cnn": CONFIGS["cnn"].replace(n_steps=32, batch_size=64, total_timesteps=20 * 4 * 32),
}


@pytest.fixture(autouse=True)
def _the_trial_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    """The trial where these short configs would skip it (fewer epochs than MIN_TRIAL_EPOCHS), and on a machine
    taken as quiet whatever else the host runs meanwhile (a busy one skips it too)."""
    monkeypatch.setattr(ppo_dict.algo.training.update_threads, "MIN_TRIAL_EPOCHS", 1)
    monkeypatch.setattr(ppo_dict.algo.ppo.LoadWatch, "look", lambda self, own=(): 0.0)


def run_recording_threads(cfg: Config):
    """``(record, the update threads the run kept)``."""
    models: list[PPO] = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        record = run_ours(cfg, prepare=models.append)
    return record, models[0].update_threads


@pytest.mark.parametrize("name", list(CONFIGS))
def test_the_threads_kept_give_sb3s_bits(name: str) -> None:
    cfg = CONFIGS[name]
    ours, kept = run_recording_threads(cfg)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sb3 = run_sb3(cfg)
    assert kept in {cfg.torch_threads, max(cfg.torch_threads, physical_cores())}
    assert_same_record(sb3, ours)
    assert torch.get_num_threads() == 1  # the rollout and this process are back to one thread


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("name", list(LONG))
def test_the_threads_kept_give_sb3s_bits_over_twenty_updates(name: str, seed: int) -> None:
    """The evidence for choosing the threads automatically: per policy kind and seed, 20 updates with
    the count kept at the first one, equal to sb3's one-thread run to the last bit."""
    cfg = LONG[name].replace(seed=seed)
    ours, kept = run_recording_threads(cfg)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sb3 = run_sb3(cfg)
    assert len(sb3.rollouts) == 20
    assert_same_record(sb3, ours)
    print(f"{name} seed {seed}: kept {kept} update threads of {physical_cores()} cores")


def test_threads_that_round_differently_are_not_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    """The trial with the cores told apart from the real update (as on a CPU where they round
    differently): the run keeps ``torch_threads`` and its every bit is still sb3's."""
    monkeypatch.setattr(ppo_dict.algo.training.update_threads, "physical_cores", lambda: 2)
    monkeypatch.setattr(ppo_dict.algo.training.update_threads, "same_values", lambda a, b: False)
    cfg = CONFIGS["cnn"].replace(n_steps=32, batch_size=64, total_timesteps=2 * 4 * 32)
    ours, kept = run_recording_threads(cfg)
    assert kept == cfg.torch_threads == 1
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert_same_record(run_sb3(cfg), ours)
