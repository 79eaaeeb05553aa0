"""sb3's documentation-style scripts with the import changed give sb3's numbers, bit for bit.

Each script (``tests/api/scripts.py``) runs with sb3's imports and with ppo_dict's (``PPO`` or
``MaskablePPO`` changed, sb3's ``make_vec_env`` kept: those envs are stepped as sb3 steps them), and
with ppo_dict's ``make_vec_env`` too (its envs in ppo_dict's pool, a worker process beside the main
process's share for two envs). What the callbacks saw at every step, every log dump, every rollout
buffer, the parameters and Adam state, and what the scripts evaluated must be equal (``==``).
"""

from __future__ import annotations

import os

import pytest

from tests.api.scripts import run
from tests.parity.sides import assert_same_value


def assert_same_run(sb3, ours) -> None:
    assert len(sb3.steps) == len(ours.steps) > 0
    for i, (a, b) in enumerate(zip(sb3.steps, ours.steps)):
        assert_same_value(list(a), list(b), f"step {i} as a callback saw it")
    assert_same_value(sb3.events, ours.events, "callback events")
    assert_same_value(sb3.rollouts, ours.rollouts, "rollout buffers")
    assert_same_value(sb3.dumps, ours.dumps, "log dumps")
    assert_same_value(sb3.results, ours.results, "results")


FAST = ["pendulum_eval", "stop_early", "save_load_continue", "vec_normalize", "maskable", "callbacks"]


def assert_exercised(name: str, record) -> None:
    """What a script is for happened (else its comparison could not fail where it matters)."""
    if name == "callbacks":  # the threshold stopped training at the first evaluation, after checkpoints
        assert (
            0 < record.results["stopped_at"] < 2000
            and len(record.results["checkpoints"]) >= 2
            and record.results["statistics"]
        )
        assert [e[0] for e in record.events].count("training_start") == 1 and record.results["seen"]
    if name == "stop_early":
        assert record.results["stopped_at"] == 150 and len(record.rollouts) > 0
    if name == "pendulum_eval":
        assert len(record.results["evaluations"]["timesteps"]) == 3


@pytest.mark.parametrize("name", FAST)
def test_script_with_the_import_changed_gives_sb3s_numbers(name: str, tmp_path) -> None:
    sb3 = run(name, "sb3", os.path.join(tmp_path, "sb3"))
    ours = run(name, "ppo_dict", os.path.join(tmp_path, "ours"))
    assert_exercised(name, ours)
    assert_same_run(sb3, ours)


@pytest.mark.parametrize("name", ["save_load_continue", "vec_normalize", "multi_input", "callbacks"])
def test_script_with_ppo_dict_make_vec_env_gives_sb3s_numbers(name: str, tmp_path) -> None:
    """The faster form: ppo_dict's make_vec_env, whose envs the trainer's pool takes over."""
    sb3 = run(name, "sb3", os.path.join(tmp_path, "sb3"))
    ours = run(name, "ppo_dict_envs", os.path.join(tmp_path, "ours"))
    assert_same_run(sb3, ours)


@pytest.mark.slow
@pytest.mark.parametrize(
    "name,which",
    [
        ("cnn", "ppo_dict"),
        ("cnn", "ppo_dict_envs"),
        ("multi_input", "ppo_dict"),
        ("maskable", "ppo_dict_envs"),
        ("pendulum_eval", "ppo_dict_envs"),
    ],
)
def test_more_scripts_give_sb3s_numbers(name: str, which: str, tmp_path) -> None:
    sb3 = run(name, "sb3", os.path.join(tmp_path, "sb3"))
    ours = run(name, which, os.path.join(tmp_path, "ours"))
    assert_same_run(sb3, ours)
