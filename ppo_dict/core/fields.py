"""Field metadata of :class:`~ppo_dict.core.config.Config`: how each field reads a value and checks it.

Each field carries its help text, its parser (the command line's ``type``), its ``--help`` group,
and the bounds and choices :meth:`Config.problems` checks; :func:`read_value` reads a value as the
command line reads its text, :func:`field_problem` says what is wrong with a read value.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import field
from typing import Any, Callable, Optional

from ppo_dict.core.parse import parse_bool


def option(
    default: Any,
    help: str,
    parse: Callable[[Any], Any],
    group: str,
    *,
    range: Optional[tuple] = None,
    choices: tuple[str, ...] = (),
    measure: Callable[[Any], float] = lambda v: v,
    none: str = "",
) -> Any:
    """A field: ``range=(lo, hi)`` or ``(lo, hi, lo_open, hi_open)`` bounds ``measure(value)``;
    ``choices`` lists the allowed values; an optional field (default None) is checked when set, and
    ``none`` says what None means for it (``--help`` prints ``(default: None: <none>)``)."""
    metadata = {
        "help": help,
        "parse": parse,
        "group": group,
        "range": range,
        "choices": choices,
        "measure": measure,
        "none": none,
    }
    if isinstance(default, dict):
        return field(default_factory=lambda: dict(default), metadata=metadata)
    return field(default=default, metadata=metadata)


def whole_number(text: Any) -> int:
    """An int written as any number (``1e6``)."""
    return int(float(text))


def read_value(f: dataclasses.Field, value: Any) -> Any:
    """``value`` read by field ``f``'s parser, as the command line reads its text.

    Numbers and other scalars are read from their text (``Config(seed=3.7)`` is refused, as
    ``--seed 3.7`` is); lists, tuples, dicts and functions (a schedule given from Python) go to the parser as they are.
    """
    parse = f.metadata["parse"]
    if isinstance(value, (list, tuple, dict)) or value is None or isinstance(value, str) or callable(value):
        return parse(value)
    if isinstance(value, bool) and not reads_bool(parse):
        raise TypeError(f"expected {getattr(parse, '__name__', 'a value')}, got a boolean")
    return parse(str(value))


def reads_bool(parse: Callable[[Any], Any]) -> bool:
    """Whether a field's parser reads booleans: :func:`parse_bool`, or ``none_or(parse_bool)`` (an optional boolean)."""
    return parse is parse_bool or getattr(parse, "__name__", "") == parse_bool.__name__


#: The largest integer setting: numpy and torch hold counts, sizes and seeds in 64 bits, and beyond it the
#: checks' own arithmetic (bytes, as floats) would overflow.
INT64_MAX = 2**63 - 1


def field_problem(f: dataclasses.Field, value: Any) -> str:
    """What is wrong with ``value`` by ``f``'s ``range`` and ``choices`` (``""`` when nothing is)."""
    if value is None and f.default is None:
        return ""
    choices, bounds = f.metadata["choices"], f.metadata["range"]
    if choices and value not in choices:
        return f"{f.name}={value!r}: must be one of {', '.join(choices)}" + (" or None" if f.default is None else "")
    if bounds is None:
        return ""
    lo, hi, lo_open, hi_open = (*bounds, False, False)[:4]
    measured = f.metadata["measure"](value)
    if isinstance(measured, int) and not -INT64_MAX - 1 <= measured <= INT64_MAX:  # never made a float (it may not fit one)
        lo, hi = max(lo, -INT64_MAX - 1), min(hi, INT64_MAX)
    ok = isinstance(measured, int) or (isinstance(measured, float) and math.isfinite(measured))
    if ok:
        ok = (measured > lo if lo_open else measured >= lo) and (measured < hi if hi_open else measured <= hi)
    if ok:
        return ""
    return f"{f.name}={measured!r}: must be in {'(' if lo_open else '['}{lo}, {hi}{')' if hi_open else ']'}"
