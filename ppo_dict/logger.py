"""sb3-style key/value logging: ``record`` values, ``dump`` them as sb3's console table.

Every dump is also kept in ``history`` (one dict per dump) and handed to any extra writers
(wandb, CSV, ...), so all outputs see the same values.
"""
from __future__ import annotations

import sys
from typing import Any, Callable, Optional, TextIO

Writer = Callable[[dict[str, Any], int], None]


def _format_value(value: Any) -> str:
    # sb3 HumanOutputFormat: floats as {:<8.3g}, everything else str()
    if isinstance(value, float) or (hasattr(value, "dtype") and getattr(value, "dtype").kind == "f"):
        return f"{float(value):<8.3g}"
    return str(value)


def format_table(values: dict[str, Any]) -> str:
    """The table sb3 prints: keys grouped by their ``prefix/``, sorted."""
    rows: list[tuple[str, str]] = []
    last_group = None
    for key in sorted(values):
        group, _, name = key.rpartition("/")
        if group != last_group and group:
            rows.append((f"{group}/", ""))
            last_group = group
        rows.append((f"    {name}" if group else name, _format_value(values[key])))
    key_width = max(len(k) for k, _ in rows)
    val_width = max(len(v) for _, v in rows)
    dashes = "-" * (key_width + val_width + 7)
    lines = [dashes] + [f"| {k:<{key_width}} | {v:<{val_width}} |" for k, v in rows] + [dashes]
    return "\n".join(lines)


class Logger:
    def __init__(self, verbose: int = 1, stream: Optional[TextIO] = None):
        self.verbose = verbose
        self.stream = stream or sys.stdout
        self.current: dict[str, Any] = {}
        self.history: list[dict[str, Any]] = []
        self.writers: list[Writer] = []

    def record(self, key: str, value: Any) -> None:
        self.current[key] = value

    def record_many(self, values: dict[str, Any]) -> None:
        self.current.update(values)

    def dump(self, step: int) -> None:
        if not self.current:
            return
        values = dict(self.current)
        self.history.append(values)
        if self.verbose >= 1:
            print(format_table(values), file=self.stream, flush=True)
        for writer in self.writers:
            writer(values, step)
        self.current.clear()
