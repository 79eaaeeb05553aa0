"""Hostile files for the fuzz of ppo_dict's readers: mutations of real sb3 zips and VecNormalize pickles, and
a reader run in a child process under a memory limit and a deadline.

:func:`mutated_zips` and :func:`mutated_pickles` turn one real file into many (seeded, so that a failure
replays): bytes flipped, cut or inserted where an opcode starts, hostile pickle fragments spliced in
(a huge ``range`` given to a container, a ``bytearray`` of a terabyte, dtypes of fields or objects, a name
that runs code and would touch a sentinel), values of a zip's JSON replaced by huge, negative, non-finite,
mistyped and deeply nested ones, its pickled values mutated as the pickles are, its entries deflated to
declare far more than they hold. :class:`Isolated` reads each file in a forked child of a worker process
(RLIMIT_AS: the worker's size plus :data:`MEMORY_MARGIN`; a deadline): a segfault, a hang or a runaway
allocation is an outcome the test sees, not the end of pytest.
"""

from __future__ import annotations

import base64
import json
import os
import pickle
import pickletools
import random
import resource
import select
import signal
import subprocess
import sys
import time
import traceback
import zipfile
from typing import Any, Iterator, Optional

#: how much more address space than the worker's own a child may map (a real model's reading needs a few MiB)
MEMORY_MARGIN = 768 * 2**20
#: a deadline per file, in seconds (a real file reads in well under a second)
DEADLINE = 20.0
#: the sentinel a spliced pickle would create if anything it names ran
SENTINEL_NAME = "fuzz_sentinel_ran"


def sentinel_fragment(folder: str) -> bytes:
    """Pickle opcodes that call ``eval`` to touch the sentinel (refused by name when read as data)."""
    path = os.path.join(folder, SENTINEL_NAME)
    code = f"__import__('pathlib').Path({path!r}).touch()"
    return b"cbuiltins\neval\n(V" + code.encode() + b"\ntR"


#: pickle fragments that push one value (so that a splice may still parse), each hostile
FRAGMENTS = (
    b"ccollections\ndeque\ncbuiltins\nrange\nJ\xff\xff\xff\x7f\x85R\x85R",  # deque(range(2**31 - 1))
    b"cbuiltins\nset\ncbuiltins\nrange\n\x8a\x08\x00\x00\x00\x00\x00\x00\x00\x01\x85R\x85R",  # set(range(2**56))
    b"cbuiltins\nbytes\n\x8a\x06\x00\x00\x00\x00\x00\x01\x85R",  # bytes(2**40)
    b"\x96\x00\x00\x00\x00\x00\x01\x00\x00",  # BYTEARRAY8 declaring 2**40 bytes
    b"cnumpy\ndtype\nX\x02\x00\x00\x00V8\x89\x88\x87R",  # dtype('V8')
    b"cnumpy\ndtype\nX\x02\x00\x00\x00f8\x89\x88\x87R(K\x03X\x01\x00\x00\x00|NX\x01\x00\x00\x00a\x85}X\x01\x00\x00\x00a"
    b"cnumpy\ndtype\nX\x02\x00\x00\x00f8\x89\x88\x87RJ@B\x0f\x00\x86sK\x08K\x01K\x10tb",  # f8 given a field at offset 10**6
    b"cnumpy\ndtype\nX\x02\x00\x00\x00O8\x89\x88\x87R",  # dtype('O8')
    b"cnumpy.core.multiarray\n_reconstruct\ncnumpy\nndarray\nK\x00\x85C\x01b\x87R(K\x01J\x00\xca\x9a;\x85cnumpy\ndtype\n"
    b"X\x02\x00\x00\x00f8\x89\x88\x87R\x89C\x08\x00\x00\x00\x00\x00\x00\x00\x00tb",  # an array of 10**9 floats from 8 bytes
    b"]\x94h\x00a",  # a list that contains itself (memo 0 must be it: only where the memo is empty)
    b"(K\x01K\x02d",  # a dict with integer keys
    b"cbuiltins\nlist\n)R",  # list() called
)


