"""Schedules in sb3 zips: objects whose JSON says what they are, written and read back without a pickle.

sb3 pickles a schedule into the zip's ``data`` entry and writes its attributes beside it
(``save_util.data_to_json``). A lambda has none, so a zip holding one could only be read by
unpickling it; ppo_dict writes a constant as sb3's own ``ConstantSchedule`` and ``lin_<x>`` as
:class:`SimpleLinearSchedule` (rl-zoo's class of that name, by value: sb3 and rl-zoo load it
without ppo_dict), and ``ppo_dict.interop.sb3_zip`` rebuilds those, rl-zoo's own and sb3's
``LinearSchedule`` from their JSON (:data:`SCHEDULES`). A function of the script's is named by the
JSON of the ``FloatSchedule`` around it (:class:`ScheduleFunction`), so that a refusal can show the
``custom_objects`` line that passes it again (:func:`custom_objects_line`).
"""

from __future__ import annotations

import ast
import math
import re
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
        return SimpleLinearSchedule(float(value[len("lin_") :]))
    from stable_baselines3.common.utils import ConstantSchedule

    return ConstantSchedule(float(value))


def is_schedule_text(value: Any) -> bool:
    """Whether ``value`` is rl-zoo's ``lin_<x>`` text, as a rebuilt zip schedule gives it."""
    return isinstance(value, str) and value.startswith("lin_")


# ---------------------------------------------------------------------------------------------- read from a zip's JSON
class ScheduleFunction(ValueError):
    """A schedule that is a function of the script's (``function``: its qualified name, as its repr gives it)."""

    def __init__(self, function: str):
        super().__init__(f"{function} is a function of a script's own, which no JSON describes")
        self.function = function


def _schedule_text(text: Any) -> Any:
    """A schedule's value from its repr: ``ConstantSchedule(val=x)`` -> x, ``SimpleLinearSchedule(initial_value=x)``
    -> ``lin_x``, sb3's ``LinearSchedule(start=a, end=b, end_fraction=c)`` -> that schedule, ``FloatSchedule(...)`` -> its
    inner one's; a function's (``<function name at 0x...>``) is a :class:`ScheduleFunction` naming it."""
    text = str(text).strip()
    for pattern, value in (
        (r"FloatSchedule\((.*)\)", _schedule_text),
        (r"ConstantSchedule\(val=([^()]*)\)", float),
        (r"SimpleLinearSchedule\(initial_value=([^()]*)\)", lambda x: f"lin_{float(x)!r}"),
        (r"LinearSchedule\((start=[^()]*)\)", linear_schedule_repr),
    ):
        match = re.fullmatch(pattern, text)
        if match:
            return value(match.group(1))
    function = re.fullmatch(r"<function ([\w.<>]+) at 0x[0-9a-fA-F]+>", text)
    if function:
        raise ScheduleFunction(function.group(1))
    raise ValueError(f"the schedule {text[:80]!r} is not a constant, sb3's LinearSchedule or rl-zoo's linear schedule")


def linear_schedule_repr(arguments: str) -> Any:
    """sb3's ``LinearSchedule`` of its repr's ``start=a, end=b, end_fraction=c``."""
    values = dict(part.strip().partition("=")[::2] for part in arguments.split(","))
    return linear_schedule({key: ast.literal_eval(value) for key, value in values.items()})


def linear_schedule(attrs: dict[str, Any]) -> Any:
    """sb3's ``LinearSchedule`` of its JSON's numbers (sb3's class, built from plain numbers: nothing unpickled)."""
    from stable_baselines3.common.utils import LinearSchedule

    numbers = [attrs[key] for key in ("start", "end", "end_fraction")]
    if not all(isinstance(n, (int, float)) and not isinstance(n, bool) and math.isfinite(n) for n in numbers):
        raise ValueError(f"LinearSchedule{tuple(numbers)!r}: not three finite numbers")
    return LinearSchedule(*numbers)


SCHEDULES = {
    "stable_baselines3.common.utils.FloatSchedule": lambda a: _schedule_text(a["value_schedule"]),
    "stable_baselines3.common.utils.ConstantSchedule": lambda a: float(a["val"]),
    "stable_baselines3.common.utils.LinearSchedule": linear_schedule,
    "rl_zoo3.utils.SimpleLinearSchedule": lambda a: f"lin_{float(a['initial_value'])!r}",
    "ppo_dict.interop.schedules.SimpleLinearSchedule": lambda a: f"lin_{float(a['initial_value'])!r}",  # what ppo_dict writes
}


def script_call(function: str) -> str:
    """How a script writes the schedule function named ``function`` (a qualified name): a factory's closure
    (``linear_schedule.<locals>.func``, sb3's documentation's form) as the factory's call, a lambda as one."""
    if function.endswith("<lambda>") or not function:
        return "lambda progress_remaining: ..."
    return f"{function.split('.<locals>.')[0].rpartition('.')[2]}(...)" if "<locals>" in function else function


def custom_objects_line(algorithm: str, functions: dict[str, str]) -> str:
    """``<algorithm>.load(path, custom_objects={...})`` giving each key of ``functions`` (key -> the function's name,
    "" when unknown) as the script made it, ``...`` where only the script knows its arguments."""
    items = ", ".join(f"{key!r}: {script_call(function)}" for key, function in functions.items())
    return f"{algorithm}.load(path, custom_objects={{{items}}})"
