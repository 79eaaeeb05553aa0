"""The line between the main process and a worker: messages in ``multiprocessing.Connection``'s
framing, each written and read with one system call.

``Connection.send`` and ``Connection.recv`` cost about 6 and 7 us of Python per message (a
``ForkingPickler`` per message, the 4-byte header read apart from the payload, ``BytesIO``
buffers). A rollout step sends one message to every worker and reads one answer from each, so in
the main process that cost is paid once per worker per step, serially: with 15 workers it was the
largest part of the main process's own work. A :class:`Channel` writes a message as one
``os.write`` (the frames of the commands sent at every step, ``("step", t)``, and of the answer
``("ok", None)`` are encoded once and kept) and reads whatever has arrived with one ``os.read``,
keeping any bytes beyond the first message for the next read.

The framing is the ``Connection``'s own (a big-endian ``int32`` length, ``-1`` then a ``uint64``
for payloads over 2 GiB; the payload pickled), so a message can come from either end's
``Connection.send``. Once a :class:`Channel` reads from a connection, only it may read from it:
bytes it has read ahead are in :attr:`Channel.pending`.
"""

from __future__ import annotations

import os
import pickle
import select
import struct
import time
from multiprocessing.connection import Connection
from multiprocessing.reduction import ForkingPickler
from typing import Any, Callable, Optional

#: Frames kept by :meth:`Channel.send` (``cache=True``): a rollout's step commands and the plain answer.
_FRAMES: dict[tuple, bytes] = {}
_MAX_FRAMES = 1 << 16
_BIG = 0x7FFFFFFF
_READ_SIZE = 1 << 16


def encode(msg: Any) -> bytes:
    """``msg`` as ``Connection.send`` writes it: the header, then the pickle (fds and shared
    memory handles included: ``ForkingPickler``)."""
    payload = bytes(ForkingPickler.dumps(msg))
    size = len(payload)
    header = struct.pack("!i", size) if size <= _BIG else struct.pack("!iQ", -1, size)
    return header + payload


def frame_of(msg: tuple) -> bytes:
    """:func:`encode`, kept for messages of ints, strings and None sent again and again."""
    frame = _FRAMES.get(msg)
    if frame is None:
        frame = encode(msg)
        if len(_FRAMES) < _MAX_FRAMES:
            _FRAMES[msg] = frame
    return frame


class Channel:
    """One end of a ``Connection`` (a socket pair or a pipe), written and read without its per-message overhead."""

    def __init__(self, conn: Connection):
        self.conn, self.fd = conn, conn.fileno()
        self.pending = b""  # bytes read beyond the last whole message

    def send(self, msg: tuple, cache: bool = False) -> None:
        """Write ``msg`` (``cache``: a message of ints, strings and None, whose frame is kept)."""
        self.write(frame_of(msg) if cache else encode(msg))

    def write(self, frame: bytes) -> None:
        view = memoryview(frame)
        while view:
            view = view[os.write(self.fd, view) :]

    def close(self) -> None:
        """Close the connection; later writes and reads fail with ``OSError`` (the fd is not kept:
        its number may belong to another file by then)."""
        self.conn.close()
        self.fd = -1

    def ready(self) -> bool:
        """A message (or its start, or the end of the line) is there to read without waiting."""
        return bool(self.pending) or self.conn.poll(0)

    def recv(self) -> Any:
        """The next message; waits for it. ``EOFError`` when the other end is closed."""
        data = self.pending
        while True:
            bounds = payload_bounds(data)
            if bounds is not None:
                start, end = bounds
                if len(data) < end:
                    data = self._read_exactly(data, end)
                self.pending = bytes(data[end:])
                return pickle.loads(memoryview(data)[start:end])
            data += self._read(_READ_SIZE)

    def _read(self, size: int) -> bytes:
        chunk = os.read(self.fd, size)
        if not chunk:
            raise EOFError("the other end of the line is closed")
        return chunk

    def _read_exactly(self, data: bytes, end: int) -> bytearray:
        """``data`` and the bytes after it up to ``end``, read into one buffer (a large payload is not copied chunk by
        chunk)."""
        buffer = bytearray(end)
        buffer[: len(data)] = data
        view, have = memoryview(buffer), len(data)
        while have < end:
            read = os.readv(self.fd, [view[have:]])
            if not read:
                raise EOFError("the other end of the line is closed")
            have += read
        return buffer


def payload_bounds(data: bytes) -> Optional[tuple[int, int]]:
    """Where the first message's payload starts and ends in ``data``, once its header is there."""
    if len(data) < 4:
        return None
    size = struct.unpack_from("!i", data)[0]
    if size != -1:
        return 4, 4 + size
    if len(data) < 12:
        return None
    return 12, 12 + struct.unpack_from("!Q", data, 4)[0]


def wait_for(
    poller: select.poll, timeout_ms: Optional[int], spin: float, idle: Optional[Callable[[], bool]] = None
) -> list[tuple[int, int]]:
    """``poller.poll(timeout_ms)``, but looked at without blocking for up to ``spin`` seconds first,
    yielding the CPU between looks (``sched_yield``: a process that has work on this core runs
    instead; on a core of its own, the look comes round again at once). ``idle``: work to do first,
    a unit a call, looking between units (it returns False once nothing is left).

    A process asleep in ``poll(2)`` is woken by the kernel when the other end writes; on a VM that
    costs 20-90 us of wall time, on the critical path of every rollout step, and more CPU than the
    looks. A worker between two steps, or the main process waiting for the workers' answers, is
    woken in about a microsecond while the answer comes within ``spin``; a longer wait (an update)
    sleeps as before. The events are ``poll``'s own, so deaths and timeouts are seen as before.
    """
    while idle is not None:
        events = poller.poll(0)
        if events:
            return events
        if not idle():
            break
    if spin > 0:
        until = time.perf_counter() + spin
        while True:
            events = poller.poll(0)
            if events:
                return events
            if time.perf_counter() >= until:
                break
            os.sched_yield()
    return poller.poll(timeout_ms)
