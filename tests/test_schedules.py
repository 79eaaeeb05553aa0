"""Every schedule of the rollout keeps the same books: the same env steps through the central step (in this process and
beside workers), the sharded step (at the start probe's granule and forced to several others), a rank's rollout,
``--double_buffer`` and, on a GPU, the device and graphed steps, their outputs compared with the central step's.

The books are what a rollout leaves for the update (``ppo_dict.algo.rollout.books``): the normalised observations and
terminal observations, the rewards (normalised, the time-limit bootstrap added), the episode starts and the normaliser's
statistics; beside them the policy's actions, values and log-probs, and GAE's advantages and returns, all read where
the update reads them (``PPO.learn``'s ``on_rollout``: after GAE, before the update). Each schedule trains two rollouts
(the second on updated parameters, which the sharded step shares with its workers) of the toy env: 8 envs, VecNormalize,
episodes cut at 5 steps (truncated: the bootstrap runs) or ended at random (terminated). A schedule's books edited alone
make its case fail. What each schedule promises:

* **exact** (central beside workers, sharded at the probe's granule, a rank's rollout in a group of one): every array
  and the normaliser ``==`` the central step in this process, both rollouts;
* **a forced granule** (windows of 1, 4, 8 rows, whatever the probe would say): the books and actions of the first
  rollout ``==``; the values and log-probs (and GAE's results) within float32 rounding, since a window can round a
  policy row by its size (what the probe checks), and so the update and the second rollout too (the tolerance
  docs/distributed.md gives a rank's rows);
* **double-buffered** and **on a GPU** sample other actions (each half its own noise; the GPU's generator and rounding),
  so they run the toy env with ``reward="shown"``: the observations, rewards and ends do not depend on the actions, and
  every schedule steps the same envs through the same values. Double-buffered (docs/speed.md, "Double-buffered
  rollouts"): the episode starts ``==`` and the normaliser's statistics within float64 rounding; the half that steps
  second is normalised with the whole step's statistics, so its first rollout's observations, rewards, values,
  advantages and returns are the central step's within float32 rounding; the first half is normalised before the
  second half's rows are seen. On a GPU (skipped elsewhere; not run on the project's machine): the episode starts and
  the normaliser's observation statistics ``==`` (it runs on the host), the first rollout's learner rows within
  ``rtol 1e-4 + atol 1e-5``.

Over two ranks (a process each) ``tests/test_distributed.py`` compares a rank's columns with the single process's.
"""

from __future__ import annotations

import warnings
from typing import Any, Optional

import numpy as np
import pytest
import torch
import torch.distributed as dist

from ppo_dict.algo.ppo import PPO
from ppo_dict.algo.ranks import Ranks
from ppo_dict.algo.rollout import sharded_rollout
from ppo_dict.core.config import Config
from ppo_dict.core.ranks import RankInfo
from ppo_dict.core.seeding import thread_count
from ppo_dict.run.run_plan import build_env_pool

#: 8 envs, 2 rollouts of 16 steps; beside workers, the main process steps envs 0-1 and two workers 2-4 and 5-7, so
#: windows of 1, 4 and 8 rows differ (own rows; 0-3, 0-7 and 4-7; the whole batch)
CFG = Config(
    env="gym_PPODictToy-v0",
    gym_packages=("ppo_dict.envs.toy",),
    env_kwargs=dict(observation="box", action="multi_discrete", episode_length=5, end_probability=0.1),
    n_envs=8,
    n_steps=16,
    batch_size=32,
    n_epochs=1,
    seed=3,
    total_timesteps=256,
    normalize=True,
    num_workers=0,
    device="cpu",
    verbose=0,
)
WORKERS = dict(num_workers=3, main_envs=2)
#: the rollout's arrays (``[n_steps(+1), n_envs, ...]``) and which of them the policy's rows set
ARRAYS = (
    "actions",
    "rewards",
    "env_rewards",
    "episode_starts",
    "values",
    "log_probs",
    "advantages",
    "returns",
    "terminated",
    "truncated",
)
POLICY = ("values", "log_probs", "advantages", "returns")