def opcode_starts(data: bytes) -> list[int]:
    """Where each opcode of the pickle ``data`` starts (as far as it parses)."""
    starts = []
    try:
        for _, _, pos in pickletools.genops(data):
            starts.append(pos)
    except Exception:  # noqa: BLE001 (a mutated pickle parses as far as it does)
        pass
    return starts or [0]


def mutate_pickle(data: bytes, rng: random.Random, folder: str) -> bytes:
    """One mutation of a pickle: bytes flipped, a run cut or repeated, a hostile fragment (or the sentinel's)
    spliced in where an opcode starts, a dtype's code swapped, the end cut off."""
    kind = rng.randrange(7)
    at = rng.choice(opcode_starts(data))
    if kind == 0:
        out = bytearray(data)
        for _ in range(rng.randint(1, 8)):
            out[rng.randrange(len(out))] = rng.randrange(256)
        return bytes(out)
    if kind == 1:
        return data[:at] + rng.choice(FRAGMENTS) + data[at:]
    if kind == 2:
        return data[:at] + sentinel_fragment(folder) + data[at:]
    if kind == 3:
        end = min(len(data), at + rng.randint(1, 64))
        return data[:at] + data[end:] if rng.random() < 0.5 else data[:end] + data[at:end] * rng.randint(1, 50) + data[end:]
    if kind == 4:
        codes = [b"f8", b"f4", b"i8", b"u1", b"b1"]
        code = rng.choice(codes)
        return data.replace(code, rng.choice([b"V8", b"O8", b"U3", b"S8", b"M8", b"c8", b"f2", b"V0"]), rng.randint(1, 3))
    if kind == 5:
        return data[: rng.randrange(len(data))]
    # an integer argument made huge or negative
    out = bytearray(data)
    for start in rng.sample(opcode_starts(data), min(3, len(opcode_starts(data)))):
        if out[start : start + 1] in (b"K", b"J", b"M") and start + 2 <= len(out):
            out[start + 1] = rng.choice([0, 0xFF, 0x7F, 0x80])
    return bytes(out)


#: values that replace a zip's JSON values
JSON_VALUES = (
    10**400,
    -(10**400),
    -1,
    0,
    2**63,
    float("nan"),
    float("inf"),
    "abc",
    "",
    [],
    {},
    None,
    True,
    [[[[[[[[1]]]]]]]],
    {":type:": "<class 'collections.deque'>", ":serialized:": "AAAA"},
    1e308,
    "<class 'builtins.eval'>",
    [0] * 1000,
)


def zip_entries(path: str) -> dict[str, bytes]:
    with zipfile.ZipFile(path) as archive:
        return {name: archive.read(name) for name in archive.namelist()}


