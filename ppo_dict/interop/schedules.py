"""Schedules as ppo_dict writes them into sb3 zips: objects whose JSON says what they are.

sb3 pickles a schedule into the zip's ``data`` entry and writes its attributes beside it
(``save_util.data_to_json``). A lambda has none, so a zip holding one could only be read by
unpickling it; ppo_dict writes a constant as sb3's own ``ConstantSchedule`` and ``lin_<x>`` as
:class:`SimpleLinearSchedule` (rl-zoo's class of that name, by value: sb3 and rl-zoo load it
without ppo_dict), which ``ppo_dict.interop.sb3_zip`` rebuilds from their JSON.
"""
from __future__ import annotations

import sys
from typing import Any, Callable, Union


class SimpleLinearSchedule:
    """rl-zoo's ``SimpleLinearSchedule``: ``progress_remaining * initial_value``, its arithmetic and its repr."""

    def __init__(self, initial_value: float):
        self.initial_value = float(initial_value)

    def __call__(self, progress_remaining: float) -> float:
        return progress_remaining * self.initial_value

    def __repr__(self) -> str:
        return f"SimpleLinearSchedule(initial_value={self.initial_value})"


def zip_schedule(value: Union[float, str, Callable[[float], float]]) -> Callable[[float], float]:
    """A config's schedule (a float, ``lin_<x>``, a function) as sb3's constructor takes it and its zip
    describes it: the same values as ``ppo_dict.core.parse.make_schedule``'s (sb3 casts each to float)."""
    if callable(value):
        return value
    if isinstance(value, str):
        import cloudpickle

        cloudpickle.register_pickle_by_value(sys.modules[__name__])  # in the zip, the class travels with it
        return SimpleLinearSchedule(float(value[len("lin_"):]))
    from stable_baselines3.common.utils import ConstantSchedule

    return ConstantSchedule(float(value))


def is_schedule_text(value: Any) -> bool:
    """Whether ``value`` is rl-zoo's ``lin_<x>`` text, as a rebuilt zip schedule gives it."""
    return isinstance(value, str) and value.startswith("lin_")
