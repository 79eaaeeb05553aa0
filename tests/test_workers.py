"""ShmEnvPool and ShmVecEnv: bit-exact parity with the in-process pool and with sb3, and no
resource growth over many create/close cycles. Fault cases live in ``tests/faults/``."""
from __future__ import annotations

import os
import threading
import warnings

import numpy as np
import pytest

from envs import resolve_env_name
from ppo_dict.config import Config
from ppo_dict.env_pool import InProcessEnvPool
from ppo_dict.workers import ShmEnvPool, check_shared_memory, plan_layout
from tests.parity.sides import assert_same_record, run_ours, run_sb3


def shm_pool(cfg: Config, mp_method: str = "forkserver") -> ShmEnvPool:
    n_envs, num_workers, envs_per_worker = cfg.worker_layout
    return ShmEnvPool(resolve_env_name(cfg.env), num_workers, envs_per_worker, cfg.n_steps, mp_method=mp_method)


def discrete(num_workers: int, envs_per_worker: int) -> Config:
    """sb3_parity.md test 8 on CartPole (terminations only)."""
    return Config(
        env="gym_CartPole-v1", n_envs=num_workers * envs_per_worker, num_workers=num_workers, envs_per_worker=envs_per_worker,
        n_steps=32, batch_size=64, n_epochs=2, seed=0, total_timesteps=3 * 32 * num_workers * envs_per_worker,
    )


def continuous(num_workers: int, envs_per_worker: int) -> Config:
    """sb3_parity.md test 16 on Pendulum: every episode ends by a 200-step time limit."""
    n_envs = num_workers * envs_per_worker
    return Config(
        env="gym_Pendulum-v1", n_envs=n_envs, num_workers=num_workers, envs_per_worker=envs_per_worker,
        n_steps=128, batch_size=64, n_epochs=2, ent_coef=0.01, log_std_init=-0.3, seed=1, total_timesteps=3 * 128 * n_envs,
    )


LAYOUTS = {
    "discrete-2x2": discrete(2, 2),
    "discrete-4x1": discrete(4, 1),
    "discrete-1x3": discrete(1, 3),
    "continuous-2x1": continuous(2, 1),
    "continuous-2x3": continuous(2, 3),
}


@pytest.mark.parametrize("name", list(LAYOUTS))
def test_shm_pool_is_bit_exact_with_sb3_and_in_process(name: str) -> None:
    cfg = LAYOUTS[name]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sb3 = run_sb3(cfg)
        in_process = run_ours(cfg, InProcessEnvPool(resolve_env_name(cfg.env), cfg.num_envs, cfg.n_steps))
        shm = run_ours(cfg, shm_pool(cfg))
    assert_same_record(sb3, shm)
    assert_same_record(in_process, shm)
    if cfg.env == "gym_Pendulum-v1":
        truncated_rows = sum(int(r["episode_starts"][1:].sum()) for r in shm.rollouts)
        assert truncated_rows == cfg.num_envs, "each env must hit Pendulum's 200-step limit once (bootstrapped)"


@pytest.mark.parametrize("mp_method", ["spawn", "fork"])
def test_other_start_methods_give_the_same_numbers(mp_method: str) -> None:
    cfg = discrete(2, 2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = run_ours(cfg, InProcessEnvPool(resolve_env_name(cfg.env), cfg.num_envs, cfg.n_steps))
        shm = run_ours(cfg, shm_pool(cfg, mp_method))
    assert_same_record(ref, shm)


def test_storage_is_shared_memory_written_by_workers() -> None:
    """The env-written fields are views of one RawArray buffer; learner fields are private."""
    spec = resolve_env_name("gym_Pendulum-v1")
    pool = ShmEnvPool(spec, 2, 1, n_steps=4)
    try:
        s = pool.storage
        buffer = np.frombuffer(memoryview(pool._group._buffer).cast("B"), dtype=np.uint8)
        for arr in (s.obs["obs"], s.rewards, s.terminated, s.env_actions, s.terminal_obs["obs"]):
            assert np.shares_memory(arr, buffer)
        assert not np.shares_memory(s.values, buffer)
        pool.reset(seed=7)
        expected = [spec_env_reset_obs(spec, 7 + i) for i in range(2)]
        np.testing.assert_array_equal(s.obs["obs"][0], np.stack(expected))
    finally:
        pool.close()


def spec_env_reset_obs(spec, seed: int) -> np.ndarray:
    from envs import make_env

    env = make_env(spec)
    obs, _ = env.reset(seed=seed)
    env.close()
    return obs


def test_layout_covers_every_env_written_field() -> None:
    """Pendulum: obs float32[T+1,N,3], terminal obs, rewards, 2 flags, ep return/length, actions."""
    import gymnasium as gym

    env = gym.make("Pendulum-v1")
    layout = plan_layout(env.observation_space, env.action_space, n_steps=5, n_envs=2)
    shapes = [(shape, dtype) for _, shape, dtype in layout.fields]
    assert shapes == [((6, 2, 3), "<f4"), ((2, 3), "<f4"), ((5, 2), "<f4"), ((5, 2), "|b1"), ((5, 2), "|b1"), ((2,), "<f8"), ((2,), "<i8"), ((2, 1), "<f4")]
    assert all(offset % 64 == 0 for offset, _, _ in layout.fields)
    assert layout.nbytes == 192 + 7 * 64  # 144 bytes of obs round up to 192


def test_shared_memory_check_names_sizes_and_the_fix(monkeypatch) -> None:
    import ppo_dict.workers as workers

    monkeypatch.setattr(workers, "free_bytes", lambda path: 10 * 2**20 if path == "/dev/shm" else 2**40)
    with pytest.warns(RuntimeWarning, match=r"needs 100\.0 MB of shared memory, /dev/shm has 10\.0 MB free; .* use docker run --shm-size=1g"):
        check_shared_memory(100 * 2**20)
    monkeypatch.setattr(workers, "free_bytes", lambda path: 10 * 2**20)
    with pytest.raises(RuntimeError, match=r"needs 100\.0 MB of shared memory, /dev/shm has 10\.0 MB free and .* has 10\.0 MB"):
        check_shared_memory(100 * 2**20)
    check_shared_memory(5 * 2**20)


# ------------------------------------------------------------------------------ resources
def resource_counts() -> tuple[int, int, int]:
    """(/dev/shm entries, open fds of this process, threads of this process)."""
    return len(os.listdir("/dev/shm")), len(os.listdir("/proc/self/fd")), threading.active_count()


def live_children() -> list[int]:
    """PIDs whose parent is this process and that are not zombies."""
    me, found = os.getpid(), []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == me and fields[0] != "Z":
            found.append(int(pid))
    return found


@pytest.mark.parametrize("mp_method", ["forkserver", pytest.param("spawn", marks=pytest.mark.slow)])
def test_fifty_create_close_cycles_leak_nothing(mp_method: str) -> None:
    spec = resolve_env_name("gym_CartPole-v1")

    def cycle() -> list[int]:
        pool = ShmEnvPool(spec, 2, 2, n_steps=8, mp_method=mp_method)
        pool.reset(0)
        pool.step(0)
        pids = pool.pids
        pool.close()
        return pids

    cycle()  # first use starts the forkserver / resource tracker and the RawArray heap's arena
    before, helpers = resource_counts(), set(live_children())
    for _ in range(50):
        pids = cycle()
        assert not set(pids) & set(live_children())
    assert resource_counts() == before
    assert set(live_children()) == helpers
