"""Plain data (``envs.plain``, an env's state) as a checkpoint stores it and reads it back.

``torch.load(weights_only=True)`` reads numbers, strings, tuples, lists, dicts and tensors, but neither numpy's pickles
nor an empty ``bytes``; so :func:`to_saved` puts the bytes of every array, numpy scalar and bytes value in one uint8
array, and :func:`from_saved` reads them back, checking each as it goes (dtypes of numbers only, sizes that agree, bytes
inside the saved ones, a bounded depth): what no run wrote is :class:`~envs.plain.StateNotRestorable`.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .plain import MAX_DEPTH, StateNotRestorable

#: the largest array a saved state may hold (elements): a stride trick or a forged shape is refused before any allocation
MAX_ELEMENTS = 1 << 28


def to_saved(value: Any) -> tuple[Any, np.ndarray]:
    """Plain data as ``torch.load(weights_only=True)`` reads it back without numpy's pickles: ``(tree, blob)``, the
    bytes of every array, numpy scalar and bytes value in one uint8 array ``blob`` (one tensor in a checkpoint, however
    many arrays), and in the tree where each lies (``{"__ndarray__": offset, "nbytes": n, "dtype": "<f8", "shape":
    [...]}``)."""
    parts: list[bytes] = []
    size = [0]

    def put(data: bytes) -> int:
        start = size[0]
        parts.append(data)
        size[0] += len(data)
        return start

    def walk(v: Any) -> Any:
        if isinstance(v, np.ndarray):
            data = np.ascontiguousarray(v).tobytes()
            return {"__ndarray__": put(data), "nbytes": len(data), "dtype": v.dtype.str, "shape": list(v.shape)}
        if isinstance(v, np.generic):
            data = v.tobytes()
            return {"__npscalar__": put(data), "nbytes": len(data), "dtype": v.dtype.str}
        if isinstance(v, (bytes, bytearray)):
            return {"__bytes__": put(bytes(v)), "nbytes": len(v)}
        if isinstance(v, dict):
            return {k: walk(x) for k, x in v.items()}
        if isinstance(v, (list, tuple)):
            items = [walk(x) for x in v]
            return tuple(items) if isinstance(v, tuple) else items
        return v

    tree = walk(value)
    return tree, np.frombuffer(bytearray(b"".join(parts)), dtype=np.uint8)


def _span(value: dict[str, Any], key: str, blob: np.ndarray, where: str) -> np.ndarray:
    start, nbytes = value.get(key), value.get("nbytes")
    if not all(type(n) is int and 0 <= n <= len(blob) for n in (start, nbytes)) or start + nbytes > len(blob):
        raise StateNotRestorable(f"{where}: bytes {str(start)[:20]}+{str(nbytes)[:20]} outside the saved {len(blob)}")
    return blob[start : start + nbytes]


def _saved_array(value: dict[str, Any], key: str, blob: np.ndarray, where: str) -> np.ndarray:
    dtype, shape = value.get("dtype"), value.get("shape", [])
    try:
        dt = np.dtype(dtype) if isinstance(dtype, str) and len(dtype) <= 8 else None
    except TypeError:
        dt = None
    if dt is None or dt.hasobject or dt.fields is not None or dt.subdtype is not None or dt.itemsize == 0:
        raise StateNotRestorable(f"{where}: an array of dtype {str(dtype)[:20]!r}")
    if not (isinstance(shape, (list, tuple)) and len(shape) <= 32 and all(type(n) is int and n >= 0 for n in shape)):
        raise StateNotRestorable(f"{where}: an array of shape {str(shape)[:40]}")
    count = math.prod(shape)
    data = _span(value, key, blob, where)
    if count > MAX_ELEMENTS or len(data) != count * dt.itemsize:
        raise StateNotRestorable(f"{where}: {len(data)} bytes for an array of {dt}{tuple(shape)}")
    return data.view(dt).reshape(shape).copy()


def from_saved(tree: Any, blob: np.ndarray, where: str = "state", depth: int = 0) -> Any:
    """:func:`to_saved`'s value back as plain data, checked as it is read (depth, dtypes, sizes, bytes inside ``blob``):
    a value no env wrote is :class:`StateNotRestorable`."""
    if depth > 2 * MAX_DEPTH:
        raise StateNotRestorable(f"{where}: nested deeper than {2 * MAX_DEPTH}")
    if tree is None or isinstance(tree, (bool, int, float, str)):
        return tree
    if isinstance(tree, dict):
        if "__ndarray__" in tree:
            return _saved_array(tree, "__ndarray__", blob, where)
        if "__npscalar__" in tree:
            return _saved_array({**tree, "shape": []}, "__npscalar__", blob, where)[()]
        if "__bytes__" in tree:
            return _span(tree, "__bytes__", blob, where).tobytes()
        if not all(isinstance(k, (str, int)) for k in tree):
            raise StateNotRestorable(f"{where}: a dict with keys other than strings and integers")
        return {k: from_saved(v, blob, f"{where}[{k!r}]", depth + 1) for k, v in tree.items()}
    if isinstance(tree, (list, tuple)):
        items = [from_saved(v, blob, f"{where}[{i}]", depth + 1) for i, v in enumerate(tree)]
        return tuple(items) if isinstance(tree, tuple) else items
    raise StateNotRestorable(f"{where}: a {type(tree).__name__}, not plain data")
