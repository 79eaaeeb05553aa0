"""The worker line (``ppo_dict.vec.channel``): ``Connection``'s framing, one system call a message,
and bytes read ahead kept for the next message, against a real ``Connection`` on the other end."""

from __future__ import annotations

import multiprocessing
import os
import select
import threading
import time

import numpy as np
import pytest

from ppo_dict.vec.channel import Channel, encode, frame_of, wait_for


@pytest.fixture(params=[True, False], ids=["socket pair", "pipe"])
def line(request):
    """``(Channel reading, Connection writing, Channel writing, Connection reading)`` over one real line each way."""
    if request.param:
        a, b = multiprocessing.Pipe(duplex=True)
        yield Channel(b), a, Channel(b), a
        a.close(), b.close()
    else:
        r1, w1 = multiprocessing.Pipe(duplex=False)
        r2, w2 = multiprocessing.Pipe(duplex=False)
        yield Channel(r1), w1, Channel(w2), r2
        for conn in (r1, w1, r2, w2):
            conn.close()


def test_messages_cross_in_either_direction_between_a_channel_and_a_connection(line):
    reader, writer, channel_writer, conn_reader = line
    writer.send(("step", 3))
    writer.send({"seeds": [1, None], "array": np.arange(4)})
    assert reader.recv() == ("step", 3)
    received = reader.recv()
    assert received["seeds"] == [1, None] and np.array_equal(received["array"], np.arange(4))
    channel_writer.send(("ok", None), cache=True)
    channel_writer.send(("raised", ValueError("bad")))
    assert conn_reader.recv() == ("ok", None)
    answer = conn_reader.recv()
    assert answer[0] == "raised" and isinstance(answer[1], ValueError) and str(answer[1]) == "bad"


def test_bytes_read_past_one_message_are_kept_for_the_next(line):
    reader, writer, _, _ = line
    for t in range(5):
        writer.send(("step", t))
    assert reader.recv() == ("step", 0)
    assert reader.pending, "the other four arrived with the first read: they wait in the channel"
    assert reader.ready()
    assert [reader.recv() for _ in range(4)] == [("step", t) for t in range(1, 5)]
    assert not reader.pending and not reader.ready()


def test_a_message_larger_than_the_lines_buffer_arrives_whole(line):
    reader, writer, _, _ = line
    payload = os.urandom(3_000_000)  # larger than a pipe's or socket's buffer: the writer blocks until it is read
    sender = threading.Thread(target=writer.send, args=(("ok", payload),))
    sender.start()
    received = reader.recv()
    sender.join()
    assert received == ("ok", payload) and reader.pending == b""


def test_a_closed_other_end_reads_as_end_of_file(line):
    reader, writer, _, _ = line
    writer.send(("ready",))
    writer.close()
    assert reader.recv() == ("ready",)
    with pytest.raises(EOFError):
        reader.recv()


def test_repeated_frames_are_encoded_once_and_equal_a_fresh_encoding():
    msg = ("step", 12, 0, 4)
    assert frame_of(msg) is frame_of(msg)
    assert frame_of(msg) == encode(msg)
    assert encode(msg)[:4] == len(encode(msg)[4:]).to_bytes(4, "big")  # Connection's header: the payload's length


def test_a_closed_channel_refuses_to_write_or_read(line):
    reader, writer, channel_writer, _ = line
    channel_writer.close()
    reader.close()
    with pytest.raises(OSError):
        channel_writer.send(("close",))
    with pytest.raises(OSError):
        reader.recv()


def poller_of(*fds: int) -> select.poll:
    poller = select.poll()
    for fd in fds:
        poller.register(fd, select.POLLIN)
    return poller


def test_wait_for_sees_a_message_that_arrives_while_it_looks_without_sleeping():
    """A write during the looks is returned by them: the poll after the looks would come only after
    ``spin`` (5 s) and then not wait at all (timeout 0)."""
    r, w = os.pipe()
    try:
        writer = threading.Timer(0.01, os.write, (w, b"x"))
        started = time.perf_counter()
        writer.start()
        events = wait_for(poller_of(r), timeout_ms=0, spin=5.0)
        writer.join()
        assert events == [(r, select.POLLIN)] and time.perf_counter() - started < 5.0
    finally:
        os.close(r), os.close(w)


def test_wait_for_sleeps_in_poll_after_looking_for_spin_seconds_and_keeps_the_timeout():
    r, w = os.pipe()
    try:
        started = time.perf_counter()
        assert wait_for(poller_of(r), timeout_ms=50, spin=0.02) == []  # 20 ms of looks, then poll's 50 ms
        assert time.perf_counter() - started >= 0.065
        started = time.perf_counter()
        assert wait_for(poller_of(r), timeout_ms=50, spin=0.0) == []  # no looks: poll(2) at once
        assert time.perf_counter() - started >= 0.045
        os.write(w, b"x")
        assert wait_for(poller_of(r), timeout_ms=None, spin=0.0) == [(r, select.POLLIN)]
    finally:
        os.close(r), os.close(w)


def test_wait_for_sees_a_process_exit_while_it_looks():
    """Deaths are poll events on the process sentinel: the looks see them as the sleep would."""
    proc = multiprocessing.get_context("fork").Process(target=os._exit, args=(3,))
    proc.start()
    try:
        events = wait_for(poller_of(proc.sentinel), timeout_ms=None, spin=5.0)
        assert [fd for fd, _ in events] == [proc.sentinel]
    finally:
        proc.join()
    assert proc.exitcode == 3
