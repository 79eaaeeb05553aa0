"""Text files read bounded: JSON nested no deeper than data needs, CSV lines, cells and rows of a bounded size.

A run directory's ``progress.csv``, ``monitor.csv`` and ``config.json``, a results CSV and a plot's inputs are
files anyone may have edited or planted. Python's readers have no limits of their own that end in one message:
``json.loads`` of ``[`` nested 100,000 deep raises ``RecursionError``, ``csv`` a ``csv.Error`` on a cell over
128 KiB (and reads a 256 MiB line without a newline whole first), ``DictReader`` files a row's extra cells under
the key ``None`` (a ``TypeError`` later, far from the file). Every reader here checks the bound first and raises
``ValueError`` naming the file, the line and what is wrong: the callers' checks turn it into one refusal.
"""

from __future__ import annotations

import csv
import json
import math
from typing import Any, Iterator, Optional, TextIO

#: the deepest nesting a JSON file ppo_dict reads may have (a config's ``policy_kwargs`` nests 3 or 4 deep)
MAX_JSON_DEPTH = 32
#: the longest line a CSV ppo_dict reads may have (a progress.csv of a hundred keys is a few KiB)
MAX_LINE = 2**20
#: the longest cell (a key of sb3's logger, a number, an info keyword's value)
MAX_CELL = 1024
#: the most cells in a row
MAX_CELLS = 4096


def json_depth(text: str) -> int:
    """How deep ``[`` and ``{`` nest in ``text`` outside strings (counted without parsing, so without recursion)."""
    depth = deepest = 0
    in_string = escaped = False
    for char in text:
        if in_string:
            escaped, in_string = (False, True) if escaped else (char == "\\", char != '"')
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "]}":
            depth -= 1
    return deepest


def loads(text: str, where: str, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """``json.loads(text)``, refused with a ``ValueError`` naming ``where`` when it nests deeper than ``max_depth``
    or is not JSON."""
    depth = json_depth(text)
    if depth > max_depth:
        raise ValueError(f"{where}: its JSON nests {depth} deep; ppo_dict reads at most {max_depth}")
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise ValueError(f"{where}: not JSON ({' '.join(str(exc).split())[:120]})") from None


def bounded_lines(file: TextIO, where: str, max_line: int = MAX_LINE, first: int = 1) -> Iterator[str]:
    """The lines of ``file`` (open as text), each refused above ``max_line`` characters before more is read
    (``first``: the number of the first line, for the message)."""
    n = first
    while True:
        line = file.readline(max_line + 1)
        if not line:
            return
        if len(line) > max_line:
            raise ValueError(f"{where}: line {n} is over {max_line:,} characters long")
        yield line
        n += 1


def table(
    file: TextIO, where: str, first: int = 1, max_cell: int = MAX_CELL, max_cells: int = MAX_CELLS, max_line: int = MAX_LINE
) -> Iterator[tuple[int, list[str]]]:
    """``(line number, cells)`` of each row of the CSV in ``file``, the header first; every row as wide as the
    header, no cell over ``max_cell`` characters, the header's names unique and not empty. ``first``: the
    number of the file's line the table starts at (after a monitor file's JSON line)."""
    lines = bounded_lines(file, where, max_line, first)
    reader = csv.reader(lines)
    width: Optional[int] = None
    try:
        for cells in reader:
            n = first + reader.line_num - 1
            long = next((c for c in cells if len(c) > max_cell), None)
            if long is not None:
                raise ValueError(
                    f"{where}: line {n} has a cell of {len(long):,} characters; ppo_dict reads at most {max_cell:,}"
                )
            if width is None:
                if len(cells) > max_cells or not all(cells) or len(set(cells)) != len(cells):
                    raise ValueError(f"{where}: line {n} is no header: {len(cells)} names, each one once and none empty")
                width = len(cells)
            elif cells and len(cells) != width:
                raise ValueError(f"{where}: line {n} has {len(cells)} cells, its header {width}")
            if cells:
                yield n, cells
    except csv.Error as exc:
        raise ValueError(f"{where}: line {first + reader.line_num - 1}: not CSV ({exc})") from None


def number(text: str) -> Optional[float]:
    """The float a cell holds (``nan`` and ``inf`` too), or None for text that is no number."""
    try:
        return float(text)
    except ValueError:
        return None


def whole_step(text: str) -> Optional[int]:
    """The step count a cell holds: a whole number in [0, 2**63), written as an int or a float; None otherwise."""
    value = number(text)
    if value is None or not (math.isfinite(value) and 0 <= value < 2**63 and value == int(value)):
        return None
    return int(value)
