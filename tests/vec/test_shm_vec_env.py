"""ShmVecEnv as sb3 uses a vec env: sb3's PPO on it equals DummyVecEnv, every return value and env call as DummyVecEnv
gives it."""

from __future__ import annotations

import os

import numpy as np
import pytest


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
        "buffer": {
            name: getattr(buf, name).copy()
            for name in ("observations", "actions", "rewards", "episode_starts", "values", "log_probs", "advantages")
        },
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


@pytest.mark.parametrize("n_envs, num_workers", [(4, 2), (5, 2), (7, None)])
def test_shm_vec_env_steps_like_dummy_vec_env_across_time_limits(n_envs: int, num_workers) -> None:
    """Every return value, infos included ("TimeLimit.truncated", raw "terminal_observation",
    Monitor's "episode"), over Pendulum's 200-step limit; reset seeds and options used once. Envs
    split unevenly over the workers (5 in 2: 3 + 2; 7 over a worker per usable CPU) step as DummyVecEnv's."""
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import DummyVecEnv

    from ppo_dict import ShmVecEnv

    shm = make_vec_env(
        "Pendulum-v1", n_envs=n_envs, seed=5, vec_env_cls=ShmVecEnv, vec_env_kwargs=dict(num_workers=num_workers)
    )
    dummy = make_vec_env("Pendulum-v1", n_envs=n_envs, seed=5, vec_env_cls=DummyVecEnv)
    blocks = [len(block) for block in shm.pool._group.blocks]
    assert sum(blocks) == n_envs and max(blocks) - min(blocks) <= 1 and (num_workers is None or len(blocks) == num_workers)
    try:
        assert_same_tree(dummy.reset(), shm.reset(), "reset obs")
        assert_same_tree(dummy.reset_infos, shm.reset_infos, "reset infos")
        rng = np.random.default_rng(0)
        ends = 0
        for t in range(205):
            actions = rng.uniform(-2, 2, size=(n_envs, 1)).astype(np.float32)
            want, got = dummy.step(actions), shm.step(actions)
            assert_same_tree(list(want[:3]), list(got[:3]), f"step {t}")
            assert_same_tree(untimed(want[3]), untimed(got[3]), f"infos at step {t}")
            ends += int(want[2].sum())
        assert ends == n_envs and got[1].dtype == np.float32
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

    env_fns = [lambda: Monitor(gym.make("CartPole-v1")) for _ in range(5)]
    shm, dummy = ShmVecEnv(env_fns, num_workers=2), DummyVecEnv(env_fns)  # envs 0..2 in worker 0, 3..4 in worker 1
    try:
        for venv in (shm, dummy):
            venv.set_attr("tag", "x", indices=[3, 1])
        assert shm.get_attr("tag", indices=[3, 1]) == ["x", "x"]
        assert shm.get_attr("spec", indices=2)[0].id == "CartPole-v1"
        assert shm.env_method("get_wrapper_attr", "tag", indices=[1]) == ["x"]
        assert shm.env_is_wrapped(Monitor) == dummy.env_is_wrapped(Monitor) == [True] * 5
        # not TimeLimit: importing rl_zoo3 (an earlier test in this process may have) rebinds gymnasium's TimeLimit to a
        # subclass process-wide, and envs made by workers started before that are not instances of it (sb3's
        # SubprocVecEnv alike)
        assert shm.env_is_wrapped(gym.wrappers.OrderEnforcing, indices=[0]) == [True]
        assert shm.has_attr("tag") is False and shm.has_attr("spec") is True
        assert shm.render_mode is None and shm.num_envs == 5
        with pytest.raises(AttributeError, match="wrapper Monitor has no attribute 'no_such_attribute'"):
            shm.get_attr("no_such_attribute", indices=[2])
        assert shm.get_attr("tag", indices=[1]) == ["x"], "a failed get_attr leaves the workers usable"
    finally:
        shm.close()
        dummy.close()


def test_importing_ppo_dict_does_not_import_sb3() -> None:
    import subprocess
    import sys

    code = (
        "import sys, ppo_dict, ppo_dict.vec; assert 'stable_baselines3' not in sys.modules; ppo_dict.ShmVecEnv; "
        "assert 'stable_baselines3' in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