def write_zip(entries: dict[str, bytes], out: str, pad: Optional[dict[str, int]] = None) -> str:
    """The zip of ``entries`` (stored, as sb3 writes them); an entry of ``pad`` deflated, with that many zero
    bytes after its content (written in pieces: the test never holds them)."""
    pad = pad or {}
    with zipfile.ZipFile(out, "w") as archive:
        for name, content in entries.items():
            if name not in pad:
                archive.writestr(name, content, zipfile.ZIP_STORED)
                continue
            info = zipfile.ZipInfo(name)
            info.compress_type = zipfile.ZIP_DEFLATED
            with archive.open(info, "w", force_zip64=True) as f:
                f.write(content)
                for _ in range(pad[name] // 2**20):
                    f.write(bytes(2**20))
    return out


def mutate_zip(entries: dict[str, bytes], rng: random.Random, folder: str) -> tuple[dict[str, bytes], dict[str, int]]:
    """One mutation of an sb3 zip's entries: a JSON value replaced, a pickled value mutated, a torch file's
    bytes flipped or cut, an entry dropped; or (the second value, ``{entry: bytes}``) an entry deflated with
    that many zeros after it, to declare far more than its bytes in the zip."""
    entries = dict(entries)
    kind = rng.randrange(6)
    data = json.loads(entries["data"])
    if kind == 0:
        key = rng.choice(sorted(data))
        data[key] = rng.choice(JSON_VALUES)
    elif kind == 1:
        pickled = sorted(k for k, v in data.items() if isinstance(v, dict) and ":serialized:" in v)
        key = rng.choice(pickled)
        raw = base64.b64decode(data[key][":serialized:"])
        data[key] = {**data[key], ":serialized:": base64.b64encode(mutate_pickle(raw, rng, folder)).decode()}
    elif kind == 2:
        name = rng.choice(sorted(n for n in entries if n.endswith(".pth")))
        raw = bytearray(entries[name])
        if rng.random() < 0.5:
            for _ in range(rng.randint(1, 16)):
                raw[rng.randrange(len(raw))] = rng.randrange(256)
        else:
            raw = raw[: rng.randrange(len(raw))]
        entries[name] = bytes(raw)
    elif kind == 3:
        return entries, {rng.choice(sorted(entries)): rng.choice([2**20, 80 * 2**20])}
    elif kind == 4:
        del entries[rng.choice(sorted(entries))]
        return entries, {}
    else:
        key = rng.choice(sorted(data))
        value = data[key]
        if isinstance(value, dict) and value:
            value[rng.choice(sorted(value))] = rng.choice(JSON_VALUES)
    entries["data"] = json.dumps(data).encode()
    return entries, {}


def mutated_zips(real: str, folder: str, count: int, seed: int) -> Iterator[str]:
    """``count`` mutations of the sb3 zip ``real``, written under ``folder`` (reused names; a padded one written once)."""
    rng, entries = random.Random(seed), zip_entries(real)
    padded: dict[tuple, str] = {}
    for i in range(count):
        mutated, pad = mutate_zip(entries, rng, folder)
        if pad:
            key = tuple(pad.items())
            if key not in padded:
                padded[key] = write_zip(mutated, os.path.join(folder, f"padded_{len(padded)}.zip"), pad)
            yield padded[key]
        else:
            yield write_zip(mutated, os.path.join(folder, f"case_{i % 8}.zip"))


def mutated_pickles(real: str, folder: str, count: int, seed: int) -> Iterator[str]:
    """``count`` mutations of the VecNormalize pickle ``real``, some of them mutated twice."""
    rng = random.Random(seed)
    with open(real, "rb") as f:
        data = f.read()
    for i in range(count):
        mutated = mutate_pickle(data, rng, folder)
        if rng.random() < 0.3:
            mutated = mutate_pickle(mutated, rng, folder)
        path = os.path.join(folder, f"case_{i % 8}.pkl")
        with open(path, "wb") as f:
            f.write(mutated)
        yield path


# ------------------------------------------------------------------------------------------ reading isolated


def read_file(reader: str, path: str) -> str:
    """What ppo_dict's reader ``reader`` makes of ``path``: ``value: ...`` or ``refused: <message>``; anything
    else it raises propagates (the child reports it)."""
    from ppo_dict.core.errors import CheckpointError
    from tests.fuzz_text import READERS, read_text

    if reader in READERS:  # a run directory's, results.py's and a sweep's text files (tests/fuzz_text.py)
        return read_text(reader, path)
    try:
        if reader == "zip":
            from ppo_dict.interop.trained_agent import read_trained_agent

            agent = read_trained_agent(path, "gym_CartPole-v1")
            return f"value: a trained agent of {agent.pinned.get('model')}"
        if reader == "vecnormalize":
            from ppo_dict.interop.vecnormalize import read_statistics

            return f"value: statistics of {read_statistics(path)[2]}"
        from ppo_dict.interop.plain_pickle import plain_load

        with open(path, "rb") as f:
            return f"value: a {type(plain_load(f.read())).__name__}"
    except CheckpointError as exc:
        return f"refused: {exc}"
    except pickle.UnpicklingError as exc:
        if reader == "pickle":
            return f"refused: {exc}"
        raise


def resident_peak() -> int:
    """This process's peak resident memory so far (``VmHWM``), in bytes."""
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmHWM:"))


def child(reader: str, path: str, out: int, limit: int) -> None:
    """In the forked child: the memory limit, then the read, its outcome (and how much its peak resident memory
    grew) written to ``out`` as JSON."""
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    with open("/proc/self/clear_refs", "w") as f:  # the peak starts at what the child holds now, not the worker's
        f.write("5")
    before = resident_peak()
    try:
        outcome = read_file(reader, path)
    except MemoryError:
        outcome = "memory: MemoryError (an allocation past the limit)"
    except BaseException as exc:  # noqa: BLE001 (what the test is looking for: an exception that is not a refusal)
        outcome = f"error: {type(exc).__name__}: {exc}\n{''.join(traceback.format_exc()[-1500:])}"
    if "MemoryError" in outcome:
        outcome = "memory: " + outcome
    os.write(out, json.dumps({"outcome": outcome, "grew": resident_peak() - before}).encode())
    os._exit(0)


def address_space() -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmSize:"))


def read_forked(reader: str, path: str, deadline: float = DEADLINE) -> dict[str, Any]:
    """``{"outcome", "seconds"}`` of :func:`read_file` in a forked child under RLIMIT_AS and ``deadline``."""
    r, w = os.pipe()
    start = time.monotonic()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        child(reader, path, w, address_space() + MEMORY_MARGIN)
    os.close(w)
    chunks, ends = [], start + deadline
    while True:
        ready, _, _ = select.select([r], [], [], max(0.0, ends - time.monotonic()))
        if not ready:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            os.close(r)
            return {"outcome": f"hang: no outcome within {deadline:.0f} s", "seconds": deadline}
        chunk = os.read(r, 65536)
        if not chunk:
            break
        chunks.append(chunk)
    os.close(r)
    _, status = os.waitpid(pid, 0)
    seconds = time.monotonic() - start
    if os.WIFSIGNALED(status):
        return {"outcome": f"crash: killed by signal {os.WTERMSIG(status)}", "seconds": seconds}
    try:
        return {**json.loads(b"".join(chunks)), "seconds": seconds}
    except ValueError:
        return {"outcome": f"crash: exit {os.WEXITSTATUS(status)} without an outcome", "seconds": seconds}


def serve() -> None:
    """The worker: one JSON request a line on stdin (``reader``, ``path``), one JSON answer a line on stdout."""
    import torch

    torch.set_num_threads(1)
    import stable_baselines3.common.save_util  # noqa: F401  (imported once, before the children fork)
    import stable_baselines3.common.utils  # noqa: F401

    import ppo_dict.interop.trained_agent  # noqa: F401
    import ppo_dict.interop.vecnormalize  # noqa: F401
    import ppo_dict.plot  # noqa: F401  (the text readers: tests/fuzz_text.py)
    import ppo_dict.run.run_files  # noqa: F401
    import ppo_dict.run.sweep_file  # noqa: F401
    from benchmarks import results  # noqa: F401

    for line in sys.stdin:
        request = json.loads(line)
        print(json.dumps(read_forked(request["reader"], request["path"], request.get("deadline", DEADLINE))), flush=True)


class Isolated:
    """A worker process (:func:`serve`) that reads files in forked children; ``read(reader, path)`` -> outcome dict."""

    def __init__(self, root: str):
        self.proc = subprocess.Popen(
            [sys.executable, "-c", "from tests.fuzz_files import serve; serve()"],
            cwd=root,
            text=True,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env={**os.environ, "PYTHONPATH": root},
        )

    def read(self, reader: str, path: str, deadline: float = DEADLINE) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps({"reader": reader, "path": path, "deadline": deadline}) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the fuzz worker ended (exit {self.proc.wait()})")
        return json.loads(line)

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def clean(outcome: dict[str, Any]) -> Optional[str]:
    """Why ``outcome`` is not a value or one clean refusal (None: it is one)."""
    text = outcome["outcome"]
    if text.startswith("value: "):
        return None
    if text.startswith("refused: ") and "\n" not in text.strip() and "Traceback" not in text:
        return None
    return text
