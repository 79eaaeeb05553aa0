"""Pickles of plain data, read without running anything a file names: numbers, strings, bounded containers,
numeric arrays.

sb3 and rl-zoo pickle what ppo_dict reads from them (a ``VecNormalize``, an sb3 zip's episode buffers), and a
pickle calls whatever its names give, with whatever arguments it holds: a ``numpy.dtype`` given structured
fields at offsets past its item size reads outside an array's memory, and a container constructor given
``range(10**18)`` never returns. So the file is read by Python's own unpickler in its pure-Python form
(``pickle._Unpickler``: every opcode is a method this class can check), with each opcode that calls,
builds, hashes or allocates checked:

* **names** (``GLOBAL``, ``STACK_GLOBAL``, extension codes) only from :data:`NAMES`, each bound to a
  constructor of this module that checks its arguments, not to the library's own; a subclass may add
  record classes (:meth:`PlainUnpickler.other`); any other name is refused, naming it;
* **calls** (``REDUCE``, ``NEWOBJ``, ``NEWOBJ_EX``, ``INST``, ``OBJ``) only of those constructors and records;
* **state** (``BUILD``) only on this module's placeholders and records;
* **hashing** (dict keys, set members) of strings only: hashing then costs what the bytes hold (a tuple
  nested through shared references hashes in exponential time, integers can be made to collide);
* **appends and items** only on lists, deques and dicts; ``BYTEARRAY8`` no longer than the pickle.

A numpy array or dtype is a placeholder while the pickle is read (a pickle may give an object its state
after the object was used); :meth:`PlainUnpickler.load` then replaces each by the value its state
describes, checked: plain numeric dtypes (bool, integers, floats, complex: no fields, no subarray, no
objects) and a shape of non-negative integers whose size times the item size is the bytes present.
A structure that contains itself is refused. Every refusal is a ``pickle.UnpicklingError``.
"""

from __future__ import annotations

import _compat_pickle
import collections
import io
import math
import pickle
import re
from typing import Any, Callable, Optional

import numpy as np

#: numpy's modules that pickles name (numpy 1 and numpy 2 spell them differently)
MULTIARRAY, NUMERIC = ("numpy.core.multiarray", "numpy._core.multiarray"), ("numpy.core.numeric", "numpy._core.numeric")
#: the dtypes an array may have: booleans, integers, floats, complex numbers, given as numpy's type code
PLAIN_DTYPE = re.compile(r"[biufc]\d{1,2}")
#: the most dimensions an array may have (numpy's own limit is 64)
MAX_DIMENSIONS = 32


class Record:
    """A pickled object's state as attributes; none of its class's code runs (a subclass names what it stands for)."""

    def __setstate__(self, state: Any) -> None:
        parts = state if isinstance(state, tuple) else (state,)  # (dict, slots), as pickle writes an object with __slots__
        for part in parts:
            if isinstance(part, dict):
                self.__dict__.update({k: v for k, v in part.items() if isinstance(k, str)})


