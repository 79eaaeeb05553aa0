"""Godot RL Agents' wire protocol: framing, spaces, actions, replies; and one raw round trip with the demo."""

from __future__ import annotations

import json
import socket
import subprocess

import numpy as np
import pytest
from gymnasium import spaces

from ppo_dict.envs.errors import GodotProtocolError
from ppo_dict.envs.godot import protocol
from ppo_dict.envs.godot.game import DEFAULT_BINARY, DEMO_PROJECT
from ppo_dict.envs.godot.protocol import ActionMapping, ConnectionClosed, EnvInfo
from tests.godot_helpers import needs_godot


# ---------------------------------------------------------------------------------------- protocol, no engine
def test_framing_round_trip_and_errors():
    a, b = socket.socketpair()
    with a, b:
        message = {"type": "step", "obs": [{"obs": [0.5, -1.0]}], "reward": [1.25], "done": [False]}
        raw = protocol.encode_message(message)
        assert int.from_bytes(raw[:4], "little") == len(raw) - 4
        assert raw[4:] == json.dumps(message, separators=(",", ":")).encode()
        protocol.send_message(a, message)
        assert protocol.recv_message(b) == message
        a.sendall((5).to_bytes(4, "little") + b"{nope")
        with pytest.raises(GodotProtocolError, match="is not UTF-8 JSON"):
            protocol.recv_message(b)
        a.sendall((10).to_bytes(4, "little") + b'{"a":')
        a.close()
        with pytest.raises(ConnectionClosed, match="after 5 of 10 bytes"):
            protocol.recv_message(b)


def test_observation_spaces():
    space = protocol.observation_space_from_godot(
        {
            "obs": {"space": "box", "size": [4]},
            "camera_2d": {"space": "box", "size": [8, 6, 3]},
            "room": {"space": "discrete", "size": 5},
        }
    )
    assert space["obs"] == spaces.Box(-1.0, 1.0, (4,), np.float32)
    assert space["camera_2d"] == spaces.Box(0, 255, (8, 6, 3), np.uint8)
    assert space["room"] == spaces.Discrete(5)
    image = np.arange(8 * 6 * 3, dtype=np.uint8).reshape(8, 6, 3)
    obs = protocol.decode_obs([{"obs": [1, 2, 3, 4], "camera_2d": image.tobytes().hex(), "room": 3}] * 2, space, "test")
    assert obs["obs"].dtype == np.float32 and obs["obs"].shape == (2, 4)
    np.testing.assert_array_equal(obs["camera_2d"][1], image)
    assert obs["room"].shape == (2, 1) and obs["room"][0, 0] == 3
    with pytest.raises(GodotProtocolError, match="agent 1's observation 'obs' does not fit"):
        protocol.decode_obs(
            [
                {"obs": [1, 2, 3, 4], "camera_2d": image.tobytes().hex(), "room": 0},
                {"obs": [1, 2], "camera_2d": image.tobytes().hex(), "room": 0},
            ],
            space,
            "test",
        )
    with pytest.raises(GodotProtocolError, match="space .* is not supported: use 'box' or 'discrete'"):
        protocol.observation_space_from_godot({"x": {"space": "tuple", "size": 2}})


def test_action_mappings():
    cont = ActionMapping.from_godot(
        {"move": {"action_type": "continuous", "size": 2}, "turn": {"action_type": "continuous", "size": 1}}
    )
    assert cont.space == spaces.Box(-1.0, 1.0, (3,), np.float32)
    assert cont.to_godot(np.array([[0.5, -0.25, 1.0]])) == [{"move": [0.5, -0.25], "turn": [1.0]}]

    joint = ActionMapping.from_godot(
        {"x": {"action_type": "discrete", "size": 3}, "y": {"action_type": "discrete", "size": 2}}
    )
    assert joint.space == spaces.Discrete(6)
    # the first key varies slowest: a = x * 2 + y
    assert joint.to_godot(np.array([0, 1, 5])) == [{"x": 0, "y": 0}, {"x": 0, "y": 1}, {"x": 2, "y": 1}]
    with pytest.raises(GodotProtocolError, match=r"discrete actions must be in \[0, 6\)"):
        joint.to_godot(np.array([6]))

    mixed = ActionMapping.from_godot(
        {"move": {"action_type": "continuous", "size": 2}, "jump": {"action_type": "discrete", "size": 2}}
    )
    assert mixed.space == spaces.Box(-1.0, 1.0, (3,), np.float32)
    assert mixed.to_godot(np.array([[0.1, 0.2, 0.3], [0.0, 0.0, -0.3]])) == [
        {"move": [0.1, 0.2], "jump": 1},
        {"move": [0.0, 0.0], "jump": 0},
    ]
    with pytest.raises(GodotProtocolError, match=r"discrete action keys \{'gear': 4\} mixed with continuous ones"):
        ActionMapping.from_godot(
            {"move": {"action_type": "continuous", "size": 2}, "gear": {"action_type": "discrete", "size": 4}}
        )
    with pytest.raises(GodotProtocolError, match="make 8100 joint actions, more than 4096"):
        ActionMapping.from_godot({k: {"action_type": "discrete", "size": 90} for k in "ab"})


