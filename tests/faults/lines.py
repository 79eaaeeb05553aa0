"""A process's stdout lines, read in a thread, so that a test can wait for a marker line with a timeout.

The one way the tests read a child's lines with a deadline: ``select()`` on ``proc.stdout`` after a
``readline()`` misses a line that came in the same read (it waits in Python's buffer, not in the pipe),
and a bare ``readline()`` has no deadline at all.
"""

from __future__ import annotations

import queue
import subprocess
import threading
import time


class Lines:
    """The stdout of ``proc`` (text mode), line by line; ``seen`` holds every line taken so far."""

    def __init__(self, proc: subprocess.Popen):
        self.proc = proc
        self.queue: "queue.Queue[str]" = queue.Queue()
        self.seen: list[str] = []
        self.done = threading.Event()  # set at EOF
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.queue.put(line)
        self.done.set()

    def wait_for(self, text: str, timeout: float) -> str:
        """The first line (from here on) holding ``text``; AssertionError after ``timeout`` seconds or at EOF."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = self.queue.get(timeout=0.1)
            except queue.Empty:
                if self.done.is_set() and self.queue.empty():
                    break
                continue
            self.seen.append(line)
            if text in line:
                return line
        raise AssertionError(f"{text!r} not printed within {timeout} s; last lines: {self.seen[-5:]}")

    def rest(self, timeout: float = 10.0) -> list[str]:
        """Every line, once the process has closed its stdout (or ``timeout`` seconds have passed)."""
        self.done.wait(timeout)
        while not self.queue.empty():
            self.seen.append(self.queue.get())
        return self.seen

    def close(self, timeout: float = 10.0) -> list[str]:
        """:meth:`rest`, then the pipes closed (stderr unread), for a process the test has ended: in place of
        ``communicate()``, which must not read stdout beside the reader thread."""
        seen = self.rest(timeout)
        if self.done.is_set():
            self.proc.stdout.close()
        if self.proc.stderr is not None:
            self.proc.stderr.close()
        return seen
