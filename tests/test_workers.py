"""ShmEnvPool and ShmVecEnv: bit-exact parity with the in-process pool and with sb3, and no
resource growth over many create/close cycles. Fault cases live in ``tests/faults/``."""
from __future__ import annotations

import os
import threading
import warnings

import numpy as np
import pytest

from ppo_dict.envs import resolve_env_name
from ppo_dict.config import Config
from ppo_dict.vec import probe_env
from ppo_dict.vec.in_process import InProcessEnvPool
from ppo_dict.vec.shared_memory import check_shared_memory, plan_layout
from ppo_dict.vec.shm_pool import ShmEnvPool
from tests.parity.sides import assert_same_record, run_ours, run_sb3


def shm_pool(cfg: Config, mp_method: str = "forkserver") -> ShmEnvPool:
    n_envs, num_workers, envs_per_worker = cfg.worker_layout
    return ShmEnvPool(probe_env(resolve_env_name(cfg.env)), num_workers, envs_per_worker, cfg.n_steps, mp_method=mp_method,
                      main_steps_envs=cfg.main_steps_envs)


def discrete(num_workers: int, envs_per_worker: int) -> Config:
    """docs/sb3_parity.md test 8 on CartPole (terminations only)."""
    return Config(
        env="gym_CartPole-v1", n_envs=num_workers * envs_per_worker, num_workers=num_workers, envs_per_worker=envs_per_worker,
        main_steps_envs=False,
        n_steps=32, batch_size=64, n_epochs=2, seed=0, total_timesteps=3 * 32 * num_workers * envs_per_worker,
    )


def continuous(num_workers: int, envs_per_worker: int) -> Config:
    """docs/sb3_parity.md test 16 on Pendulum: every episode ends by a 200-step time limit."""
    n_envs = num_workers * envs_per_worker
    return Config(
        env="gym_Pendulum-v1", n_envs=n_envs, num_workers=num_workers, envs_per_worker=envs_per_worker, main_steps_envs=False,
        n_steps=128, batch_size=64, n_epochs=2, ent_coef=0.01, log_std_init=-0.3, seed=1, total_timesteps=3 * 128 * n_envs,
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
    """The env-written fields are views of one RawArray buffer; learner fields are private."""
    spec = resolve_env_name("gym_Pendulum-v1")
    pool = ShmEnvPool(probe_env(spec), 2, 1, n_steps=4)
    try:
        s = pool.storage
        buffer = np.frombuffer(memoryview(pool._group._buffer).cast("B"), dtype=np.uint8)
        for arr in (s.env_obs["obs"], s.env_rewards, s.terminated, s.env_actions, s.env_terminal_obs["obs"]):
            assert np.shares_memory(arr, buffer)
        assert not np.shares_memory(s.values, buffer) and not np.shares_memory(s.rewards, buffer)
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
    import ppo_dict.vec.shared_memory as shared_memory

    monkeypatch.setattr(shared_memory, "free_bytes", lambda path: 10 * 2**20 if path == "/dev/shm" else 2**40)
    with pytest.warns(RuntimeWarning, match=r"needs 100\.0 MB of shared memory, /dev/shm has 10\.0 MB free; .* use docker run --shm-size=1g"):
        check_shared_memory(100 * 2**20)
    monkeypatch.setattr(shared_memory, "free_bytes", lambda path: 10 * 2**20)
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
    before, helpers = resource_counts(), set(live_children())
    for _ in range(50):
        pids = cycle()
        assert not set(pids) & set(live_children())
    assert resource_counts() == before
    assert set(live_children()) == helpers


# ------------------------------------------------------------------------------ ShmVecEnv
def assert_same_tree(a, b, what: str) -> None:
    """Exact equality of nested dicts/lists/arrays, dtypes included."""
    if isinstance(a, dict):
        assert isinstance(b, dict) and sorted(a) == sorted(b), f"{what}: keys {sorted(a)} != {sorted(b)}"
        for key in a:
            assert_same_tree(a[key], b[key], f"{what}[{key!r}]")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), f"{what}: length {len(a)} != {len(b)}"
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same_tree(x, y, f"{what}[{i}]")
    elif isinstance(a, np.ndarray):
        assert isinstance(b, np.ndarray) and a.dtype == b.dtype and a.shape == b.shape, f"{what}: {b!r} is not like {a!r}"
        assert np.array_equal(a, b), f"{what}: {a} != {b}"
    else:
        assert type(a) is type(b) and a == b, f"{what}: {a!r} != {b!r}"


def sb3_ppo_run(vec_env_cls, env_id: str, n_steps: int, **vec_env_kwargs) -> dict:
    import torch
    from stable_baselines3 import PPO as SB3PPO
    from stable_baselines3.common.env_util import make_vec_env

    venv = make_vec_env(env_id, n_envs=4, seed=0, vec_env_cls=vec_env_cls, vec_env_kwargs=vec_env_kwargs)
    model = SB3PPO("MlpPolicy", venv, n_steps=n_steps, batch_size=64, n_epochs=2, seed=0, verbose=0, device="cpu")
    model.learn(3 * 4 * n_steps)
    venv.close()
    buf = model.rollout_buffer
    return {
        "params": {k: v.numpy().copy() for k, v in model.policy.state_dict().items()},
        "buffer": {name: getattr(buf, name).copy() for name in ("observations", "actions", "rewards", "episode_starts", "values", "log_probs", "advantages")},
        "logs": {k: v for k, v in model.logger.name_to_value.items() if not k.startswith("time/")},
        "episodes": [(e["r"], e["l"]) for e in model.ep_info_buffer],
        "rng": torch.get_rng_state().numpy(),
    }