def test_env_info_and_step_reply_parsing():
    one = {"obs": {"space": "box", "size": [2]}}
    act = {"move": {"action_type": "continuous", "size": 2}}
    # older plugins: one dict for every agent
    info = EnvInfo.from_message({"type": "env_info", "n_agents": 3, "observation_space": one, "action_space": act})
    assert info.n_agents == 3 and info.policy_names == ("shared_policy",) * 3
    with pytest.raises(GodotProtocolError, match="agent 1's spaces differ from agent 0's"):
        EnvInfo.from_message(
            {
                "type": "env_info",
                "n_agents": 2,
                "observation_space": [one, {"obs": {"space": "box", "size": [3]}}],
                "action_space": act,
            }
        )

    obs = [{"obs": [0, 0]}, {"obs": [1, 1]}, {"obs": [2, 2]}]
    # plugin game: no truncated, no terminal_obs -> done is terminated
    plain = protocol.parse_step_reply(
        {"type": "step", "obs": obs, "reward": [1, 2, 3], "done": [False, True, False]}, 3, info.observation_space, "t"
    )
    assert plain.terminated.tolist() == [False, True, False] and not plain.truncated.any() and plain.terminal_obs is None
    assert plain.rewards.dtype == np.float32
    # the time-limit flag in a plugin's info
    by_info = protocol.parse_step_reply(
        {
            "type": "step",
            "obs": obs,
            "reward": [0] * 3,
            "done": [True, True, False],
            "info": [{"TimeLimit.truncated": True}, {}, {}],
        },
        3,
        info.observation_space,
        "t",
    )
    assert by_info.truncated.tolist() == [True, False, False] and by_info.terminated.tolist() == [False, True, False]
    # ppo_dict's fields
    ours = protocol.parse_step_reply(
        {
            "type": "step",
            "obs": obs,
            "reward": [0] * 3,
            "done": [False, True, True],
            "truncated": [False, True, False],
            "terminal_obs": [None, {"obs": [9, 9]}, {"obs": [8, 8]}],
        },
        3,
        info.observation_space,
        "t",
    )
    assert ours.truncated.tolist() == [False, True, False] and ours.terminated.tolist() == [False, False, True]
    assert ours.terminal_obs["obs"][1:].tolist() == [[9, 9], [8, 8]]
    with pytest.raises(GodotProtocolError, match=r"agents \[1\] ended an episode but their 'terminal_obs' is null"):
        protocol.parse_step_reply(
            {"type": "step", "obs": obs, "reward": [0] * 3, "done": [False, True, False], "terminal_obs": [None, None, None]},
            3,
            info.observation_space,
            "t",
        )


# ---------------------------------------------------------------------------------------- the real engine
@needs_godot
def test_raw_protocol_round_trip_with_the_demo(no_leftover_godot):
    """Speak the protocol by hand to the real game: handshake, env_info, reset, steps, close."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    listener.settimeout(30)
    port = listener.getsockname()[1]
    proc = subprocess.Popen(
        [
            DEFAULT_BINARY,
            "--path",
            str(DEMO_PROJECT),
            f"--port={port}",
            "--env_seed=3",
            "--speedup=1000",
            "--action_repeat=4",
            "--max_steps=5",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        conn, _ = listener.accept()
        conn.settimeout(30)
        protocol.send_message(conn, protocol.handshake_message())
        protocol.send_message(conn, protocol.env_info_request())
        info = protocol.recv_message(conn)
        assert info == {
            "type": "env_info",
            "n_agents": 4,
            "observation_space": [{"obs": {"size": [4], "space": "box"}}] * 4,
            "action_space": [{"move": {"size": 2, "action_type": "continuous"}}] * 4,
            "agent_policy_names": ["shared_policy"] * 4,
        }
        protocol.send_message(conn, protocol.reset_message(seed=11))
        reset = protocol.recv_message(conn)
        assert reset["type"] == "reset" and len(reset["obs"]) == 4 and all(len(o["obs"]) == 4 for o in reset["obs"])
        for step in range(1, 6):
            protocol.send_message(conn, protocol.action_message([{"move": [0.0, 0.0]}] * 4))
            reply = protocol.recv_message(conn)
            assert reply["type"] == "step" and reply["reward"] == [0, 0, 0, 0]
            assert reply["done"] == reply["truncated"] == [step == 5] * 4  # standing still: the time limit ends it
        # the agents stood still, so each terminal obs is its reset obs; the game auto-reset them
        assert reply["terminal_obs"] == reset["obs"] and reply["obs"] != reset["obs"]
        protocol.send_message(conn, protocol.close_message())
        assert proc.wait(10) == 0
        conn.close()
    finally:
        listener.close()
        proc.kill()
        proc.wait()
