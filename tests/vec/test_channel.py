"""The worker line (``ppo_dict.vec.channel``): ``Connection``'s framing, one system call a message,
and bytes read ahead kept for the next message, against a real ``Connection`` on the other end."""
from __future__ import annotations

import multiprocessing
import os
import threading

import numpy as np
import pytest

from ppo_dict.vec.channel import Channel, encode, frame_of


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