class Ignored(Record):
    """A value read past: what a pickle builds for it (whatever its arguments and state) is dropped."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __setstate__(self, state: Any) -> None:
        pass


class DtypeSpec:
    """``numpy.dtype(code, align, copy)`` as a pickle builds it: the type code, then (``BUILD``) its byte order."""

    def __init__(self, code: Any, align: Any = False, copy: Any = False) -> None:
        if not (isinstance(code, str) and PLAIN_DTYPE.fullmatch(code)):
            raise pickle.UnpicklingError(
                f"a dtype {str(code)[:40]!r}: not a plain number type (bool, integers, floats, complex)"
            )
        try:
            self.dtype = np.dtype(code)
        except TypeError as exc:
            raise pickle.UnpicklingError(f"a dtype {code!r}: {exc}") from None

    def __setstate__(self, state: Any) -> None:
        # numpy's state: (version, byte order, subarray, names, fields, item size, alignment, flags[, metadata])
        if not (isinstance(state, tuple) and len(state) in (8, 9) and state[0] in (3, 4)):
            raise pickle.UnpicklingError("a dtype's state is not numpy's")
        _, order, subarray, names, fields, size, alignment, flags = state[:8]
        if subarray is not None or names is not None or fields is not None or flags != 0:
            raise pickle.UnpicklingError(f"a dtype with fields, a subarray or flags ({self.dtype}): not a plain number type")
        if size not in (-1, self.dtype.itemsize) or alignment not in (-1, self.dtype.alignment):
            raise pickle.UnpicklingError(f"a dtype {self.dtype} of item size {size}: not its own")
        if order not in ("<", ">", "|", "="):
            raise pickle.UnpicklingError(f"a dtype's byte order {str(order)[:8]!r}")
        if order in "<>" and self.dtype.itemsize > 1:
            self.dtype = self.dtype.newbyteorder(order)


def plain_dtype(value: Any) -> np.dtype:
    if not isinstance(value, DtypeSpec):
        raise pickle.UnpicklingError(f"an array's dtype is a {type(value).__name__}, not a numpy dtype")
    return value.dtype


def checked_array(data: Any, dtype: Any, shape: Any, order: str = "C") -> np.ndarray:
    """A copy of the array ``data`` (bytes) holds, its ``shape`` and size checked against the bytes present."""
    dtype = plain_dtype(dtype)
    if not (isinstance(shape, tuple) and len(shape) <= MAX_DIMENSIONS and all(type(n) is int and n >= 0 for n in shape)):
        raise pickle.UnpicklingError(f"an array's shape {str(shape)[:60]}: not non-negative integers")
    if isinstance(data, pickle.PickleBuffer):
        data = bytes(data.raw())
    if not isinstance(data, (bytes, bytearray)):
        raise pickle.UnpicklingError(f"an array's data is a {type(data).__name__}, not bytes (an array of objects?)")
    if math.prod(shape) * dtype.itemsize != len(data):
        raise pickle.UnpicklingError(
            f"an array of shape {shape} and dtype {dtype} needs {math.prod(shape) * dtype.itemsize} "
            f"bytes; the pickle holds {len(data)}"
        )
    if order not in ("C", "F"):
        raise pickle.UnpicklingError(f"an array's order {str(order)[:8]!r}")
    return np.frombuffer(data, dtype).reshape(shape, order=order).copy()


class ArraySpec:
    """``numpy.core.multiarray._reconstruct(ndarray, ...)``: an array, once (``BUILD``) its state is given."""

    value: Optional[np.ndarray] = None

    def __setstate__(self, state: Any) -> None:
        # numpy's state: ([version,] shape, dtype, is_fortran, data)
        if not (isinstance(state, tuple) and len(state) in (4, 5)):
            raise pickle.UnpicklingError("an array's state is not numpy's")
        shape, dtype, fortran, data = state[-4:]
        self.value = checked_array(data, dtype, shape, "F" if fortran else "C")


class NDArrayName:
    """What the name ``numpy.ndarray`` stands for: the class ``_reconstruct`` is given, nothing else."""


def reconstruct(cls: Any, shape: Any = (0,), code: Any = b"b") -> ArraySpec:
    if not isinstance(cls, NDArrayName):
        raise pickle.UnpicklingError(f"_reconstruct of a {type(cls).__name__}, not of numpy.ndarray")
    return ArraySpec()


def scalar(dtype: Any, data: Any = None) -> Any:
    """numpy's scalar of a plain dtype from its bytes."""
    return checked_array(data, dtype, ())[()]


def frombuffer(data: Any, dtype: Any, shape: Any, order: Any = "C") -> np.ndarray:
    """numpy 2's ``_frombuffer``: an array from bytes (pickle protocol 5)."""
    return checked_array(data, dtype, shape, order)


def literal(items: Any, what: str) -> list:
    """``items`` as a list when it is a list or tuple (contents the pickle holds), never a lazily evaluated iterable."""
    if not isinstance(items, (list, tuple)):
        raise pickle.UnpicklingError(f"{what} of a {type(items).__name__}: only a list or tuple the pickle holds")
    return list(items)


def strings(items: Any, what: str) -> list[str]:
    found = literal(items, what)
    if not all(type(item) is str for item in found):
        raise pickle.UnpicklingError(f"{what} of members that are not strings")
    return found


def make_deque(items: Any = (), maxlen: Any = None) -> collections.deque:
    if maxlen is not None and not (type(maxlen) is int and 0 <= maxlen <= 2**31):
        raise pickle.UnpicklingError(f"a deque's maxlen {str(maxlen)[:40]}")
    return collections.deque(literal(items, "a deque"), maxlen)


def make_ordered_dict(items: Any = ()) -> collections.OrderedDict:
    pairs = literal(items, "an OrderedDict")
    if not all(isinstance(p, tuple) and len(p) == 2 and type(p[0]) is str for p in pairs):
        raise pickle.UnpicklingError("an OrderedDict of items that are not (string, value) pairs")
    return collections.OrderedDict(pairs)


def make_complex(real: Any = 0.0, imag: Any = 0.0) -> complex:
    if not all(type(x) in (int, float) for x in (real, imag)):
        raise pickle.UnpicklingError("a complex number of parts that are not numbers")
    return complex(float(real), float(imag))


