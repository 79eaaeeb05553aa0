"""How a run uses the machine: the run plan (the main process's share of the envs), update threads checked against
one thread, and the time/* figures. None of it may change a number."""
import pytest
import torch

import ppo_dict.algo.ppo as ppo_module
from ppo_dict.algo.collect import TIMING_KEYS
from ppo_dict.algo.ppo import PPO
from ppo_dict.core.config import Config
from ppo_dict.core.errors import ConfigError
from ppo_dict.run.run_plan import build_env_pool, plan_main_envs, plan_run
from ppo_dict.vec import env_spec, probe_env
from ppo_dict.vec.shm_pool import balanced_main_envs

CFG = Config(env="gym_Pendulum-v1", n_envs=4, num_workers=0, n_steps=32, batch_size=64, n_epochs=2, seed=3, total_timesteps=256, verbose=0)


def test_balance_gives_the_main_process_fewer_envs_the_more_its_own_work_costs() -> None:
    assert balanced_main_envs(32, 2, env_seconds=30e-6, main_seconds=0.0) == 16  # nothing else to do: an equal share
    assert balanced_main_envs(32, 2, env_seconds=30e-6, main_seconds=150e-6) == 14  # 16 - 150 / 60 = 13.5
    assert balanced_main_envs(32, 4, env_seconds=30e-6, main_seconds=120e-6) == 5  # 8 - 120 * 3 / 120 = 5
    assert balanced_main_envs(8, 2, env_seconds=10e-6, main_seconds=1e-3) == 0  # a costly policy: no envs in main
    assert balanced_main_envs(8, 2, env_seconds=1.0, main_seconds=-50.0) == 7  # at most all but one env per worker


def test_plan_measures_without_touching_the_rngs() -> None:
    cfg = Config(env="gym_Reacher-v5", n_envs=8, num_workers=2)
    backend = probe_env(env_spec(cfg))
    torch.manual_seed(0)
    before = torch.get_rng_state()
    planned = plan_main_envs(cfg, backend)
    assert torch.equal(torch.get_rng_state(), before)
    assert isinstance(planned, int) and 0 <= planned <= 4
    assert plan_main_envs(cfg.replace(main_envs=3), backend) is None  # the user's count stands
    assert plan_main_envs(cfg.replace(main_steps_envs=False), backend) is None
    assert plan_main_envs(cfg.replace(num_workers=0, n_envs=8), backend) is None


def test_the_plan_is_made_once_and_the_pool_follows_it() -> None:
    """plan_run checks the config, keeps the recipe and the probed backend, balances the share; its
    pool has that share, and a bad config is refused before anything is probed."""
    cfg = Config(env="gym_Reacher-v5", n_envs=8, num_workers=2, n_steps=16, batch_size=32)
    plan = plan_run(cfg)
    assert plan.spec == env_spec(cfg) and plan.backend.observation_space == probe_env(env_spec(cfg)).observation_space
    assert isinstance(plan.main_envs, int)
    pool = plan.env_pool()
    try:
        assert pool.main_envs == plan.main_envs and pool.num_envs == 8
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


def test_a_balanced_pool_gives_the_same_numbers_as_one_process() -> None:
    cfg = CFG.replace(env="gym_Reacher-v5", num_workers=2, n_envs=6, main_envs=1)
    pools = [build_env_pool(cfg), build_env_pool(cfg.replace(num_workers=0))]
    assert pools[0].main_envs == 1 and [len(b) for b in pools[0]._group.blocks] == [5]  # 1 env here, 5 in the worker
    params = []
    for pool in pools:
        with PPO(cfg, pool) as model:
            model.learn()
            params.append([p.detach().clone() for p in model.policy.parameters()])
    assert all(torch.equal(a, b) for a, b in zip(*params))


def test_update_threads_fall_back_when_they_change_a_bit(monkeypatch) -> None:
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
    monkeypatch.setattr(ppo_module, "physical_cores", lambda: 2)
    checked = PPO(CFG, build_env_pool(CFG))
    checked.learn()
    assert checked.update_threads == 1
    assert all(torch.equal(a, b) for a, b in zip(reference.policy.parameters(), checked.policy.parameters()))
    monkeypatch.setattr(ppo_module, "ppo_update", real_update)
    agreeing = PPO(CFG, build_env_pool(CFG))
    agreeing.learn()
    assert agreeing.update_threads == 2 and all(torch.equal(a, b) for a, b in zip(reference.policy.parameters(), agreeing.policy.parameters()))
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