def rollouts(cfg: Config, ranks: Optional[Ranks] = None) -> tuple[list[dict[str, Any]], str, Any]:
    """``(each rollout as the update sees it, the start line of the policy step, the pool)`` of a run of ``cfg``."""
    seen: list[dict[str, Any]] = []

    def keep(model: PPO) -> None:  # after GAE, before the update
        s = model.storage
        seen.append(
            {
                **{name: getattr(s, name).copy() for name in ARRAYS},
                **{f"obs/{key}": arr.copy() for key, arr in s.obs.items()},
                **{f"env_obs/{key}": arr.copy() for key, arr in s.env_obs.items()},
                **{f"terminal_obs/{key}": arr.copy() for key, arr in s.terminal_obs.items()},
                "normalizer": model.normalizer.state_dict(),
            }
        )

    pool = build_env_pool(cfg)
    # one torch thread in this process for every run, the reference too (a module fixture starts before conftest's):
    # a matrix product can round by its threads
    with warnings.catch_warnings(), thread_count(1), PPO(cfg, pool, ranks=ranks) as model:
        warnings.simplefilter("ignore")
        line = model.collector.policy_line
        model.learn(on_rollout=keep)
    assert len(seen) == 2
    return seen, line, pool


@pytest.fixture(scope="module")
def central() -> list[dict[str, Any]]:
    """The central step in this process: sb3's order, the reference."""
    seen, _, _ = rollouts(CFG)
    first = seen[0]
    assert first["truncated"].sum() > 0 and first["terminated"].sum() > 0  # both ends occur: the bootstrap runs
    return seen


def differences(
    a: dict[str, Any], b: dict[str, Any], names: Any, rtol: float = 0.0, atol: float = 0.0, prefix: str = ""
) -> list[str]:
    """The entries of ``names`` (arrays or nested statistics) where ``b`` differs from ``a``: bit for bit, or beyond
    ``rtol``/``atol``."""
    found = []
    for name in names:
        x, y = a[name], b[name]
        if isinstance(x, dict):
            found += differences(x, y, list(x), rtol, atol, f"{prefix}{name}/")
            continue
        x, y = np.asarray(x), np.asarray(y)
        same = x.shape == y.shape and (np.array_equal(x, y) if rtol == atol == 0 else np.allclose(x, y, rtol=rtol, atol=atol))
        if not same:
            gap = np.abs(x.astype(np.float64) - y.astype(np.float64)).max() if x.shape == y.shape else "shape"
            found.append(f"{prefix}{name} (max diff {gap})")
    return found


def books_names(rollout: dict[str, Any]) -> list[str]:
    return [name for name in rollout if name not in POLICY]


def forced_granule(monkeypatch: pytest.MonkeyPatch, granule: int) -> None:
    """The sharded step with windows of ``granule`` rows, whatever the start probe would find on this CPU."""
    monkeypatch.setattr(sharded_rollout, "probe", lambda *args, **kwargs: (granule, f"windows of {granule} rows, forced"))


@pytest.fixture
def rank_group(tmp_path):
    """This process as the one rank of a gloo group (a file store: no port)."""
    dist.init_process_group("gloo", store=dist.FileStore(str(tmp_path / "store"), 1), rank=0, world_size=1)
    try:
        yield Ranks(RankInfo(0, 1, 0, 1, "localhost"), CFG.n_envs)
    finally:
        dist.destroy_process_group()


EXACT = {
    "central beside workers": (dict(WORKERS, shard_policy=False), "in the main process for every env (as asked"),
    "sharded, the probe's granule": (WORKERS, "in each process for the envs it steps"),
}


@pytest.mark.parametrize("schedule", list(EXACT))
def test_exact_schedules_keep_the_central_steps_books_bit_for_bit(central, schedule: str) -> None:
    settings, where = EXACT[schedule]
    seen, line, _ = rollouts(CFG.replace(**settings))
    if where not in line and "start probe" in line:
        pytest.skip(f"on this CPU: {line}")
    assert where in line, line
    for r, (expected, got) in enumerate(zip(central, seen)):
        found = differences(expected, got, list(expected))
        assert not found, f"{schedule}, rollout {r}: {found}"


def test_a_ranks_rollout_keeps_the_central_steps_books_bit_for_bit(central, rank_group) -> None:
    """The rank's code (the global batch's draws, the gathered normaliser, the merged episodes, the ranked update)
    in a group of one rank: its rows are the whole batch's, so everything is the single process's bits."""
    seen, _, _ = rollouts(CFG, ranks=rank_group)
    for r, (expected, got) in enumerate(zip(central, seen)):
        found = differences(expected, got, list(expected))
        assert not found, f"rollout {r}: {found}"


