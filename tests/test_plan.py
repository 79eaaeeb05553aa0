"""The run's plan (ppo_dict.algo.rollout.plan): one frozen value decided once, printed by --dry_run and at the start in the
same words, the parts built from it (a rank's policy steps with the global batch's draws), and the sharded step's fallback
named: what cannot be built is said, anything else propagates."""

import dataclasses
import errno
import threading

import numpy as np
import pytest
import torch
from gymnasium import spaces

from ppo_dict import main_ppo
from ppo_dict.algo.networks.policy import ActorCritic
from ppo_dict.algo.rollout import plan as plan_module
from ppo_dict.algo.rollout.collect import Collector
from ppo_dict.algo.rollout.plan import (
    CENTRAL,
    DOUBLE_BUFFERED,
    EXACT,
    NOT_BUILT,
    RECURRENT,
    SHARDED,
    Plan,
    decide,
    preview_plan,
)
from ppo_dict.algo.rollout.rollout_step import GlobalDraws, PolicyStep, RankRows
from ppo_dict.algo.rollout.timing import Timing
from ppo_dict.core.config import Config
from ppo_dict.core.errors import RankError
from ppo_dict.core.layout import plan_layout
from ppo_dict.data.episodes import EpisodeLog
from ppo_dict.data.storage import RolloutStorage
from ppo_dict.run.run_plan import dry_run_plan
from ppo_dict.vec import env_spec, pool_backend, probe_env
from ppo_dict.vec.in_process import InProcessEnvPool
from tests.test_main_ppo import run_cli

CPU = torch.device("cpu")
OBS, ACTIONS = spaces.Box(-1.0, 1.0, (3,), np.float32), spaces.Box(-1.0, 1.0, (2,), np.float32)
#: 4 envs: 2 in this process, one worker of 2
LAYOUT = plan_layout(4, 2, None, None, True, False, 1)


def stand_in(policy: ActorCritic, cfg: Config, layout=LAYOUT) -> Plan:
    """The plan on storage laid out as ``layout``'s run (what --dry_run decides on)."""
    storage = RolloutStorage(OBS, ACTIONS, 1, layout.n_envs)
    return preview_plan(cfg, storage, "test", layout, policy, None, CPU)


def a_policy() -> ActorCritic:
    torch.manual_seed(0)
    return ActorCritic(OBS, ACTIONS)


CFG = Config(env="gym_Pendulum-v1", n_envs=4, num_workers=2, device="cpu")


def test_the_plan_is_frozen_and_names_each_part_with_its_reason() -> None:
    plan = stand_in(a_policy(), CFG)
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.step = CENTRAL  # type: ignore[misc]
    assert plan.step in (SHARDED, CENTRAL) and plan.probed and plan.at_start and plan.workers and plan.layout == LAYOUT
    assert plan.update == EXACT and (plan.granule is not None) == (plan.step == SHARDED)
    step, books, bootstrap, update = plan.lines()
    assert step.startswith(
        "policy step: the start probe decides, on the run's own storage; here, on rows laid out as the run's: "
    )
    assert books.startswith("books: ") and bootstrap.startswith("bootstrap: ") and update.startswith("update: sb3's loop")


def test_each_flag_s_part_is_said_with_its_reason() -> None:
    doubled = stand_in(a_policy(), CFG.replace(double_buffer=True), plan_layout(4, 2, None, None, True, True, 1))
    assert doubled.step == DOUBLE_BUFFERED and not doubled.probed and doubled.granule is None
    assert doubled.step_line == (
        "policy step: in the main process for every env (--double_buffer samples one half's actions "
        "here while the workers step the other)"
    )
    assert "each half's" in doubled.books and "not sb3's" in doubled.bootstrap
    asked = stand_in(a_policy(), CFG.replace(shard_policy=False))
    assert (
        asked.step == CENTRAL
        and asked.step_line == "policy step: in the main process for every env (as asked (--shard_policy False))"
    )
    assert (
        asked.bootstrap
        == "per env in env order, the critic on a batch of one (sb3's), done while the workers step the next step"
    )
    alone = stand_in(a_policy(), CFG.replace(num_workers=0), plan_layout(4, 0, None, None, True, False, 1))
    assert not alone.workers and alone.policy_line == "" and alone.step_line.endswith("(every env steps in this process)")
    assert alone.bootstrap == "per env in env order, the critic on a batch of one (sb3's)"


