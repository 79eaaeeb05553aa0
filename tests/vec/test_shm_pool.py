"""ShmEnvPool: bit-exact parity with the in-process pool and with sb3 in every layout, storage in
shared memory, the main process's own block, no resource growth over many create/close cycles.
Fault cases live in ``tests/faults/``."""

from __future__ import annotations

import os
import threading
import warnings

import numpy as np
import pytest

from ppo_dict.core.config import Config
from ppo_dict.envs import resolve_env_name
from ppo_dict.vec import group, probe_env
from ppo_dict.vec.group import SPIN_WAIT
from ppo_dict.vec.in_process import InProcessEnvPool
from ppo_dict.vec.shm_pool import ShmEnvPool
from tests.parity.sides import assert_same_record, run_ours, run_sb3
from tests.faults.scenarios import shm_entries, shm_left


def shm_pool(cfg: Config, mp_method: str = "forkserver") -> ShmEnvPool:
    return ShmEnvPool(
        probe_env(resolve_env_name(cfg.env)),
        cfg.num_workers,
        cfg.envs_per_worker,
        cfg.n_steps,
        mp_method=mp_method,
        main_steps_envs=cfg.main_steps_envs,
        spin_wait_us=cfg.spin_wait_us,
        n_envs=cfg.n_envs,
    )


def discrete(num_workers: int, envs_per_worker: int) -> Config:
    """docs/sb3_parity.md test 8 on CartPole (terminations only)."""
    return Config(
        env="gym_CartPole-v1",
        n_envs=num_workers * envs_per_worker,
        num_workers=num_workers,
        envs_per_worker=envs_per_worker,
        main_steps_envs=False,
        n_steps=32,
        batch_size=64,
        n_epochs=2,
        seed=0,
        total_timesteps=3 * 32 * num_workers * envs_per_worker,
    )


def continuous(num_workers: int, envs_per_worker: int) -> Config:
    """docs/sb3_parity.md test 16 on Pendulum: every episode ends by a 200-step time limit."""
    n_envs = num_workers * envs_per_worker
    return Config(
        env="gym_Pendulum-v1",
        n_envs=n_envs,
        num_workers=num_workers,
        envs_per_worker=envs_per_worker,
        main_steps_envs=False,
        n_steps=128,
        batch_size=64,
        n_epochs=2,
        ent_coef=0.01,
        log_std_init=-0.3,
        seed=1,
        total_timesteps=3 * 128 * n_envs,
    )


LAYOUTS = {
    "discrete-2x2": discrete(2, 2),
    "discrete-4x1": discrete(4, 1),
    "discrete-1x3": discrete(1, 3),
    "continuous-2x1": continuous(2, 1),
    "continuous-2x3": continuous(2, 3),
    # the main process steps worker 0's envs itself (the CLI's default)
    "discrete-3x2-main-steps": discrete(3, 2).replace(main_steps_envs=True),
    "continuous-2x3-main-steps": continuous(2, 3).replace(main_steps_envs=True),
    # every wait sleeps in poll(2) at once instead of looking first: the same numbers
    "continuous-2x3-main-steps-no-spin": continuous(2, 3).replace(main_steps_envs=True, spin_wait_us=0.0),
}


@pytest.mark.parametrize("name", list(LAYOUTS))
def test_shm_pool_is_bit_exact_with_sb3_and_in_process(name: str) -> None:
    cfg = LAYOUTS[name]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sb3 = run_sb3(cfg)
        in_process = run_ours(cfg, InProcessEnvPool(probe_env(resolve_env_name(cfg.env)), cfg.num_envs, cfg.n_steps))
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
        ref = run_ours(cfg, InProcessEnvPool(probe_env(resolve_env_name(cfg.env)), cfg.num_envs, cfg.n_steps))
        shm = run_ours(cfg, shm_pool(cfg, mp_method))
    assert_same_record(ref, shm)


def test_storage_is_shared_memory_written_by_workers() -> None:
    """The env-written fields, and the learner's fields a process stepping envs may write of its columns (actions,
    values, log-probs, rewards: ppo_dict.algo.rollout.shard), are views of one RawArray buffer; GAE's are private."""
    spec = resolve_env_name("gym_Pendulum-v1")
    pool = ShmEnvPool(probe_env(spec), 2, 1, n_steps=4)
    try:
        s = pool.storage
        buffer = np.frombuffer(memoryview(pool._group._buffer).cast("B"), dtype=np.uint8)
        for arr in (s.env_obs["obs"], s.env_rewards, s.terminated, s.env_actions, s.env_terminal_obs["obs"]):
            assert np.shares_memory(arr, buffer)
        for arr in (s.actions, s.values, s.log_probs, s.rewards, s.episode_starts, s.last_dones):
            assert np.shares_memory(arr, buffer)
        assert not np.shares_memory(s.advantages, buffer) and not np.shares_memory(s.returns, buffer)
        pool.reset(seed=7)
        expected = [spec_env_reset_obs(spec, 7 + i) for i in range(2)]
        np.testing.assert_array_equal(s.env_obs["obs"][0], np.stack(expected))
    finally:
        pool.close()


