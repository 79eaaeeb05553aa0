"""Progress display: a one-line bar on a terminal, plain periodic lines otherwise (logs, CI).

Written to stderr, so stdout keeps sb3's log tables and the summary JSON line as its last line.
"""

from __future__ import annotations

import math
import sys
import time
from typing import Callable, Optional, TextIO


def format_duration(seconds: float) -> str:
    """``3725`` -> ``1h02m05s``; ``65`` -> ``1m05s``; ``7`` -> ``7s``; unknown -> ``?``."""
    if not math.isfinite(seconds) or seconds < 0:
        return "?"
    s = int(round(seconds))
    h, rem = divmod(s, 3600)
    m, s = divmod(rem, 60)
    return f"{h}h{m:02d}m{s:02d}s" if h else f"{m}m{s:02d}s" if m else f"{s}s"


def progress_text(steps: int, total: int, fps: float, ep_return: float) -> str:
    """``12,288/500,000 steps (2.5%)  1,180 fps  ETA 6m54s  return -5.90`` (return ``-`` if none yet)."""
    remaining = (total - steps) / fps if fps > 0 else math.inf
    ret = "-" if math.isnan(ep_return) else f"{ep_return:.2f}"
    return (
        f"{steps:,}/{total:,} steps ({100 * steps / max(total, 1):.1f}%)  {fps:,.0f} fps  ETA "
        f"{format_duration(remaining)}  return {ret}"
    )


def stream_is_terminal(stream: TextIO) -> bool:
    """Whether ``stream`` is a terminal (False for files, pipes and streams without ``isatty``)."""
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False


class Progress:
    """Call after each update with ``(num_timesteps, ep_rew_mean)``.

    mode ``bar``: redraws one line with ``\\r``; ``lines``: one line per ``interval`` seconds
    (and the first and last); ``none``: silent; ``auto``: ``bar`` when the stream it writes to
    is a terminal (``isatty`` overrides the probe), else ``lines``: ``... 2> train.log`` run from
    a terminal gets lines, not ``\r`` redraws. fps counts the steps of this process (a resumed run starts counting at
    its checkpoint).
    """

    WIDTH = 24

    def __init__(
        self,
        total: int,
        start_steps: int,
        mode: str = "auto",
        stream: Optional[TextIO] = None,
        isatty: Optional[bool] = None,
        interval: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.stream = stream or sys.stderr
        if mode == "auto":
            mode = "bar" if (stream_is_terminal(self.stream) if isatty is None else isatty) else "lines"
        self.mode, self.total, self.start_steps, self.interval, self.clock = mode, total, start_steps, interval, clock
        self.start = clock()
        self.last_line: Optional[float] = None

    def update(self, steps: int, ep_return: float) -> None:
        if self.mode == "none":
            return
        now = self.clock()
        fps = (steps - self.start_steps) / max(now - self.start, 1e-9)
        text = progress_text(steps, self.total, fps, ep_return)
        if self.mode == "bar":
            filled = int(self.WIDTH * min(steps / max(self.total, 1), 1.0))
            self.stream.write(f"\r[{'#' * filled}{'.' * (self.WIDTH - filled)}] {text}\x1b[K")
            self.stream.flush()
        elif self.last_line is None or now - self.last_line >= self.interval or steps >= self.total:
            self.last_line = now
            print(f"progress: {text}", file=self.stream, flush=True)

    def close(self) -> None:
        if self.mode == "bar":
            self.stream.write("\n")
            self.stream.flush()
