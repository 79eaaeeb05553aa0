"""Plain data means plain data (``ppo_dict.interop.plain_pickle``): what real pickles hold reads back equal, and
every pickle below, built here to hurt, is refused by name: within a deadline and a memory limit (each is
read in a forked child: ``tests/fuzz_files.py``), and nothing it names runs.

The hostile pickles, by what they would do through ``pickle.load`` (sb3's and rl-zoo's way):

* a ``numpy.dtype`` given structured fields at an offset past its item size (as its own state, or as an
  array's ``V8`` dtype): an array of it reads outside its memory (a segfault, or heap bytes as statistics);
* a container constructor given ``range(2**62)`` (``deque``, ``set``, ``list``): never returns;
* ``bytes(2**40)``, a ``BYTEARRAY8`` opcode declaring 2**40 bytes, an array of 10**9 floats from 8 bytes:
  allocate what the file does not hold;
* a dict keyed by a tuple nested 100 deep through shared references (hashing it takes 2**100 steps), one
  keyed by integers; a list that contains itself; an array of objects; ``eval`` touching a sentinel.
"""

from __future__ import annotations

import collections
import os
import pickle

import numpy as np
import pytest

from ppo_dict.interop.plain_pickle import plain_load
from tests.fuzz_files import clean


class Reduced:
    """Pickled as ``func(*args)`` (then given ``state``, when there is one): how a hostile pickle is written here."""

    def __init__(self, func, args, state=None):
        self.func, self.args, self.state = func, args, state

    def __reduce__(self):
        return (self.func, self.args) if self.state is None else (self.func, self.args, self.state)


def reconstructed(dtype, shape, data) -> Reduced:
    """An ndarray as numpy pickles one (``_reconstruct``, then its state), with any dtype and data."""
    return Reduced(np._core.multiarray._reconstruct, (np.ndarray, (0,), b"b"), (1, shape, dtype, False, data))


FIELD_PAST_ITEM = Reduced(np.dtype, ("V8", False, True), (3, "|", None, ("a",), {"a": (np.dtype("f8"), 1 << 20)}, 8, 1, 16))
FIELD_IN_F8 = Reduced(np.dtype, ("f8", False, True), (3, "|", None, ("a",), {"a": (np.dtype("f8"), 64)}, 8, 1, 16))


def exponential_key(depth: int) -> bytes:
    """A pickle of ``{t: 1}`` where ``t = (u, u)``, ``u = (v, v)``... ``depth`` levels, each level written once (the
    memo): hashing ``t`` walks 2**depth leaves. Written opcode by opcode (building it here would hash it)."""
    ops = b"\x80\x04}\x94)\x940"  # PROTO 4, EMPTY_DICT, MEMOIZE (0), EMPTY_TUPLE, MEMOIZE (1), POP
    for level in range(1, depth + 1):  # level L is memo L + 1, made of two of memo L
        ops += b"h" + bytes([level]) + b"h" + bytes([level]) + b"\x86\x940"  # BINGET, BINGET, TUPLE2, MEMOIZE, POP
    return ops + b"h" + bytes([depth + 1]) + b"K\x01s."  # BINGET (the key), BININT1 1, SETITEM, STOP


def self_containing() -> list:
    loop: list = []
    loop.append(loop)
    return loop


HOSTILE = {
    "structured dtype, field past its item size": reconstructed(FIELD_PAST_ITEM, (4,), bytes(32)),
    "f8 dtype given fields": reconstructed(FIELD_IN_F8, (4,), bytes(32)),
    "deque of range(2**62)": Reduced(collections.deque, (range(2**62),)),
    "set of range(2**62)": Reduced(set, (range(2**62),)),
    "list of range(2**62)": Reduced(list, (range(2**62),)),
    "bytes(2**40)": Reduced(bytes, (2**40,)),
    "10**9 floats from 8 bytes": reconstructed(np.dtype("f8"), (10**9,), bytes(8)),
    "exponential hash": exponential_key(100),
    "integer keys": {i: i for i in range(10)},
    "a list that contains itself": self_containing(),
    "an array of objects": np.array([object()], dtype=object),
    "a unicode array": np.array(["abc"]),
}


def write(folder, name: str, value) -> str:
    path = os.path.join(folder, name.replace(" ", "_").replace("*", "") + ".pkl")
    with open(path, "wb") as f:
        f.write(value if isinstance(value, bytes) else pickle.dumps(value, protocol=4))
    return path


@pytest.mark.parametrize("name", list(HOSTILE))
def test_a_hostile_pickle_is_refused_within_bounds(file_reader, tmp_path, name) -> None:
    outcome = file_reader.read("pickle", write(tmp_path, name, HOSTILE[name]), deadline=10)
    assert clean(outcome) is None and outcome["outcome"].startswith("refused: "), outcome
    assert outcome["seconds"] < 10


def test_hostile_opcodes_are_refused_and_nothing_they_name_runs(file_reader, tmp_path) -> None:
    from tests.fuzz_files import SENTINEL_NAME, sentinel_fragment

    cases = {
        "bytearray8 of 2**40": b"\x80\x05\x96\x00\x00\x00\x00\x00\x01\x00\x00.",
        "eval": b"\x80\x04" + sentinel_fragment(str(tmp_path)) + b".",
        "persistent id": b"\x80\x04X\x01\x00\x00\x00a\x94Q.",
        "state given to a list": b"\x80\x04]\x94}\x94b.",
    }
    for name, data in cases.items():
        outcome = file_reader.read("pickle", write(tmp_path, name, data), deadline=10)
        assert clean(outcome) is None and outcome["outcome"].startswith("refused: "), (name, outcome)
    assert not os.path.exists(tmp_path / SENTINEL_NAME)


@pytest.mark.parametrize("protocol", [2, 3, 4, 5])
def test_plain_data_reads_back_equal(protocol) -> None:
    values = [
        np.zeros((2, 3), np.float32),
        np.asfortranarray(np.arange(6.0).reshape(2, 3)),
        np.arange(5).astype(">i4"),
        np.array([True, False]),
        np.zeros((0, 3)),
        np.float64(1.5),
        np.int64(-3),
        np.complex128(1 + 2j),
        collections.deque([{"r": 1.0, "l": 3, "t": 0.5}], maxlen=100),
        collections.OrderedDict(a=1),
        {"a": [1, (2, "b"), None]},
        {"x"},
        frozenset({"y"}),
        b"xy",
        bytearray(b"ab"),
        10**30,
        -2.5,
    ]
    for value in values:
        read = plain_load(pickle.dumps(value, protocol=protocol))
        if isinstance(value, np.ndarray):
            assert type(read) is np.ndarray and read.dtype == value.dtype and np.array_equal(read, value), value
        else:
            assert type(read) is type(value) and read == value, value


def test_refusals_name_what_is_refused() -> None:
    for value, text in (
        (HOSTILE["structured dtype, field past its item size"], "a dtype 'V8': not a plain number type"),
        (HOSTILE["f8 dtype given fields"], "a dtype with fields, a subarray or flags"),
        (HOSTILE["deque of range(2**62)"], "the pickle names builtins.range"),
        (HOSTILE["10**9 floats from 8 bytes"], "needs 8000000000 bytes; the pickle holds 8"),
        (HOSTILE["integer keys"], "a dict whose keys are not all strings"),
        (HOSTILE["exponential hash"], "a dict whose keys are not all strings"),
        (HOSTILE["a list that contains itself"], "a list that contains itself"),
    ):
        with pytest.raises(pickle.UnpicklingError, match=text):
            plain_load(value if isinstance(value, bytes) else pickle.dumps(value, protocol=4))
