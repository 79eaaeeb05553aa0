"""Schedules in the zips ``save`` writes: read back without a pickle and without a flag where sb3's JSON describes
them (sb3's ``ConstantSchedule`` and ``LinearSchedule``, ppo_dict's and rl-zoo's ``SimpleLinearSchedule``), and
otherwise refused with the ``custom_objects`` line that passes them again (sb3's documentation's ``linear_schedule``).
Save, load and train on under sb3's import and ppo_dict's, compared with ``==``."""

from __future__ import annotations

import os
import re
from types import SimpleNamespace
from typing import Callable

import pytest

import ppo_dict
from ppo_dict.core.errors import CheckpointError
from tests.api.scripts import Record, Watch, run
from tests.api.test_scripts import assert_same_run


def linear_schedule(initial_value: float) -> Callable[[float], float]:
    """sb3's documentation's linear schedule: a closure, which no JSON describes."""

    def func(progress_remaining: float) -> float:
        return progress_remaining * initial_value

    return func


def described(api: SimpleNamespace, tmp: str, record: Record) -> None:
    """Schedules sb3's JSON describes: saved, loaded back (by ppo_dict: from the JSON alone) and trained on."""
    from stable_baselines3.common.utils import ConstantSchedule, LinearSchedule

    from ppo_dict.interop.schedules import SimpleLinearSchedule

    env = api.make_vec_env("CartPole-v1", n_envs=2, seed=3)
    schedules = dict(
        learning_rate=LinearSchedule(1e-3, 1e-4, 0.5),
        clip_range=ConstantSchedule(0.15),
        clip_range_vf=SimpleLinearSchedule(0.3),
    )
    model = api.PPO("MlpPolicy", env, n_steps=64, batch_size=64, n_epochs=2, seed=2, verbose=0, **schedules)
    record.attach(model)
    model.learn(256, callback=Watch(record))
    model.save(os.path.join(tmp, "described"))
    loaded = api.PPO.load(os.path.join(tmp, "described"), env=env)
    record.results["schedules"] = [
        (loaded.lr_schedule(p), loaded.clip_range(p), loaded.clip_range_vf(p)) for p in (1.0, 0.6, 0.2)
    ]
    record.attach(loaded)
    loaded.learn(256, reset_num_timesteps=False, callback=Watch(record))
    record.keep("continued", loaded)
    env.close()


def functions(api: SimpleNamespace, tmp: str, record: Record) -> None:
    """sb3's documentation's schedule functions: loaded with the custom_objects line ppo_dict's refusal shows."""
    env = api.make_vec_env("CartPole-v1", n_envs=2, seed=3)
    model = api.PPO(
        "MlpPolicy",
        env,
        n_steps=64,
        batch_size=64,
        n_epochs=2,
        seed=2,
        verbose=0,
        learning_rate=linear_schedule(1e-3),
        clip_range=lambda progress: 0.1 + 0.1 * progress,
    )
    model.learn(128, callback=Watch(record))
    model.save(os.path.join(tmp, "functions"))
    loaded = api.PPO.load(
        os.path.join(tmp, "functions"),
        env=env,
        custom_objects={"learning_rate": linear_schedule(1e-3), "clip_range": lambda progress: 0.1 + 0.1 * progress},
    )
    loaded.learn(128, reset_num_timesteps=False, callback=Watch(record))
    record.keep("continued", loaded)
    env.close()


SCRIPTS = {"described": described, "functions": functions}


@pytest.mark.parametrize("name", list(SCRIPTS))
def test_saved_schedules_load_back_as_sb3s(name: str, tmp_path) -> None:
    sb3 = run(name, "sb3", os.path.join(tmp_path, "sb3"), SCRIPTS)
    ours = run(name, "ppo_dict_envs", os.path.join(tmp_path, "ours"), SCRIPTS)
    if name == "described":
        assert ours.results["schedules"][0] == (1e-3, 0.15, 0.3) and ours.results["schedules"][2][0] == 1e-4
    assert_same_run(sb3, ours)


def test_a_schedule_no_json_describes_is_refused_with_the_line_that_passes_it(tmp_path) -> None:
    model = ppo_dict.PPO(
        "MlpPolicy",
        "CartPole-v1",
        n_steps=16,
        batch_size=16,
        learning_rate=linear_schedule(1e-3),
        clip_range=lambda progress: 0.2 * progress,
    )
    model.save(os.path.join(tmp_path, "functions"))
    model.close()
    with pytest.raises(CheckpointError) as refused:
        ppo_dict.PPO.load(os.path.join(tmp_path, "functions"))
    line = (
        "PPO.load(path, custom_objects={'learning_rate': linear_schedule(...), 'clip_range': lambda progress_remaining: ...})"
    )
    assert f"Pass the schedules your script gave: {line}. If you trust the file" in str(refused.value)
    assert re.search(
        r"'clip_range' \(a pickled [\w.<>]+<lambda>: [\w.<>]+<lambda> is a function of a script's own", str(refused.value)
    )