@pytest.mark.parametrize("env_id, n_steps", [("CartPole-v1", 64), ("Pendulum-v1", 128)])
def test_sb3_ppo_with_shm_vec_env_is_bit_exact_with_dummy_vec_env(env_id: str, n_steps: int) -> None:
    from stable_baselines3.common.vec_env import DummyVecEnv

    from ppo_dict import ShmVecEnv

    dummy = sb3_ppo_run(DummyVecEnv, env_id, n_steps)
    shm = sb3_ppo_run(ShmVecEnv, env_id, n_steps, num_workers=2)
    assert_same_tree(dummy, shm, env_id)
    assert len(dummy["episodes"]) >= 4, "Monitor episodes (make_vec_env's wrapper) must reach sb3 through infos"


def untimed(infos: list[dict]) -> list[dict]:
    """Infos without Monitor's wall-clock episode time."""
    return [{**info, "episode": {**info["episode"], "t": 0.0}} if "episode" in info else info for info in infos]


def test_shm_vec_env_steps_like_dummy_vec_env_across_time_limits() -> None:
    """Every return value, infos included ("TimeLimit.truncated", raw "terminal_observation",
    Monitor's "episode"), over Pendulum's 200-step limit; reset seeds and options used once."""
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import DummyVecEnv

    from ppo_dict import ShmVecEnv

    shm = make_vec_env("Pendulum-v1", n_envs=4, seed=5, vec_env_cls=ShmVecEnv, vec_env_kwargs=dict(num_workers=2))
    dummy = make_vec_env("Pendulum-v1", n_envs=4, seed=5, vec_env_cls=DummyVecEnv)
    try:
        assert_same_tree(dummy.reset(), shm.reset(), "reset obs")
        assert_same_tree(dummy.reset_infos, shm.reset_infos, "reset infos")
        rng = np.random.default_rng(0)
        ends = 0
        for t in range(205):
            actions = rng.uniform(-2, 2, size=(4, 1)).astype(np.float32)
            want, got = dummy.step(actions), shm.step(actions)
            assert_same_tree(list(want[:3]), list(got[:3]), f"step {t}")
            assert_same_tree(untimed(want[3]), untimed(got[3]), f"infos at step {t}")
            ends += int(want[2].sum())
        assert ends == 4 and got[1].dtype == np.float32
        assert_same_tree(dummy.reset_infos, shm.reset_infos, "reset infos after auto-reset")
        assert_same_tree(dummy.reset(), shm.reset(), "unseeded reset")
    finally:
        shm.close()
        dummy.close()


def test_shm_vec_env_attributes_and_methods_reach_the_right_envs() -> None:
    import gymnasium as gym
    from stable_baselines3.common.monitor import Monitor
    from stable_baselines3.common.vec_env import DummyVecEnv

    from ppo_dict import ShmVecEnv

    env_fns = [lambda: Monitor(gym.make("CartPole-v1")) for _ in range(4)]
    shm, dummy = ShmVecEnv(env_fns, num_workers=2), DummyVecEnv(env_fns)
    try:
        for venv in (shm, dummy):
            venv.set_attr("tag", "x", indices=[3, 1])
        assert shm.get_attr("tag", indices=[3, 1]) == ["x", "x"]
        assert shm.get_attr("spec", indices=2)[0].id == "CartPole-v1"
        assert shm.env_method("get_wrapper_attr", "tag", indices=[1]) == ["x"]
        assert shm.env_is_wrapped(Monitor) == dummy.env_is_wrapped(Monitor) == [True] * 4
        assert shm.env_is_wrapped(gym.wrappers.TimeLimit, indices=[0]) == [True]
        assert shm.has_attr("tag") is False and shm.has_attr("spec") is True
        assert shm.render_mode is None and shm.num_envs == 4
        with pytest.raises(AttributeError, match="wrapper Monitor has no attribute 'no_such_attribute'"):
            shm.get_attr("no_such_attribute", indices=[2])
        assert shm.get_attr("tag", indices=[1]) == ["x"], "a failed get_attr leaves the workers usable"
    finally:
        shm.close()
        dummy.close()


def test_importing_ppo_dict_does_not_import_sb3() -> None:
    import subprocess
    import sys

    code = "import sys, ppo_dict, ppo_dict.vec; assert 'stable_baselines3' not in sys.modules; ppo_dict.ShmVecEnv; assert 'stable_baselines3' in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_main_steps_worker_zeros_envs_in_one_process_fewer() -> None:
    cfg = discrete(2, 2).replace(main_steps_envs=True)
    pool = shm_pool(cfg)
    try:
        assert len(pool.pids) == 1 and pool.num_envs == 4
        pool.reset(0)
        import gymnasium as gym

        for i in range(4):  # envs 0-1 in this process, 2-3 in the worker: all reset with seed + i
            assert np.array_equal(pool.storage.obs["obs"][0, i], gym.make("CartPole-v1").reset(seed=i)[0])
    finally:
        pool.close()


@pytest.mark.parametrize("mode, head", [
    ("step_raise", "the main process, env 0 (gym_FaultEnv-v0) raised in step: RuntimeError: boom\n"),
    ("reset_raise", "the main process, env 0 (gym_FaultEnv-v0) raised in reset (seed=0): RuntimeError: reset boom (seed=0)\n"),
])
def test_env_error_in_the_main_process_envs_is_reported_like_a_workers(mode: str, head: str) -> None:
    from ppo_dict.errors import EnvWorkerError
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
