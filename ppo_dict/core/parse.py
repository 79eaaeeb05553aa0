"""Value parsers: each turns what a person, a YAML file or a wandb agent writes into a typed value.

Nothing here evaluates code: ``dict(...)`` strings as rl-zoo writes them go through
:func:`safe_literal`, which builds literals from the syntax tree.
"""

from __future__ import annotations

import argparse
import ast
import re
from typing import Any, Callable, Optional, Union

NetArch = Union[list[int], dict[str, list[int]]]


def parse_bool(text: Union[str, bool]) -> bool:
    """``True/False``, ``true/false``, ``1/0``, ``yes/no`` (what a wandb sweep agent sends)."""
    if isinstance(text, bool):
        return text
    lowered = str(text).strip().lower()
    if lowered in ("true", "1", "yes", "y", "on"):
        return True
    if lowered in ("false", "0", "no", "n", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected a boolean (True/False), got {text!r}")


def none_or(parse: Callable[[str], Any]) -> Callable[[str], Any]:
    def parse_optional(text: Any) -> Any:
        if text is None or str(text).strip() in ("None", "none", "null", ""):
            return None
        return parse(text)

    parse_optional.__name__ = getattr(parse, "__name__", "value")
    return parse_optional


def parse_schedule(text: Union[str, float, Callable[[float], float]]) -> Union[float, str, Callable[[float], float]]:
    """A float, rl-zoo's ``lin_<initial>`` linear schedule (kept as its string), or a function of the
    remaining progress (sb3's schedules, given from Python: kept as it is)."""
    if callable(text):
        return text
    if isinstance(text, (int, float)):
        return float(text)
    text = str(text).strip()
    if text.startswith("lin_"):
        try:
            float(text[4:])
        except ValueError:
            raise ValueError(f"a linear schedule is lin_<initial value>, got {text!r}") from None
        return text
    return float(text)


def make_schedule(value: Union[float, str, Callable[[float], float]]) -> Callable[[float], float]:
    """``progress_remaining -> value``: rl-zoo's ``linear_schedule`` for ``lin_<x>``, a function's
    value as a float (sb3's ``FloatSchedule``), else a constant."""
    if callable(value):
        return lambda progress_remaining: float(value(progress_remaining))
    if isinstance(value, str):
        initial = float(value[len("lin_") :])
        return lambda progress_remaining: progress_remaining * initial
    constant = float(value)
    return lambda progress_remaining: constant


#: the longest literal :func:`safe_literal` parses (an rl-zoo ``policy_kwargs`` string is a few hundred characters)
MAX_LITERAL = 10_000


def safe_literal(text: str) -> Any:
    """Evaluate a Python literal that may contain ``dict(k=v)`` calls, as rl-zoo writes them.

    Numbers, strings, lists, tuples, dicts, ``True/False/None`` and ``dict(...)`` with keyword
    arguments; bare names such as ``nn.ReLU`` become their dotted string. Nothing is executed.
    """

    def convert(node: ast.AST) -> Any:
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "dict" and not node.args:
            return {kw.arg: convert(kw.value) for kw in node.keywords}
        if isinstance(node, (ast.List, ast.Tuple)):
            items = [convert(e) for e in node.elts]
            return items if isinstance(node, ast.List) else tuple(items)
        if isinstance(node, ast.Dict):
            return {convert(k): convert(v) for k, v in zip(node.keys, node.values) if k is not None}
        if isinstance(node, (ast.Name, ast.Attribute)) and not isinstance(node.ctx, ast.Store):
            if isinstance(node, ast.Name) and node.id in ("True", "False", "None"):
                return {"True": True, "False": False, "None": None}[node.id]
            return ast.unparse(node)
        return ast.literal_eval(node)  # constants and signed numbers; raises ValueError on anything else

    if len(text) > MAX_LITERAL:  # before the parser: a few hundred KiB nested or chained exhaust its stack and memory
        raise ValueError(f"a literal of {len(text):,} characters; ppo_dict reads at most {MAX_LITERAL:,}: {text[:60]!r}...")
    try:
        return convert(ast.parse(text.strip(), mode="eval").body)
    except SyntaxError as exc:  # a ValueError like every other unreadable value, with the parser's reason
        raise ValueError(f"not a Python literal ({exc.msg}): {text[:200]!r}") from None
    except (RecursionError, MemoryError):  # nested or chained deeper than the parser's stack: still one message
        raise ValueError(f"a literal nested too deep to read: {text[:60]!r}...") from None


def parse_net_arch(text: Union[str, list, dict]) -> NetArch:
    """``64,64``, ``pi=256,256;vf=128,128``, ``[256, 256]`` or ``dict(pi=[..], vf=[..])``.

    Parsed with :func:`safe_literal` (never ``eval``).
    """
    if isinstance(text, (list, dict)):
        return _check_net_arch(text)
    text = str(text).strip()
    if text.startswith(("[", "{", "dict(")):
        value = safe_literal(text)
        # sb3 < 1.8 wrote [dict(pi=..., vf=...)]; sb3 unwraps it the same way.
        if isinstance(value, list) and len(value) == 1 and isinstance(value[0], dict):
            value = value[0]
        return _check_net_arch(value)
    if "=" in text:
        arch: dict[str, list[int]] = {}
        for n, part in enumerate(text.split(";"), 1):
            key, _, sizes = part.partition("=")
            key = key.strip()
            if key in arch:
                raise ValueError(f"part {n} gives {key}= again")
            arch[key] = layer_sizes(sizes, f" of {key}= (part {n})")
        return _check_net_arch(arch)
    return _check_net_arch(layer_sizes(text))


def layer_sizes(text: str, where: str = "") -> list[int]:
    """``64,64`` as ``[64, 64]``; an empty item (``64,,64``, a trailing comma) or a non-integer is
    refused naming its position, since a typo there would silently change the network; nothing at
    all (``pi=;vf=64``) is no layers."""
    if not text.strip():
        return []
    sizes = []
    for i, item in enumerate(text.split(","), 1):
        item = item.strip()
        if not item:
            raise ValueError(f"item {i}{where} is empty (write sizes as 64,64)")
        try:
            sizes.append(int(item))
        except ValueError:
            raise ValueError(f"item {i}{where} is not an integer: {item!r}") from None
    return sizes


def _check_net_arch(value: Any) -> NetArch:
    if isinstance(value, list) and all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in value):
        return list(value)
    if isinstance(value, dict) and set(value) <= {"pi", "vf"} and all(isinstance(v, (list, tuple)) for v in value.values()):
        return {k: _check_net_arch(list(v)) for k, v in value.items()}  # type: ignore[misc]
    raise ValueError(f"net_arch must be a list of positive ints or dict(pi=[..], vf=[..]), got {value!r}")


