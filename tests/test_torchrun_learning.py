"""Learning over two ranks (``torchrun`` on this host): the same algorithm as one process, so the same learning.

Slow: CartPole-v1 with rl-zoo's settings reaches the maximum return (500) with 2 ranks on 3 seeds; Reacher-v5
(Box actions, ``--normalize``) with ``make train``'s settings ends, over 3 seeds, with a mean return within 2
standard deviations of the single process's runs' mean.
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.test_torchrun import progress, run_cli

SEEDS = (0, 1, 2)
#: rl-zoo's CartPole-v1 settings (hyperparams/ppo.yml)
CARTPOLE = [
    "--env",
    "gym_CartPole-v1",
    "--n_envs",
    "8",
    "--n_steps",
    "32",
    "--batch_size",
    "256",
    "--gae_lambda",
    "0.8",
    "--gamma",
    "0.98",
    "--n_epochs",
    "20",
    "--ent_coef",
    "0.0",
    "--learning_rate",
    "lin_0.001",
    "--clip_range",
    "lin_0.2",
    "--total_timesteps",
    "100000",
    "--progress",
    "none",
    "--verbose",
    "0",
    "--plot",
    "False",
]
#: make train's settings, 40 iterations (random play scores about -43)
REACHER = [
    "--env",
    "gym_Reacher-v5",
    "--n_envs",
    "8",
    "--n_steps",
    "256",
    "--batch_size",
    "256",
    "--n_epochs",
    "10",
    "--gamma",
    "0.9",
    "--gae_lambda",
    "0.95",
    "--normalize",
    "True",
    "--total_timesteps",
    "81920",
    "--progress",
    "none",
    "--verbose",
    "0",
    "--plot",
    "False",
]


def returns(run_dir) -> list[float]:
    return [float(row["rollout/ep_rew_mean"]) for row in progress(run_dir) if row.get("rollout/ep_rew_mean")]


@pytest.mark.slow
def test_cartpole_reaches_500_with_two_ranks(tmp_path) -> None:
    best = {}
    for seed in SEEDS:
        code, out, err = run_cli([*CARTPOLE, "--seed", str(seed), "--run_dir", str(tmp_path / f"s{seed}")], timeout=1800)
        assert code == 0, err
        best[seed] = max(returns(tmp_path / f"s{seed}"))
    assert all(value == 500 for value in best.values()), best


@pytest.mark.slow
def test_reacher_over_two_ranks_ends_within_two_standard_deviations_of_one_process(tmp_path) -> None:
    finals: dict[str, list[float]] = {"ranks": [], "single": []}
    for seed in SEEDS:
        for kind, nproc in (("ranks", 2), ("single", None)):
            run_dir = tmp_path / f"{kind}{seed}"
            code, out, err = run_cli([*REACHER, "--seed", str(seed), "--run_dir", str(run_dir)], nproc=nproc, timeout=3600)
            assert code == 0, err
            finals[kind].append(returns(run_dir)[-1])
    single = np.array(finals["single"])
    assert abs(np.mean(finals["ranks"]) - single.mean()) <= 2 * single.std(), finals
    assert np.mean(finals["ranks"]) > -30 and single.mean() > -30, finals  # both learned