@pytest.mark.parametrize("granule", [1, 4, 8])
def test_the_sharded_step_at_every_granule_keeps_the_books(central, monkeypatch, granule: int) -> None:
    forced_granule(monkeypatch, granule)
    seen, line, pool = rollouts(CFG.replace(**WORKERS))
    assert (pool.main_envs, [len(block) for block in pool.layout.blocks]) == (2, [3, 3])  # windows of 1, 4, 8 rows differ
    assert f"in each process for the envs it steps (windows of {granule} rows, forced)" in line, line
    first, expected = seen[0], central[0]
    found = differences(expected, first, books_names(expected)) + differences(expected, first, POLICY, rtol=1e-5, atol=1e-6)
    assert not found, f"rollout 0: {found}"
    found = differences(central[1], seen[1], ["episode_starts", "terminated", "truncated"])
    found += differences(central[1], seen[1], list(central[1]), rtol=1e-5, atol=1e-6)
    assert not found, f"rollout 1: {found}"


#: the same env steps whatever the actions: the reward is the shown code's, not the action's
SHOWN = CFG.replace(env_kwargs=dict(CFG.env_kwargs, reward="shown"))
#: the arrays that depend on the envs alone, with SHOWN
ENV_SIDE = ["episode_starts", "terminated", "truncated", "env_rewards", "env_obs/obs"]
#: what the books and the critic make of them
LEARNER = ["obs/obs", "terminal_obs/obs", "rewards", "values", "advantages", "returns"]


@pytest.fixture(scope="module")
def central_shown() -> list[dict[str, Any]]:
    return rollouts(SHOWN)[0]


def test_the_double_buffered_books_are_the_central_steps_but_for_the_first_halfs_statistics(central_shown) -> None:
    seen, line, pool = rollouts(SHOWN.replace(num_workers=2, double_buffer=True))
    halves = list(pool.halves)
    assert "--double_buffer" in line and len(halves) == 2, (line, halves)
    first, second = slice(halves[0].start, halves[0].stop), slice(halves[1].start, halves[1].stop)
    assert list(halves[0]) + list(halves[1]) == list(range(CFG.n_envs))
    for r, (expected, got) in enumerate(zip(central_shown, seen)):
        found = differences(expected, got, ENV_SIDE)  # the same env steps, the same episode starts
        stats, theirs = expected["normalizer"]["obs_rms"]["obs"], got["normalizer"]["obs_rms"]["obs"]
        found += differences(stats, theirs, ["count"]) + differences(stats, theirs, ["mean", "var"], rtol=1e-12)
        assert not found, f"rollout {r}: {found}"
    # the first rollout's policy is the central step's: the half that steps second is normalised with the whole step's
    # statistics, its cut episodes valued in a batch of the half (float32 rounding); the first half is normalised before
    # the second half's rows are seen
    expected, got = central_shown[0], seen[0]
    found = []
    for name in LEARNER:
        envs = (second,) if name.startswith("terminal_obs/") else (slice(None), second)  # terminal rows: [n_envs, ...]
        a, b = expected[name][envs], got[name][envs]
        if not np.allclose(a, b, rtol=1e-5, atol=1e-6):
            found.append(f"{name}: max diff {np.abs(a - b).max()}")
    assert not found, f"the second half, rollout 0: {found}"
    assert not np.allclose(expected["obs/obs"][1:, first], got["obs/obs"][1:, first], rtol=1e-5, atol=1e-6)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="the device and graphed steps need CUDA")
@pytest.mark.parametrize("graphed", [False, True])
def test_the_device_steps_keep_the_books_within_float_rounding(central_shown, graphed: bool) -> None:
    """The same env steps; the normaliser's statistics ``==`` (it runs on the host); the policy and the batched bootstrap
    on the GPU round differently (docs/speed.md: close to sb3's numbers, not its bits): the first rollout's learner rows
    within ``rtol 1e-4 + atol 1e-5``."""
    seen, _, _ = rollouts(SHOWN.replace(device="cuda", cuda_graphs=graphed))
    for r, (expected, got) in enumerate(zip(central_shown, seen)):
        found = differences(expected, got, ENV_SIDE) + differences(expected["normalizer"], got["normalizer"], ["obs_rms"])
        assert not found, f"rollout {r}: {found}"
    found = differences(central_shown[0], seen[0], LEARNER, rtol=1e-4, atol=1e-5)
    assert not found, f"rollout 0: {found}"
