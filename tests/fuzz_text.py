"""Hostile text files for the fuzz of ppo_dict's text readers (issue 59): a run's ``progress.csv``, ``monitor.csv``,
``config.json`` (as ``ppo_dict.plot`` reads it) and ``wandb_run_id``, ``results.py``'s CSVs and a sweep file.

:func:`mutated_texts` turns one real file into many (seeded, so that a failure replays): bytes flipped, cut,
duplicated or inserted, and hostile fragments spliced in at a line start or anywhere: JSON or YAML nested 100,000
deep, a 200 KB cell, a 2 MiB line without a newline, extra cells, non-UTF-8 bytes, NUL bytes, numbers of 1e30 and
nan, an unclosed quote, a YAML alias bomb. :func:`read_text` is what each reader makes of a file, read by
``tests/fuzz_files.py``'s isolated worker (a forked child under a memory limit and a deadline).
"""

from __future__ import annotations

import os
import random
from typing import Iterator

#: fragments spliced into a text file, each hostile to one reader or another
FRAGMENTS = (
    b"[" * 100_000,
    b'{"a": ' * 50_000,
    b"9" * 200_000,
    b"x" * (2 * 2**20 + 7),
    b",,,,,,,,,,,,",
    b"\xff\xfe\xfd",
    b"\x00" * 64,
    b"1e30",
    b"nan",
    b"-inf",
    b'"unclosed, cell',
    b'#{"t_start": "noon"}\n',
    (
        "a: &a [x, x, x, x, x, x, x, x, x]\n"
        + "".join(f"{c}: &{c} [{', '.join([f'*{p}'] * 9)}]\n" for p, c in zip("abcdefgh", "bcdefghi"))
    ).encode(),
    b"\n" * 1000,
    b"step,step\n",
    b"\r",
    b"'''",
    b'!!python/object/apply:os.system ["touch /tmp/fuzz_sentinel_ran"]',
    b"q: 0\n",
    b"distribution: log_uniform_values\nmin: 0\nmax: 1\n",
    b"metric: {name: env}\n",
    b"../../etc/passwd",
    b"gym_packages: {value: os}\n",
)

#: the readers of this module, each named as tests/fuzz_files.read_file is asked for it
READERS = ("progress", "monitor", "plot_config", "wandb_id", "results_final", "results_curves", "sweep")


def mutate_text(data: bytes, rng: random.Random) -> bytes:
    """One to three mutations of ``data``: a flip, a cut, a duplicated line, a fragment at a line start or anywhere."""
    for _ in range(rng.randint(1, 3)):
        kind = rng.choice(("flip", "cut", "duplicate", "fragment", "fragment_at_line"))
        at = rng.randrange(len(data) + 1)
        if kind == "flip" and data:
            at = min(at, len(data) - 1)
            data = data[:at] + bytes([data[at] ^ (1 << rng.randrange(8))]) + data[at + 1 :]
        elif kind == "cut":
            data = data[:at] if rng.random() < 0.5 else data[:at] + data[at + rng.randint(1, 40) :]
        elif kind == "duplicate":
            lines = data.splitlines(keepends=True)
            if lines:
                line = rng.choice(lines)
                data = data + line * rng.randint(1, 3)
        else:
            if kind == "fragment_at_line":
                starts = [0] + [i + 1 for i, b in enumerate(data) if b == 10]
                at = rng.choice(starts)
            data = data[:at] + rng.choice(FRAGMENTS) + data[at:]
    return data


def mutated_texts(real: str, folder: str, count: int, seed: int) -> Iterator[str]:
    """``count`` mutations of the file ``real``, each written to ``folder`` under ``real``'s own name (the readers
    take the kind of CSV from it) in a folder of its own."""
    rng = random.Random(seed)
    with open(real, "rb") as f:
        data = f.read()
    for i in range(count):
        where = os.path.join(folder, f"{os.path.basename(real)}.{seed}.{i}")
        os.makedirs(where, exist_ok=True)
        path = os.path.join(where, os.path.basename(real))
        with open(path, "wb") as f:
            f.write(mutate_text(data, rng))
        yield path


def read_text(reader: str, path: str) -> str:
    """What ppo_dict's reader ``reader`` makes of ``path``: ``value: ...`` or ``refused: <message, on one line>``;
    anything else it raises propagates (the child reports it)."""
    from ppo_dict.core.errors import SweepError

    try:
        if reader == "progress":
            from ppo_dict.run.run_files import read_progress

            return f"value: {len(read_progress(path))} rows"
        if reader == "monitor":
            from ppo_dict.run.monitor_csv import read_monitor

            return f"value: {len(read_monitor(path)[1])} lines"
        if reader == "plot_config":
            from ppo_dict.plot import run_config

            return f"value: {sorted(run_config(os.path.dirname(path)))}"
        if reader == "wandb_id":
            from ppo_dict.run.tracking import read_wandb_id

            return f"value: {read_wandb_id(path)}"
        if reader in ("results_final", "results_curves"):
            from benchmarks import results

            return f"value: {len(results.read(path))} rows"
        from ppo_dict.run.sweep_file import check_sweep, read_sweep_file

        sweep = read_sweep_file(path)
        effects = check_sweep(sweep, sweep.get("method", "random"))
        return f"value: a sweep ({len(effects)} code effects)"
    except (ValueError, OSError, SweepError) as exc:
        return "refused: " + " | ".join(str(exc).splitlines())