def spec_env_reset_obs(spec, seed: int) -> np.ndarray:
    from ppo_dict.envs import make_env

    env = make_env(spec)
    obs, _ = env.reset(seed=seed)
    env.close()
    return obs


# ------------------------------------------------------------------------------ resources
def resource_counts() -> tuple[int, int]:
    """(open fds of this process, threads of this process)."""
    return len(os.listdir("/proc/self/fd")), threading.active_count()


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


def test_fifty_create_close_cycles_leak_nothing(mp_method: str = "forkserver") -> None:
    """In this process (spawn, slow, is in tests/faults/test_worker_faults.py)."""
    spec = resolve_env_name("gym_CartPole-v1")

    def cycle() -> list[int]:
        pool = ShmEnvPool(probe_env(spec), 2, 2, n_steps=8, mp_method=mp_method)
        pool.reset(0)
        pool.step(0)
        pids = pool.pids
        pool.close()
        return pids

    cycle()  # first use starts the forkserver / resource tracker and the RawArray heap's arena
    before, helpers, shm = resource_counts(), set(live_children()), shm_entries(("",))
    for _ in range(50):
        pids = cycle()
        assert not set(pids) & set(live_children())
    assert resource_counts() == before
    assert not shm_left(shm, prefixes=("",))  # none made here is left (another test's may come and go meanwhile)
    assert set(live_children()) == helpers


def test_main_steps_worker_zeros_envs_in_one_process_fewer() -> None:
    cfg = discrete(2, 2).replace(main_steps_envs=True)
    pool = shm_pool(cfg)
    try:
        assert len(pool.pids) == 1 and pool.num_envs == 4
        pool.reset(0)
        import gymnasium as gym

        for i in range(4):  # envs 0-1 in this process, 2-3 in the worker: all reset with seed + i
            assert np.array_equal(pool.storage.obs["obs"][0, i], gym.make("CartPole-v1").reset(seed=i)[0])
        assert pool.spin == group.default_spin(1)  # one worker process beside this one
    finally:
        pool.close()


def test_waits_look_only_where_every_process_has_a_core(monkeypatch: pytest.MonkeyPatch) -> None:
    """A look takes a core: it is the default only where the worker processes and this one fit the
    physical cores; a setting given is kept, and a bad one refused before any process starts."""
    monkeypatch.setattr(group, "physical_cores", lambda: 4)
    assert [group.default_spin(workers) for workers in (1, 3, 4, 15)] == [SPIN_WAIT, SPIN_WAIT, 0.0, 0.0]
    monkeypatch.setattr(group, "physical_cores", lambda: 16)
    assert group.default_spin(15) == SPIN_WAIT and group.default_spin(16) == 0.0
    assert group.layout_problems([[0]], "forkserver", 1.0, 0.0) == group.layout_problems([[0]], "forkserver", 1.0, 250.0) == []
    for bad in (-1.0, 2e6, "1000"):
        assert group.layout_problems([[0]], "forkserver", 1.0, bad) == [
            f"spin_wait_us={bad!r}: must be None or in [0, 1000000] microseconds"
        ]
    assert "spin_wait_us=-5.0: must be in [0.0, 1000000.0]" in "; ".join(Config(spin_wait_us=-5.0).problems())


@pytest.mark.parametrize(
    "mode, head",
    [
        ("step_raise", "the main process, env 0 (gym_FaultEnv-v0) raised in step: RuntimeError: boom\n"),
        (
            "reset_raise",
            "the main process, env 0 (gym_FaultEnv-v0) raised in reset (seed=0): RuntimeError: reset boom (seed=0)\n",
        ),
    ],
)
def test_env_error_in_the_main_process_envs_is_reported_like_a_workers(mode: str, head: str) -> None:
    from ppo_dict.core.errors import EnvWorkerError
    from tests.faults.fault_envs import fault_spec

    pool = ShmEnvPool(probe_env(fault_spec(mode=mode, bad_seed=0)), 2, 1, n_steps=8, main_steps_envs=True)
    worker_pids = list(pool.pids)
    with pytest.raises(EnvWorkerError) as exc:
        pool.reset(0)
        for t in range(5):
            pool.step(t)
    message = str(exc.value)
    assert message.startswith(head + "--- the main process traceback ---\nTraceback (most recent call last):\n"), message
    assert 'fault_envs.py", line' in message
    assert pool.closed
    for pid in worker_pids:  # the worker was stopped too (a zombie awaiting its parent counts as gone)
        try:
            with open(f"/proc/{pid}/status") as f:
                assert "State:\tZ" in f.read()
        except FileNotFoundError:
            pass
