"""sb3-style key/value logging: ``record`` values, ``dump`` them as sb3's console table.

Every dump is also kept in ``history`` (one dict per dump) and handed to any extra writers
(wandb, CSV, ...), so all outputs see the same values.
"""

from __future__ import annotations

import sys
from typing import Any, Callable, Optional, TextIO

Writer = Callable[[dict[str, Any], int], None]


#: sb3's HumanOutputFormat truncates keys and values to this many characters.
MAX_LENGTH = 36


def _truncate(text: str) -> str:
    return text[: MAX_LENGTH - 3] + "..." if len(text) > MAX_LENGTH else text


def format_table(values: dict[str, Any]) -> str:
    """The table sb3's ``HumanOutputFormat`` prints, character for character: keys sorted and grouped
    under their ``prefix/``, indented by 3, python floats (np.float64 too) as ``{:<8.3g}``, the rest
    ``str()``, everything cut to 36 characters."""
    rows: dict[tuple[str, str], str] = {}
    tag = ""
    for key, value in sorted(values.items()):
        text = f"{value:<8.3g}" if isinstance(value, float) else str(value)
        if key.find("/") > 0:
            tag = key[: key.find("/") + 1]
            rows[(tag, _truncate(tag))] = ""
        if tag and tag in key:
            key = f"{'':3}{key[len(tag) :]}"
        rows[(tag, _truncate(key))] = _truncate(text)
    key_width = max(len(key) for _, key in rows)
    val_width = max(len(v) for v in rows.values())
    dashes = "-" * (key_width + val_width + 7)
    lines = (
        [dashes]
        + [f"| {key}{' ' * (key_width - len(key))} | {v}{' ' * (val_width - len(v))} |" for (_, key), v in rows.items()]
        + [dashes]
    )
    return "\n".join(lines)


class _Stderr:
    """``sys.stderr`` as it is when a message is written, not as it was when a default argument was bound at import: a
    caller that redirects stderr (``contextlib.redirect_stderr``, a test's capture) gets every message of the run."""

    def __getattr__(self, name: str) -> Any:
        return getattr(sys.stderr, name)


#: the default ``log`` of the run's messages (the current ``sys.stderr``)
STDERR: TextIO = _Stderr()  # type: ignore[assignment]


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
