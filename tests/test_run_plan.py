"""How a run uses the machine: the run plan (the main process's share of the envs), update threads checked against
one thread, and the time/* figures. None of it may change a number."""

import pytest
import torch

import ppo_dict.algo.ppo as ppo_module
import ppo_dict.algo.training.update_threads as threads_module
from ppo_dict.algo.rollout.collect import TIMING_KEYS
from ppo_dict.algo.ppo import PPO
from ppo_dict.core.config import Config
from ppo_dict.core.errors import ConfigError
from ppo_dict.run.run_plan import build_env_pool, plan_run
from ppo_dict.vec import env_spec, probe_env

CFG = Config(
    env="gym_Pendulum-v1",
    n_envs=4,
    num_workers=0,
    n_steps=32,
    batch_size=64,
    n_epochs=2,
    seed=3,
    total_timesteps=256,
    verbose=0,
)


def test_the_main_process_steps_a_workers_share_less_its_wake_ups_unless_told_otherwise() -> None:
    """Exact rollouts sample every action before any env steps, and the main process wakes every
    worker before it steps its own envs: its share is a worker's less half an env per worker (an
    even split beside one worker), and n_envs splits unevenly where it does not divide; an explicit
    envs_per_worker gives equal shares, main_envs the main process's."""
    cfg = Config(env="gym_Reacher-v5", n_envs=8, num_workers=2, n_steps=16, batch_size=32)
    backend = probe_env(env_spec(cfg))
    for layout, main_envs, blocks in (
        (cfg, 4, [4]),
        (cfg.replace(n_envs=7), 3, [4]),
        (cfg.replace(n_envs=12, num_workers=3), 3, [5, 4]),
        (cfg.replace(n_envs=12, num_workers=3, envs_per_worker=4), 4, [4, 4]),
        (cfg.replace(main_envs=1), 1, [7]),
        (cfg.replace(main_steps_envs=False), 0, [4, 4]),
        (cfg.replace(n_envs=7, main_steps_envs=False), 0, [4, 3]),
    ):
        pool = build_env_pool(layout, backend)
        try:
            assert pool.main_envs == main_envs and [len(block) for block in pool._group.blocks] == blocks
        finally:
            pool.close()


def test_the_plan_is_made_once_and_the_pool_follows_it() -> None:
    """plan_run checks the config, keeps the recipe and the probed backend; its pool steps that
    backend's envs, and a bad config is refused before anything is probed."""
    cfg = Config(env="gym_Reacher-v5", n_envs=8, num_workers=2, n_steps=16, batch_size=32)
    plan = plan_run(cfg)
    assert plan.spec == env_spec(cfg) and plan.backend.observation_space == probe_env(env_spec(cfg)).observation_space
    pool = plan.env_pool()
    try:
        assert pool.backend.label == plan.backend.label and pool.num_envs == 8
    finally:
        pool.close()
    with pytest.raises(ConfigError, match="n_steps"):
        plan_run(cfg.replace(n_steps=0, env="gym_NoSuchEnv-v0"))


def test_the_run_config_is_checked_once_on_its_way_to_training(monkeypatch) -> None:
    """The plan, the pool and PPO each refuse a bad config, however it was built; the same (frozen)
    config is worked out once on its way through them, and PPO runs on the plan's device."""
    found = []
    find = Config._find_problems
    monkeypatch.setattr(Config, "_find_problems", lambda self: found.append(self) or find(self))
    cfg = CFG.replace(seed=4)
    plan = plan_run(cfg)
    with PPO(cfg, plan.env_pool(), device=plan.device) as model:
        assert model.device == plan.device == torch.device("cpu")  # an MLP policy: "auto" keeps it on the CPU
    assert found == [cfg]
    bad = CFG.replace(n_steps=0)
    for _ in range(2):  # a config that failed fails again
        with pytest.raises(ConfigError, match="n_steps"):
            bad.check()
    assert found == [cfg, bad]


def test_a_pool_with_a_share_in_the_main_process_gives_the_same_numbers_as_one_process() -> None:
    cfg = CFG.replace(env="gym_Reacher-v5", num_workers=2, n_envs=6, main_envs=1)
    pools = [build_env_pool(cfg), build_env_pool(cfg.replace(num_workers=0))]
    assert pools[0].main_envs == 1 and [len(b) for b in pools[0]._group.blocks] == [5]  # 1 env here, 5 in the worker
    params = []
    for pool in pools:
        with PPO(cfg, pool) as model:
            model.learn()
            params.append([p.detach().clone() for p in model.policy.parameters()])
    assert all(torch.equal(a, b) for a, b in zip(*params))


