"""Plain data, what an env's state (``envs.state``) is taken as: numbers, strings, bytes, numpy arrays and scalars,
numpy's and ``random``'s generators as their states, ``collections.deque`` as its items and ``maxlen``, and tuples,
lists and dicts of them, to a bounded depth. Anything else is :class:`StateNotRestorable`, naming where it is.
"""

from __future__ import annotations

import collections
import random
from typing import Any

import numpy as np

#: plain data may nest this deep (a config of dicts in lists): deeper is not an env's state
MAX_DEPTH = 12


class StateNotRestorable(Exception):
    """This env's state cannot be taken (or put back) as plain data; the message says which attribute and why."""


def qualname(obj: Any) -> str:
    cls = type(obj)
    return f"{cls.__module__}.{cls.__qualname__}"


_SCALARS = frozenset({bool, int, float, str, bytes})


def plain(value: Any, where: str, depth: int = 0) -> Any:
    """``value`` as plain data (copied), or :class:`StateNotRestorable` naming ``where``."""
    if depth > MAX_DEPTH:
        raise StateNotRestorable(f"{where}: nested deeper than {MAX_DEPTH}")
    if value is None or type(value) in _SCALARS:
        return value
    if isinstance(value, (bool, int, float, str, bytes)):
        return value
    if isinstance(value, np.ndarray):
        if value.dtype.hasobject or value.dtype.fields is not None:
            raise StateNotRestorable(f"{where}: a numpy array of {value.dtype}")
        return value.copy()
    if isinstance(value, np.generic):
        return value.copy()
    if isinstance(value, np.random.Generator):
        return {"__generator__": plain(value.bit_generator.state, where, depth + 1)}
    if isinstance(value, np.random.RandomState):
        return {"__random_state__": plain(value.get_state(legacy=False), where, depth + 1)}
    if isinstance(value, random.Random):
        return {"__random__": plain(value.getstate(), where, depth + 1)}
    if isinstance(value, collections.deque):
        return {"__deque__": [plain(v, f"{where}[{i}]", depth + 1) for i, v in enumerate(value)], "maxlen": value.maxlen}
    if isinstance(value, (tuple, list)):
        items = [plain(v, f"{where}[{i}]", depth + 1) for i, v in enumerate(value)]
        return tuple(items) if isinstance(value, tuple) else items
    if isinstance(value, dict):
        if not all(isinstance(k, (str, int)) for k in value):
            raise StateNotRestorable(f"{where}: a dict with keys other than strings and integers")
        if any(isinstance(k, str) and k.startswith("__") and k.endswith("__") for k in value):
            raise StateNotRestorable(f"{where}: a dict with a key of the form __name__")
        return {k: plain(v, f"{where}[{k!r}]", depth + 1) for k, v in value.items()}
    raise StateNotRestorable(f"{where} is a {qualname(value)}, not plain data")