def make_bytes(data: Any = b"", kind: type = bytes) -> Any:
    """``bytes(data)`` or ``bytearray(data)`` of bytes only (not ``bytes(10**12)``, a terabyte of zeros)."""
    if not isinstance(data, (bytes, bytearray)):
        raise pickle.UnpicklingError(f"{kind.__name__} of a {type(data).__name__}, not of bytes")
    return kind(data)


def latin1_bytes(text: Any, encoding: Any = "latin1") -> bytes:
    """``_codecs.encode(text, "latin1")``: how pickle protocol 2 writes bytes."""
    if type(text) is not str or encoding not in ("latin1", "latin-1"):
        raise pickle.UnpicklingError("_codecs.encode of other than text to latin1 bytes")
    return text.encode("latin1")


NDARRAY = NDArrayName()
#: every name a pickle of plain data may hold, and what it stands for
NAMES: dict[tuple[str, str], Any] = {
    ("numpy", "ndarray"): NDARRAY,
    ("numpy", "dtype"): DtypeSpec,
    **{(module, "_reconstruct"): reconstruct for module in MULTIARRAY},
    **{(module, "scalar"): scalar for module in MULTIARRAY},
    **{(module, "_frombuffer"): frombuffer for module in NUMERIC},
    ("collections", "deque"): make_deque,
    ("collections", "OrderedDict"): make_ordered_dict,
    ("builtins", "set"): lambda items=(): set(strings(items, "a set")),
    ("builtins", "frozenset"): lambda items=(): frozenset(strings(items, "a frozenset")),
    ("builtins", "complex"): make_complex,
    ("builtins", "bytearray"): lambda data=b"": make_bytes(data, bytearray),
    ("builtins", "bytes"): make_bytes,
    ("_codecs", "encode"): latin1_bytes,
}
#: what a pickle may call: the constructors above (records are checked apart)
CONSTRUCTORS = tuple(value for value in NAMES.values() if callable(value))


class PlainUnpickler(pickle._Unpickler):  # type: ignore[name-defined]  (the pure-Python unpickler: see the module doc)
    """Plain data from a pickle (the module doc says what is checked); ``data``: the whole pickle."""

    dispatch = dict(pickle._Unpickler.dispatch)  # type: ignore[attr-defined]

    def __init__(self, data: bytes) -> None:
        super().__init__(io.BytesIO(data))
        self.size = len(data)

    def find_class(self, module: str, name: str) -> Any:
        if self.proto < 3:  # Python 2's names, as pickle's own find_class maps them (protocol 2 writes __builtin__.set)
            module, name = _compat_pickle.NAME_MAPPING.get(
                (module, name), (_compat_pickle.IMPORT_MAPPING.get(module, module), name)
            )
        if (module, name) in NAMES:
            return NAMES[(module, name)]
        return self.other(module, name)

    def other(self, module: str, name: str) -> Any:
        """What a name besides :data:`NAMES` stands for (a subclass returns its :class:`Record` classes); else refused."""
        raise pickle.UnpicklingError(f"the pickle names {module}.{name}")

    def persistent_load(self, pid: Any) -> Any:
        raise pickle.UnpicklingError("the pickle refers to an object outside it (a persistent id)")

    def call(self, func: Any, args: Any, kwargs: Any = None) -> Any:
        record = isinstance(func, type) and issubclass(func, Record)
        if not (record or any(func is c for c in CONSTRUCTORS)):
            raise pickle.UnpicklingError(f"the pickle calls a {type(func).__name__}, which plain data does not")
        if not isinstance(args, tuple) or not isinstance(kwargs or {}, dict):
            raise pickle.UnpicklingError("the pickle calls with arguments that are not a tuple")
        try:
            return func(*args, **(kwargs or {}))
        except TypeError as exc:  # the wrong arguments for the constructor
            raise pickle.UnpicklingError(
                f"the pickle calls {getattr(func, '__name__', func)} with other arguments ({exc})"
            ) from None

    def load_reduce(self) -> None:
        args = self.stack.pop()
        self.stack[-1] = self.call(self.stack[-1], args)

    def load_newobj(self) -> None:
        args = self.stack.pop()
        self.append(self.call(self.stack.pop(), args))

    def load_newobj_ex(self) -> None:
        kwargs, args = self.stack.pop(), self.stack.pop()
        self.append(self.call(self.stack.pop(), args, kwargs))

    def _instantiate(self, klass: Any, args: Any) -> None:
        self.append(self.call(klass, tuple(args)))

    def load_build(self) -> None:
        state = self.stack.pop()
        if not isinstance(self.stack[-1], (Record, DtypeSpec, ArraySpec)):
            raise pickle.UnpicklingError(
                f"the pickle gives a {type(self.stack[-1]).__name__} a state, which plain data does not"
            )
        self.stack[-1].__setstate__(state)

    def keyed(self, items: list) -> list:
        if not all(type(key) is str for key in items[::2]):
            raise pickle.UnpicklingError("a dict whose keys are not all strings")
        return items

    def target(self, kinds: tuple) -> Any:
        if type(self.stack[-1]) not in kinds:
            raise pickle.UnpicklingError(f"the pickle adds items to a {type(self.stack[-1]).__name__}")
        return self.stack[-1]

    def load_dict(self) -> None:
        items = self.keyed(self.pop_mark())
        self.append(dict(zip(items[::2], items[1::2])))

    def load_setitem(self) -> None:
        value, key = self.stack.pop(), self.stack.pop()
        self.target((dict, collections.OrderedDict))[self.keyed([key])[0]] = value

    def load_setitems(self) -> None:
        items = self.keyed(self.pop_mark())
        self.target((dict, collections.OrderedDict)).update(zip(items[::2], items[1::2]))

    def load_additems(self) -> None:
        items = strings(self.pop_mark(), "a set")
        self.target((set,)).update(items)

    def load_frozenset(self) -> None:
        items = strings(self.pop_mark(), "a frozenset")  # pop_mark first: it changes the stack self.append adds to
        self.append(frozenset(items))

    def load_append(self) -> None:
        value = self.stack.pop()
        self.target((list, collections.deque)).append(value)

    def load_appends(self) -> None:
        items = self.pop_mark()
        self.target((list, collections.deque)).extend(items)

    def load_bytearray8(self) -> None:
        size = int.from_bytes(self.read(8), "little")
        if size > self.size:
            raise pickle.UnpicklingError(f"a bytearray of {size} bytes in a pickle of {self.size}")
        data = bytearray(size)
        self.readinto(data)
        self.append(data)

    def load(self) -> Any:  # type: ignore[override]
        """The value the pickle holds, every placeholder replaced by its checked numpy value."""
        try:
            return materialize(super().load(), {}, set())
        except pickle.UnpicklingError:
            raise
        except RecursionError:
            raise pickle.UnpicklingError("nested too deeply") from None
        except Exception as exc:  # noqa: BLE001 (a damaged pickle: an unknown opcode, an empty stack, a truncated frame...)
            raise pickle.UnpicklingError(f"not a pickle of plain data ({type(exc).__name__}: {exc})") from None


