"""The shared-memory layout: measured from the storage itself, aligned, and checked against free space."""
from __future__ import annotations


import pytest

from ppo_dict.vec.shared_memory import check_shared_memory, plan_layout





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
