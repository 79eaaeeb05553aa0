"""A gymnasium space rebuilt from the JSON sb3 writes beside its pickle, never unpickled.

sb3's ``data_to_json`` lists a space's first-level attributes (``dtype``, ``_shape``, ``low``, ``n``, ``nvec``,
``spaces``...) as themselves where JSON holds them, else as their str: a Box's bounds as numpy printed them (8
decimals; an array numpy summarised with ``...`` is not rebuilt), a Dict's spaces as gymnasium's repr of each.
``ppo_dict.interop.sb3_zip`` reads the rest of the zip.
"""

from __future__ import annotations

import ast
import math
import re
from typing import Any

import numpy as np
from gymnasium import spaces

#: the most values a rebuilt Box's bounds may hold (a 1000 x 1000 x 3 image has 3e6): a file's shape is not allocated blindly
MAX_BOX_VALUES = 10**7  # sb3 < 2 saved gym's spaces, which sb3 >= 2 converts


class NotRebuildable(ValueError):
    """The JSON beside a pickled value does not describe it well enough to rebuild it."""


def parse_array(text: Any, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """An array of ``shape`` from numpy's printed form (``"[-4.8 -inf 0.4188]"``, or one value for all)."""
    text = str(text)
    if math.prod(shape) > MAX_BOX_VALUES:
        raise NotRebuildable(f"a Box of shape {shape} is over {MAX_BOX_VALUES:.0e} values")
    if "..." in text:
        raise NotRebuildable("numpy printed its bounds summarised ('...')")
    if dtype.kind == "b":
        values = np.array([t == "True" for t in re.findall(r"True|False", text)], dtype)
    else:
        tokens = re.findall(r"[-+]?(?:inf|nan|\d+\.?\d*(?:e[-+]?\d+)?|\.\d+(?:e[-+]?\d+)?)", text)
        values = np.array([int(t) for t in tokens] if dtype.kind in "iu" else [float(t) for t in tokens]).astype(dtype)
    if values.size == 1:
        return np.full(shape, values.reshape(()), dtype)
    if values.size != math.prod(shape):
        raise NotRebuildable(f"{values.size} values printed for the shape {shape}")
    return values.reshape(shape)


def numeric_dtype(name: Any) -> np.dtype:
    dtype = np.dtype(str(name))
    if dtype.kind not in "biuf":
        raise NotRebuildable(f"dtype {name!r} is not a number type")
    return dtype


def space_from_attrs(kind: str, attrs: dict[str, Any]) -> spaces.Space:
    """A space from the attributes sb3's JSON lists (``dtype``, ``_shape``, ``low``, ``n``, ``nvec``, ``spaces``...)."""
    if kind == "Box":
        dtype, shape = numeric_dtype(attrs["dtype"]), tuple(int(n) for n in attrs["_shape"])
        return spaces.Box(parse_array(attrs["low"], shape, dtype), parse_array(attrs["high"], shape, dtype), shape, dtype)
    if kind == "Discrete":
        return spaces.Discrete(int(attrs["n"]), start=int(attrs.get("start", 0)))
    if kind == "MultiDiscrete":
        nvec = [int(t) for t in re.findall(r"-?\d+", str(attrs["nvec"]))]
        shape = tuple(int(n) for n in attrs.get("_shape", [len(nvec)]))
        start = parse_array(attrs.get("start", "0"), shape, np.dtype(np.int64))
        return spaces.MultiDiscrete(np.array(nvec, np.int64).reshape(shape), start=start)
    if kind == "MultiBinary":
        n = [int(t) for t in re.findall(r"\d+", str(attrs["n"]))]
        return spaces.MultiBinary(n[0] if len(n) == 1 else n)
    if kind == "Dict":
        return spaces.Dict(dict_from_repr(str(attrs["spaces"])))
    raise NotRebuildable(f"a {kind} space is not rebuilt (Box, Discrete, MultiDiscrete, MultiBinary, Dict are)")


def split_top(text: str) -> list[str]:
    """``text`` split at the commas outside brackets and parentheses."""
    parts, depth, start = [], 0, 0
    for i, char in enumerate(text):
        depth += (char in "([{") - (char in ")]}")
        if char == "," and depth == 0:
            parts.append(text[start:i].strip())
            start = i + 1
    return parts + [text[start:].strip()] if text.strip() else parts


def space_from_repr(text: str) -> spaces.Space:
    """A space from gymnasium's repr (``Box(0, 255, (1, 64, 64), uint8)``, ``Discrete(4, start=1)``...), as a
    Dict's JSON lists its spaces."""
    match = re.fullmatch(r"(\w+)\((.*)\)", text.strip(), re.S)
    if match is None:
        raise NotRebuildable(f"{text[:80]!r} is not a space's repr")
    kind, args = match.group(1), split_top(match.group(2))
    keywords = {a.partition("=")[0]: a.partition("=")[2] for a in args if re.match(r"\w+=", a)}
    args = [a for a in args if not re.match(r"\w+=", a)]
    if kind == "Box" and len(args) == 4:
        shape = tuple(ast.literal_eval(args[2]))
        return space_from_attrs("Box", {"dtype": args[3], "_shape": shape, "low": args[0], "high": args[1]})
    if kind == "Discrete" and len(args) == 1:
        return spaces.Discrete(int(args[0]), start=int(keywords.get("start", 0)))
    if kind == "MultiDiscrete" and len(args) == 1:
        nvec = [int(t) for t in re.findall(r"-?\d+", args[0])]
        return space_from_attrs("MultiDiscrete", {"nvec": args[0], "_shape": [len(nvec)], "start": keywords.get("start", "0")})
    if kind == "MultiBinary" and len(args) == 1:
        return space_from_attrs("MultiBinary", {"n": args[0]})
    raise NotRebuildable(
        f"{text[:80]!r}: a {kind} space inside a Dict is not rebuilt (Box, Discrete, MultiDiscrete, MultiBinary are)"
    )


def dict_from_repr(text: str) -> dict[str, spaces.Space]:
    """``{key: space}`` from the text of a Dict space's ``spaces`` (``"{'img': Box(...), 'vec': Box(...)}"``)."""
    text = text.strip()
    if not (text.startswith("{") and text.endswith("}")):
        raise NotRebuildable("its spaces are not listed as a dict")
    found = {}
    for item in split_top(text[1:-1]):
        match = re.fullmatch(r"""('(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")\s*:\s*(.*)""", item, re.S)
        if match is None:
            raise NotRebuildable(f"{item[:80]!r} is not a key and its space")
        found[ast.literal_eval(match.group(1))] = space_from_repr(match.group(2))
    return found