def test_dry_run_and_the_start_say_the_same_plan(capsys, tmp_path) -> None:
    """The dry run here, the run as a command (its worker processes end with it)."""
    argv = [
        "--env",
        "gym_Pendulum-v1",
        "--n_envs",
        "4",
        "--num_workers",
        "2",
        "--n_steps",
        "16",
        "--batch_size",
        "64",
        "--n_epochs",
        "1",
        "--seed",
        "0",
        "--verbose",
        "1",
        "--plot",
        "False",
    ]
    assert main_ppo.main([*argv, "--dry_run"]) == 0
    dry = capsys.readouterr().out.splitlines()
    proc = run_cli(*argv, "--total_timesteps", "64", "--run_dir", str(tmp_path / "run"))
    assert proc.returncode == 0, proc.stderr
    start = proc.stdout.splitlines()
    parts = ("policy step: ", "books: ", "bootstrap: ", "update: ")
    said = [[line for line in lines if line.startswith(parts)] for lines in (dry, start)]
    assert [len(lines) for lines in said] == [4, 4], said
    assert said[0][1:] == said[1][1:]  # books, bootstrap, update: word for word
    # the policy step: the dry run says what the probe will decide, and what it found on rows laid out as the run's
    assert said[0][0].startswith(
        "policy step: the start probe decides, on the run's own storage; here, on rows laid out as the run's: "
    )
    assert said[0][0].endswith(said[1][0].removeprefix("policy step: ")), said


def test_a_rank_s_policy_steps_are_built_with_the_global_draws() -> None:
    """Over ranks, every policy step samples with its rows of the global batch's draws from the moment it is built: the
    generator ends where the single process's whole batch leaves it."""
    cfg = Config(env="gym_Pendulum-v1", n_envs=2, num_workers=0, n_steps=4, device="cpu")
    pool = InProcessEnvPool(probe_env(env_spec(cfg)), 2, 4)
    try:
        policy, rows = a_policy_for(pool), RankRows("rank 0", 0, 2, 6)
        plan, shard = decide(cfg, pool.storage, "test", [], policy, None, CPU, rows, None, pool.waits)
        assert plan.ranks == rows and shard is None
        collector = Collector(cfg, pool, policy, None, CPU, EpisodeLog((), 100), Timing(), plan)
        assert all(isinstance(step.sampler, GlobalDraws) for step in collector.policy_steps.values())
        obs = torch.zeros(6, 3)
        torch.manual_seed(1)
        PolicyStep(policy, 6)(obs)
        single = torch.get_rng_state()
        torch.manual_seed(1)
        collector.policy_steps[2](obs[:2])
        assert torch.equal(single, torch.get_rng_state())
    finally:
        pool.close()


def a_policy_for(pool) -> ActorCritic:
    torch.manual_seed(0)
    return ActorCritic(pool.observation_space, pool.action_space)


def test_a_rank_run_whose_policy_samples_through_its_forward_is_refused_before_any_step_is_built() -> None:
    torch.manual_seed(0)
    policy = ActorCritic(OBS, ACTIONS, use_sde=True, squash_output=True)  # gSDE squashed: ActorCritic.forward, no lean sampler
    assert PolicyStep(policy, 2).sampler is None
    storage = RolloutStorage(OBS, ACTIONS, 1, 2)
    with pytest.raises(RankError, match=r"^rank 1: the policy samples through its own forward"):
        decide(CFG, storage, "test", [], policy, None, CPU, RankRows("rank 1", 2, 4, 4), None, False)


def test_a_sharded_step_that_cannot_be_built_is_said_and_the_central_step_runs(monkeypatch) -> None:
    policy = a_policy()
    policy.lock = threading.Lock()  # an attribute no pickle carries
    plan = stand_in(policy, CFG)
    assert plan.step == CENTRAL and not plan.probed
    assert plan.step_line == (
        f"policy step: in the main process for every env ({NOT_BUILT}its policy cannot be pickled for "
        "the other processes (TypeError: cannot pickle '_thread.lock' object))"
    )

    def no_memory(*args, **kwargs):
        raise OSError(errno.ENOMEM, "Cannot allocate memory")

    monkeypatch.setattr(plan_module.ShardedRollout, "__init__", no_memory)
    plan = stand_in(a_policy(), CFG)
    assert (
        plan.step == CENTRAL
        and plan.step_why == f"{NOT_BUILT}its shared block cannot be made (OSError: [Errno 12] Cannot allocate memory)"
    )


def test_any_other_error_building_the_sharded_step_is_a_fault(monkeypatch) -> None:
    def broken(*args, **kwargs):
        raise RuntimeError("a bug")

    monkeypatch.setattr(plan_module.ShardedRollout, "__init__", broken)
    with pytest.raises(RuntimeError, match="a bug"):
        stand_in(a_policy(), CFG)


def test_dry_run_plan_builds_the_run_s_policy_on_a_fork_of_the_generator() -> None:
    cfg = Config(env="gym_Pendulum-v1", n_envs=4, num_workers=2, seed=3, device="cpu", model="mlp_lstm")
    backend = pool_backend(cfg, None)
    torch.manual_seed(7)
    before = torch.get_rng_state()
    plan = dry_run_plan(cfg, backend, cfg.layout(backend.unit), CPU)
    assert torch.equal(before, torch.get_rng_state())
    assert plan.recurrent and plan.update == RECURRENT and plan.step == CENTRAL
    assert plan.step_line.startswith("policy step: in the main process for every env, recurrent (")
