"""The console table is sb3's, character for character; every dump reaches every writer."""

import io

import numpy as np
from stable_baselines3.common.logger import HumanOutputFormat

from ppo_dict.core.logger import Logger, format_table


def test_table_is_sb3s() -> None:
    values = {
        "rollout/ep_rew_mean": -4.25,
        "time/fps": 1234,
        "train/loss": np.float32(0.123456),
        "train/n_updates": 10,
        "time/iterations": 3,
        "train/explained_variance": np.float64(0.123456),
        "a_key_longer_than_thirty_six_characters_in_all": 1.0,
    }
    out = io.StringIO()
    HumanOutputFormat(out).write(values, {k: None for k in values})
    assert format_table(values) + "\n" == out.getvalue()


def test_dumps_reach_writers_and_history() -> None:
    seen = []
    logger = Logger(verbose=0, stream=io.StringIO())
    logger.writers.append(lambda values, step: seen.append((step, values)))
    logger.record("a/x", 1.0)
    logger.dump(step=8)
    logger.dump(step=9)  # nothing recorded since: no empty dump
    assert seen == [(8, {"a/x": 1.0})] and logger.history == [{"a/x": 1.0}]
