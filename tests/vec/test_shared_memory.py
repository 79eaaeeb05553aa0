"""The shared-memory layout: measured from the storage itself, aligned, and checked against free space."""

from __future__ import annotations


import multiprocessing as mp

import numpy as np
import pytest
from gymnasium import spaces

from ppo_dict.data.storage import RolloutStorage
from ppo_dict.vec.shared_memory import check_shared_memory, plan_layout, view_alloc


def test_layout_covers_every_env_written_field() -> None:
    """Pendulum: obs float32[T+1,N,3], terminal obs, rewards, 2 flags, the episode statistics (return, length, success,
    Monitor's time: values and kinds), actions; then what a process stepping envs writes of its own columns (the
    policy where the envs are): the step's actions, values and log-probs, the learner's rewards, episode starts and last
    episode ends. The observations and the policy's outputs hold rows padded to 64 bytes (a step's 2 x 3 floats: 16
    floats), the terminal observations one padded row per env; what numpy alone reads is not padded."""
    import gymnasium as gym

    env = gym.make("Pendulum-v1")
    layout = plan_layout(env.observation_space, env.action_space, n_steps=5, n_envs=2)
    shapes = [(shape, dtype) for _, shape, dtype in layout.fields]
    assert shapes == [
        ((6, 16), "<f4"),
        ((2, 16), "<f4"),
        ((5, 2), "<f4"),
        ((5, 2), "|b1"),
        ((5, 2), "|b1"),
        ((2, 4), "<f8"),
        ((2, 4), "|u1"),
        ((2, 1), "<f4"),
        ((5, 16), "<f4"),
        ((5, 16), "<f4"),
        ((5, 16), "<f4"),
        ((5, 2), "<f4"),
        ((5, 2), "<f4"),
        ((2,), "|b1"),
    ]
    assert all(offset % 64 == 0 for offset, _, _ in layout.fields)
    # the last 64: room to find the first aligned byte
    assert layout.nbytes == 6 * 64 + 2 * 64 + 6 * 64 + 3 * 5 * 64 + 3 * 64 + 64
    normalised = plan_layout(env.observation_space, env.action_space, n_steps=5, n_envs=2, stage_keys=("obs",))
    # their own stage
    assert [(shape, dtype) for _, shape, dtype in normalised.fields][8:10] == [((6, 16), "<f4"), ((2, 16), "<f4")]


SPACE = spaces.Dict({"image": spaces.Box(0, 255, (5, 7, 3), np.uint8), "state": spaces.Box(-1, 1, (3,), np.float32)})


def _write_from_another_process(buffer, layout, n_envs: int) -> None:
    storage = RolloutStorage(SPACE, spaces.Discrete(4), 3, n_envs, alloc=view_alloc(buffer, layout))
    for t in range(4):
        if storage.env_obs["state"][t].ctypes.data % 64:
            raise SystemExit(3)
        storage.env_obs["state"][t] = t + np.arange(n_envs * 3, dtype=np.float32).reshape(n_envs, 3)


@pytest.mark.parametrize("n_envs", [1, 3, 5])
def test_every_step_row_is_aligned_in_every_process_that_maps_the_buffer(n_envs: int) -> None:
    """The views start on 64-byte boundaries in the worker's address space as in the main's, and
    are the same bytes: what a forkserver process writes, this one reads at the same rows."""
    ctx = mp.get_context("forkserver")
    layout = plan_layout(SPACE, spaces.Discrete(4), 3, n_envs)
    buffer = ctx.RawArray("b", layout.nbytes)
    storage = RolloutStorage(SPACE, spaces.Discrete(4), 3, n_envs, alloc=view_alloc(buffer, layout))
    worker = ctx.Process(target=_write_from_another_process, args=(buffer, layout, n_envs))
    worker.start()
    worker.join(60)
    assert worker.exitcode == 0
    for t in range(4):
        for arr in storage.env_obs.values():
            assert arr[t].ctypes.data % 64 == 0 and arr[t].flags.c_contiguous
        np.testing.assert_array_equal(
            storage.env_obs["state"][t], t + np.arange(n_envs * 3, dtype=np.float32).reshape(n_envs, 3)
        )


def test_shared_memory_check_names_sizes_and_the_fix(monkeypatch) -> None:
    import ppo_dict.vec.shared_memory as shared_memory

    monkeypatch.setattr(shared_memory, "free_bytes", lambda path: 10 * 2**20 if path == "/dev/shm" else 2**40)
    with pytest.warns(
        RuntimeWarning, match=r"needs 100\.0 MB of shared memory, /dev/shm has 10\.0 MB free; .* use docker run --shm-size=1g"
    ):
        check_shared_memory(100 * 2**20)
    monkeypatch.setattr(shared_memory, "free_bytes", lambda path: 10 * 2**20)
    with pytest.raises(
        RuntimeError, match=r"needs 100\.0 MB of shared memory, /dev/shm has 10\.0 MB free and .* has 10\.0 MB"
    ):
        check_shared_memory(100 * 2**20)
    check_shared_memory(5 * 2**20)