def parse_words(text: Union[None, str, list, tuple]) -> Optional[tuple[str, ...]]:
    """Words as typed, each kept whole (a path, ``key:value`` with commas and spaces in its value): one
    string is one word; None (or only ``None`` and empty words) is None."""
    words = [] if text is None else [str(word) for word in text] if isinstance(text, (list, tuple)) else [str(text)]
    return tuple(word for word in words if word.strip() not in ("", "None", "none", "null")) or None


def parse_packages(text: Union[str, list, tuple]) -> tuple[str, ...]:
    """Names separated by commas or spaces, in one string or several (``a,b`` and ``a b`` alike)."""
    if isinstance(text, (list, tuple)):
        return tuple(name for item in text for name in parse_packages(str(item)))
    return tuple(p for p in str(text).replace(",", " ").split() if p)


#: the keys of sb3-contrib's ``lstm_kwargs`` ppo_dict takes: nn.LSTM's arguments that keep the states' shapes
LSTM_KWARGS = ("dropout", "bias")


def parse_lstm_kwargs(text: Union[str, dict, None]) -> dict[str, Any]:
    """sb3-contrib's ``lstm_kwargs`` (None: none), of :data:`LSTM_KWARGS` only: the LSTM states ppo_dict carries are
    sb3-contrib's ``[n_lstm_layers, n_envs, lstm_hidden_size]``, which the others change or do not keep."""
    value = {} if text is None else parse_kwargs(text)
    if set(value) - set(LSTM_KWARGS):
        raise ValueError(
            f"ppo_dict takes {' and '.join(LSTM_KWARGS)} (its LSTM states are sb3-contrib's [n_lstm_layers, "
            f"n_envs, lstm_hidden_size], which the others change or do not keep)"
        )
    dropout, bias = value.get("dropout", 0.0), value.get("bias", True)
    if (
        isinstance(dropout, bool)
        or not isinstance(dropout, (int, float))
        or not 0 <= dropout <= 1
        or not isinstance(bias, bool)
    ):
        raise ValueError("dropout is a probability in [0, 1], bias True or False (nn.LSTM's)")
    return value


#: rl-zoo's ``key:value`` words (its ``StoreDict``: ``--env-kwargs``, ``--hyperparams``): an identifier, a colon, the
#: value's text
KEY_VALUE = re.compile(r"([A-Za-z_]\w*):(.*)", re.S)


def literal_or_text(text: str) -> Any:
    """A ``key:value`` word's value as rl-zoo reads it (it ``eval``s the text; here a literal, never code), else
    the text itself (``lin_0.001``, ``MlpPolicy``), for the reader of that value to judge."""
    try:
        return safe_literal(text)
    except (ValueError, SyntaxError, TypeError, RecursionError, MemoryError):
        return text


def key_values(words: list[str]) -> dict[str, Any]:
    """rl-zoo's ``key:value`` words as a dict (each value :func:`literal_or_text`)."""
    return {m.group(1): literal_or_text(m.group(2)) for m in map(KEY_VALUE.fullmatch, words) if m}


def parse_kwargs(text: Union[str, dict, list, tuple]) -> dict[str, Any]:
    """``dict(image_size=64, continuous=True)`` or ``{'image_size': 64}`` (parsed safely), or rl-zoo's
    ``--env-kwargs`` words ``image_size:64 continuous:True`` (a list of words, each ``key:value``)."""
    if isinstance(text, (list, tuple)):
        words = [str(word) for word in text]
        if words and all(KEY_VALUE.fullmatch(word) for word in words):
            return key_values(words)
        text = " ".join(words)  # dict(a=1, b=2) typed without quotes arrives as two words
    value = text if isinstance(text, dict) else safe_literal(str(text)) if str(text).strip() else {}
    if not isinstance(value, dict):
        raise ValueError(f"expected dict(...) of keyword arguments, got {text!r}")
    names = [key for key in value if not (isinstance(key, str) and key.isidentifier())]
    if names:
        raise ValueError(f"keyword argument names must be identifiers, got {', '.join(map(repr, names))}")
    return value