@pytest.fixture
def a_trial(monkeypatch):
    """The first update's thread trial where it runs: on 2 cores, CFG's 2 epochs enough for it, no CPU busy elsewhere
    (whatever the host runs meanwhile); ``calls``: each update's thread count and epochs, in order."""
    calls = []
    real_update = ppo_module.ppo_update

    def counted(policy, optimizer, storage, settings, *args):
        calls.append((torch.get_num_threads(), settings.n_epochs))
        return real_update(policy, optimizer, storage, settings, *args)

    monkeypatch.setattr(threads_module, "physical_cores", lambda: 2)
    monkeypatch.setattr(threads_module, "MIN_TRIAL_EPOCHS", 2)
    monkeypatch.setattr(ppo_module.LoadWatch, "look", lambda self, own=(): 0.0)
    monkeypatch.setattr(ppo_module, "ppo_update", counted)
    return calls


def test_the_thread_trial_is_one_epoch_on_each_count_then_the_update_on_the_cores(a_trial) -> None:
    """Two epochs' work, once: one epoch on the cores and one on torch_threads from the same start; where they agree,
    every update (the first included) runs on the cores, and the numbers are the one-thread run's."""
    with PPO(CFG, build_env_pool(CFG)) as model:
        model.learn()
    assert model.update_threads == 2 and a_trial == [(2, 1), (1, 1)] + [(2, 2)] * 2
    with PPO(CFG.replace(update_threads=1), build_env_pool(CFG)) as reference:
        reference.learn()
    assert all(torch.equal(a, b) for a, b in zip(reference.policy.parameters(), model.policy.parameters()))


def test_no_thread_trial_where_other_processes_keep_the_cpus_busy(a_trial, monkeypatch, capsys) -> None:
    """CPUs busy elsewhere, at start or through the first rollout: no trial, torch_threads for the run, said once."""
    from ppo_dict.core import load

    note = (
        "note: other processes keep this run's CPUs busy: the update runs on 1 thread (torch_threads), not the 2 cores "
        "(--update_threads 2 to ask for them)\n"
    )
    monkeypatch.setattr(load, "_at_start", 1.4)  # as the start measured it beside two CPU burners
    with PPO(CFG.replace(verbose=1), build_env_pool(CFG)) as model:
        model.learn()
    assert model.update_threads == 1 and a_trial == [(1, 2)] * 2 and capsys.readouterr().err == note
    monkeypatch.setattr(load, "_at_start", 0.0)
    monkeypatch.setattr(ppo_module.LoadWatch, "look", lambda self, own=(): 1.4)  # busy through the rollout instead
    a_trial.clear()
    with PPO(CFG.replace(verbose=1), build_env_pool(CFG)) as model:
        model.learn()
    assert model.update_threads == 1 and a_trial == [(1, 2)] * 2 and capsys.readouterr().err == note


def test_update_threads_fall_back_when_they_change_a_bit(a_trial, monkeypatch) -> None:
    """If an update with more threads rounds differently, the run keeps one thread and its numbers."""
    real_update = ppo_module.ppo_update

    def rounds_differently_with_threads(policy, *args):
        result = real_update(policy, *args)
        if torch.get_num_threads() > 1:
            with torch.no_grad():
                next(policy.parameters()).add_(1e-7)
        return result

    reference = PPO(CFG.replace(update_threads=1), build_env_pool(CFG))
    reference.learn()
    monkeypatch.setattr(ppo_module, "ppo_update", rounds_differently_with_threads)
    checked = PPO(CFG, build_env_pool(CFG))
    checked.learn()
    assert checked.update_threads == 1
    assert all(torch.equal(a, b) for a, b in zip(reference.policy.parameters(), checked.policy.parameters()))
    monkeypatch.setattr(ppo_module, "ppo_update", real_update)
    agreeing = PPO(CFG, build_env_pool(CFG))
    agreeing.learn()
    assert agreeing.update_threads == 2 and all(
        torch.equal(a, b) for a, b in zip(reference.policy.parameters(), agreeing.policy.parameters())
    )
    for model in (reference, checked, agreeing):
        model.close()


def test_time_figures_are_logged() -> None:
    model = PPO(CFG.replace(update_threads=1), build_env_pool(CFG))
    model.learn()
    model.close()
    logged = model.logger.history[-1]
    assert set(TIMING_KEYS) <= set(logged)
    assert logged["time/rollout_fps"] > 0 and logged["time/policy_us"] > 0 and logged["time/update_threads"] == 1
    assert model.timing.steps == 256 // 4 and model.timing.rollout > model.timing.policy > 0
