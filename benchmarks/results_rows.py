"""The rows of a results CSV (``final.csv``, ``curves.csv``), read bounded and validated whole, and merged all or nothing.

``--merge`` reads another folder's CSVs, which anyone may have edited: each is read as a regular file of a bounded
size (``ppo_dict.core.reading.read_capped``), as UTF-8 text, through ``ppo_dict.core.bounded.table`` (lines, cells,
rows as wide as the header), its header holding every column ``results.py`` writes, each cell of its kind (whole
numbers of steps, finite floats, a run id); any problem is a ``ValueError`` naming the file, the line and the cell.
:func:`write_both` then writes both files' new contents to temporary files first and renames them into place, so a
merge appends both CSVs or neither.
"""

from __future__ import annotations

import csv
import io
import math
import os
from typing import Any, Callable

from ppo_dict.core import bounded
from ppo_dict.core.files import atomic_write
from ppo_dict.core.reading import read_capped

#: the most a results CSV may hold (curves.csv of every run on the page is about 1.5 MB)
CSV_CAP = 256 << 20


def _count(text: str) -> bool:
    return bounded.whole_step(text) is not None and "." not in text and "e" not in text.lower()


def _finite(text: str) -> bool:
    value = bounded.number(text)
    return value is not None and math.isfinite(value)


def _float(text: str) -> bool:
    return bounded.number(text) is not None  # nan: a rollout without an ended episode


def _steps(text: str) -> bool:
    return all(_count(part) for part in text.split(";"))


#: each column's check (``None``: any text) and whether it may be empty
COLUMNS: dict[str, tuple[Callable[[str], bool], bool]] = {
    "env": (bool, False),
    "lib": (bool, False),
    "seed": (_count, False),
    "run": (bool, False),
    "planned": (_count, True),
    "timesteps": (_count, True),
    "budget": (_count, True),
    "eval_mean": (_finite, True),
    "eval_std": (_finite, True),
    "eval_episodes": (_count, True),
    "last_ep_rew_mean": (_float, True),
    "wall_s": (_finite, True),
    "resumed_at": (_steps, True),
    "ep_rew_mean": (_float, False),
}
#: what a cell of a column must be, for the message
KINDS = {
    _count: "a whole number",
    _finite: "a finite number",
    _float: "a number",
    _steps: "steps separated by ';'",
    bool: "some text",
}


def read_rows(path: str, fields: list[str]) -> list[dict[str, str]]:
    """The rows of the results CSV at ``path`` ([] where there is none), validated: every column of ``fields`` in
    its header, each cell of its kind. ``ValueError`` (an ``OSError`` for a file that is not read) names what is wrong."""
    if not os.path.lexists(path):
        return []
    data = read_capped(path, CSV_CAP, "a results CSV")
    try:
        text = data.decode()
    except UnicodeDecodeError as exc:
        raise ValueError(f"{path}: not UTF-8 text (byte {exc.start})") from None
    rows: list[dict[str, str]] = []
    header: list[str] = []
    for n, cells in bounded.table(io.StringIO(text, newline=""), path):
        if not header:
            header = cells
            missing = [f for f in fields if f not in header]
            if missing:
                raise ValueError(
                    f"{path}: its header has no {', '.join(missing)} column (a results CSV has {', '.join(fields)})"
                )
            continue
        row = dict(zip(header, cells))
        for field in fields:
            check, may_be_empty = COLUMNS.get(field, (lambda _: True, True))
            if not (row[field] == "" and may_be_empty) and not check(row[field]):
                raise ValueError(
                    f"{path}: line {n}: {field} is {row[field][:40]!r}, not {KINDS.get(check, 'what it should be')}"
                )
        rows.append({field: row[field] for field in fields})
    return rows


def csv_text(fields: list[str], rows: list[dict[str, Any]]) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=fields, lineterminator="\r\n")
    writer.writeheader()
    writer.writerows(rows)
    return buffer.getvalue()


def write_both(files: list[tuple[str, list[str], list[dict[str, Any]]]]) -> None:
    """Write each ``(path, fields, all its rows)``: every file's new content is made in full first (each a temp file
    beside its path, fsynced), then each renamed into place; a failure before the renames changes no file."""
    staged: list[tuple[str, str]] = []
    try:
        for path, fields, rows in files:
            staging = f"{path}.merging"
            atomic_write(staging, lambda f, fields=fields, rows=rows: f.write(csv_text(fields, rows)), mode="w")
            staged.append((staging, path))
    except BaseException:
        for staging, _ in staged:
            os.unlink(staging)
        raise
    for staging, path in staged:
        os.replace(staging, path)