for _opcode_name in (
    "REDUCE",
    "NEWOBJ",
    "NEWOBJ_EX",
    "BUILD",
    "DICT",
    "SETITEM",
    "SETITEMS",
    "ADDITEMS",
    "FROZENSET",
    "APPEND",
    "APPENDS",
    "BYTEARRAY8",
):  # each opcode that calls, builds, hashes or allocates: the checked method
    PlainUnpickler.dispatch[getattr(pickle, _opcode_name)[0]] = getattr(PlainUnpickler, "load_" + _opcode_name.lower())


def materialize(value: Any, done: dict[int, Any], open_ids: set[int]) -> Any:
    """``value`` with each :class:`ArraySpec` and :class:`DtypeSpec` replaced by its numpy value (lists, dicts,
    deques and records in place, tuples anew); a value met again inside itself is refused."""
    key = id(value)
    if key in done:
        return done[key]
    if isinstance(value, ArraySpec):
        if value.value is None:
            raise pickle.UnpicklingError("an array without its state")
        return value.value
    if isinstance(value, DtypeSpec):
        return value.dtype
    if not isinstance(value, (list, tuple, dict, collections.deque, Record)):
        return value
    if key in open_ids:
        raise pickle.UnpicklingError(f"a {type(value).__name__} that contains itself")
    open_ids.add(key)
    convert: Callable[[Any], Any] = lambda item: materialize(item, done, open_ids)  # noqa: E731
    if isinstance(value, tuple):
        result: Any = tuple(convert(item) for item in value)
    elif isinstance(value, (list, collections.deque)):
        items = [convert(item) for item in value]
        value.clear()
        value.extend(items)
        result = value
    else:
        mapping = value if isinstance(value, dict) else value.__dict__
        for name in list(mapping):
            mapping[name] = convert(mapping[name])
        result = value
    open_ids.discard(key)
    done[key] = result
    return result


def plain_load(data: bytes, unpickler: type = PlainUnpickler) -> Any:
    """The plain data the pickle ``data`` holds (``unpickler``: :class:`PlainUnpickler` or a subclass); raises
    ``pickle.UnpicklingError`` for anything else."""
    return unpickler(data).load()
