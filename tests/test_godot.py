"""Godot games: the wire protocol, the real headless engine running the demo game, faults, the pool.

Tests marked ``godot`` run ``godot3-server`` (Debian package godot3-server) and skip, saying so,
only when it is not installed; the protocol tests need no engine.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import torch
import pytest
from gymnasium import spaces

from ppo_dict.envs.godot import protocol
from ppo_dict.envs.errors import GodotCrashedError, GodotNotFoundError, GodotProtocolError, GodotTimeoutError
from ppo_dict.envs.godot.game import DEFAULT_BINARY, DEMO_PROJECT, GodotGame
from ppo_dict.envs.godot.spec import godot_spec
from ppo_dict.envs.godot.protocol import ActionMapping, ConnectionClosed, EnvInfo
from ppo_dict.config import Config
from ppo_dict.vec.runner import env_seeds
from ppo_dict.logger import Logger
from ppo_dict.ppo import PPO
from ppo_dict.storage import RolloutStorage
from ppo_dict.vec.godot import GodotBackend, GodotRunner
from ppo_dict.vec.in_process import InProcessEnvPool

ROOT = Path(__file__).resolve().parent.parent
needs_godot = pytest.mark.skipif(
    shutil.which(DEFAULT_BINARY) is None, reason=f"{DEFAULT_BINARY} is not installed (apt-get install godot3-server)"
)


# ---------------------------------------------------------------------------------------- helpers
def godot_pool(spec, n_envs: int, n_steps: int) -> InProcessEnvPool:
    """``n_envs`` columns of the games ``spec`` describes, stepped in this process."""
    return InProcessEnvPool(GodotBackend.probe(spec), n_envs, n_steps)


def process_state(pid: int) -> str | None:
    """The /proc state letter of ``pid`` (``Z``: zombie), or None when no such process exists."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return None


def godot_children() -> list[int]:
    """Live (non-zombie) Godot processes whose parent is this test process, from /proc."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        comm = stat[stat.index("(") + 1 : stat.rindex(")")]
        state, ppid = stat.rsplit(")", 1)[1].split()[:2]
        if comm.startswith("godot") and int(ppid) == os.getpid() and state != "Z":
            found.append(int(entry))
    return found


def wait_gone(pid: int, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process_state(pid) in (None, "Z"):
            return True
        time.sleep(0.02)
    return False


@pytest.fixture
def no_leftover_godot():
    """Fails the test if it leaves a Godot process of ours behind."""
    before = set(godot_children())
    yield
    left = set(godot_children()) - before
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    assert not left, f"Godot processes left running: {sorted(left)}"


def toward_goal(obs: np.ndarray) -> np.ndarray:
    """The demo's greedy policy: velocity along (goal - position), scaled to reach the edge of [-1, 1]."""
    delta = obs[:, 2:4]
    return np.clip(delta / np.maximum(np.abs(delta).max(axis=1, keepdims=True), 1e-6), -1, 1).astype(np.float32)


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
        {"obs": {"space": "box", "size": [4]}, "camera_2d": {"space": "box", "size": [8, 6, 3]}, "room": {"space": "discrete", "size": 5}}
    )
    assert space["obs"] == spaces.Box(-1.0, 1.0, (4,), np.float32)
    assert space["camera_2d"] == spaces.Box(0, 255, (8, 6, 3), np.uint8)
    assert space["room"] == spaces.Discrete(5)
    image = np.arange(8 * 6 * 3, dtype=np.uint8).reshape(8, 6, 3)
    obs = protocol.decode_obs(
        [{"obs": [1, 2, 3, 4], "camera_2d": image.tobytes().hex(), "room": 3}] * 2, space, "test"
    )
    assert obs["obs"].dtype == np.float32 and obs["obs"].shape == (2, 4)
    np.testing.assert_array_equal(obs["camera_2d"][1], image)
    assert obs["room"].shape == (2, 1) and obs["room"][0, 0] == 3
    with pytest.raises(GodotProtocolError, match="agent 1's observation 'obs' does not fit"):
        protocol.decode_obs([{"obs": [1, 2, 3, 4], "camera_2d": image.tobytes().hex(), "room": 0}, {"obs": [1, 2], "camera_2d": image.tobytes().hex(), "room": 0}], space, "test")
    with pytest.raises(GodotProtocolError, match="space .* is not supported: use 'box' or 'discrete'"):
        protocol.observation_space_from_godot({"x": {"space": "tuple", "size": 2}})


def test_action_mappings():
    cont = ActionMapping.from_godot({"move": {"action_type": "continuous", "size": 2}, "turn": {"action_type": "continuous", "size": 1}})
    assert cont.space == spaces.Box(-1.0, 1.0, (3,), np.float32)
    assert cont.to_godot(np.array([[0.5, -0.25, 1.0]])) == [{"move": [0.5, -0.25], "turn": [1.0]}]

    joint = ActionMapping.from_godot({"x": {"action_type": "discrete", "size": 3}, "y": {"action_type": "discrete", "size": 2}})
    assert joint.space == spaces.Discrete(6)
    # the first key varies slowest: a = x * 2 + y
    assert joint.to_godot(np.array([0, 1, 5])) == [{"x": 0, "y": 0}, {"x": 0, "y": 1}, {"x": 2, "y": 1}]
    with pytest.raises(GodotProtocolError, match=r"discrete actions must be in \[0, 6\)"):
        joint.to_godot(np.array([6]))

    mixed = ActionMapping.from_godot({"move": {"action_type": "continuous", "size": 2}, "jump": {"action_type": "discrete", "size": 2}})
    assert mixed.space == spaces.Box(-1.0, 1.0, (3,), np.float32)
    assert mixed.to_godot(np.array([[0.1, 0.2, 0.3], [0.0, 0.0, -0.3]])) == [{"move": [0.1, 0.2], "jump": 1}, {"move": [0.0, 0.0], "jump": 0}]
    with pytest.raises(GodotProtocolError, match=r"discrete action keys \{'gear': 4\} mixed with continuous ones"):
        ActionMapping.from_godot({"move": {"action_type": "continuous", "size": 2}, "gear": {"action_type": "discrete", "size": 4}})
    with pytest.raises(GodotProtocolError, match="make 8100 joint actions, more than 4096"):
        ActionMapping.from_godot({k: {"action_type": "discrete", "size": 90} for k in "ab"})


def test_env_info_and_step_reply_parsing():
    one = {"obs": {"space": "box", "size": [2]}}
    act = {"move": {"action_type": "continuous", "size": 2}}
    # older plugins: one dict for every agent
    info = EnvInfo.from_message({"type": "env_info", "n_agents": 3, "observation_space": one, "action_space": act})
    assert info.n_agents == 3 and info.policy_names == ("shared_policy",) * 3
    with pytest.raises(GodotProtocolError, match="agent 1's spaces differ from agent 0's"):
        EnvInfo.from_message({"type": "env_info", "n_agents": 2, "observation_space": [one, {"obs": {"space": "box", "size": [3]}}], "action_space": act})

    obs = [{"obs": [0, 0]}, {"obs": [1, 1]}, {"obs": [2, 2]}]
    # plugin game: no truncated, no terminal_obs -> done is terminated
    plain = protocol.parse_step_reply({"type": "step", "obs": obs, "reward": [1, 2, 3], "done": [False, True, False]}, 3, info.observation_space, "t")
    assert plain.terminated.tolist() == [False, True, False] and not plain.truncated.any() and plain.terminal_obs is None
    assert plain.rewards.dtype == np.float32
    # the time-limit flag in a plugin's info
    by_info = protocol.parse_step_reply(
        {"type": "step", "obs": obs, "reward": [0] * 3, "done": [True, True, False], "info": [{"TimeLimit.truncated": True}, {}, {}]}, 3, info.observation_space, "t"
    )
    assert by_info.truncated.tolist() == [True, False, False] and by_info.terminated.tolist() == [False, True, False]
    # ppo_dict's fields
    ours = protocol.parse_step_reply(
        {"type": "step", "obs": obs, "reward": [0] * 3, "done": [False, True, True], "truncated": [False, True, False],
         "terminal_obs": [None, {"obs": [9, 9]}, {"obs": [8, 8]}]}, 3, info.observation_space, "t",
    )
    assert ours.truncated.tolist() == [False, True, False] and ours.terminated.tolist() == [False, False, True]
    assert ours.terminal_obs["obs"][1:].tolist() == [[9, 9], [8, 8]]
    with pytest.raises(GodotProtocolError, match=r"agents \[1\] ended an episode but their 'terminal_obs' is null"):
        protocol.parse_step_reply(
            {"type": "step", "obs": obs, "reward": [0] * 3, "done": [False, True, False], "terminal_obs": [None, None, None]}, 3, info.observation_space, "t"
        )


def test_missing_binary_names_the_package(no_leftover_godot):
    with pytest.raises(GodotNotFoundError) as err:
        GodotGame(binary="godot3-server-not-installed")
    assert str(err.value) == (
        "Godot binary 'godot3-server-not-installed' not found on PATH: install Godot 3's headless engine, the Debian "
        "package godot3-server (apt-get install godot3-server), or pass an exported game with --env_path"
    )
    with pytest.raises(GodotNotFoundError, match="exported Godot game '/nonexistent/game.x86_64' does not exist or is not executable"):
        GodotGame(env_path="/nonexistent/game.x86_64")


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
        [DEFAULT_BINARY, "--path", str(DEMO_PROJECT), f"--port={port}", "--env_seed=3", "--speedup=1000", "--action_repeat=4", "--max_steps=5"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        conn, _ = listener.accept()
        conn.settimeout(30)
        protocol.send_message(conn, protocol.handshake_message())
        protocol.send_message(conn, protocol.env_info_request())
        info = protocol.recv_message(conn)
        assert info == {
            "type": "env_info", "n_agents": 4,
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


@needs_godot
@pytest.mark.parametrize(
    "game_args, obs_space, action_space",
    [
        ({}, spaces.Dict({"obs": spaces.Box(-1, 1, (4,), np.float32)}), spaces.Box(-1, 1, (2,), np.float32)),
        (
            {"action_type": "discrete", "image_size": 8, "n_agents": 3},
            spaces.Dict({"2d": spaces.Box(0, 255, (8, 8, 1), np.uint8), "obs": spaces.Box(-1, 1, (4,), np.float32)}),
            spaces.Discrete(9),
        ),
    ],
)
def test_game_spaces_and_close(no_leftover_godot, game_args, obs_space, action_space):
    game = GodotGame(game_args=game_args)
    pid = game.pid
    assert process_state(pid) not in (None, "Z")
    assert game.observation_space == obs_space and game.action_space == action_space
    obs = game.reset(seed=0)
    assert set(obs) == set(obs_space.spaces) and obs["obs"].shape == (game.n_agents, 4)
    if "2d" in obs:
        # one 255 pixel (the agent) and at most one 128 (the goal, unless the agent covers it)
        for image in obs["2d"]:
            assert (image == 255).sum() == 1 and (image == 128).sum() <= 1 and (image > 0).sum() <= 2
    reply = game.step(np.zeros(game.n_agents, np.int64) if game_args else np.zeros((4, 2), np.float32))
    assert reply.rewards.shape == (game.n_agents,) and reply.rewards.dtype == np.float32
    game.close()
    assert process_state(pid) is None  # exited and reaped
    with pytest.raises(GodotCrashedError, match="is closed"):
        game.reset()


@needs_godot
def test_discrete_joint_action_moves_as_mapped(no_leftover_godot):
    with GodotGame(game_args={"action_type": "discrete", "n_agents": 2}, action_repeat=1) as game:
        before = game.reset(seed=3)["obs"]
        # joint action a = move_x * 3 + move_y; 0 = (-1, -1), 7 = (+1, stay)
        after = game.step(np.array([0, 7]))
        if not (after.terminated | after.truncated).any():
            step = 2.0 / 60.0  # SPEED x DT of one physics frame
            np.testing.assert_allclose(after.obs["obs"][:, :2] - before[:, :2], [[-step, -step], [step, 0.0]], atol=1e-5)


@needs_godot
def test_auto_reset_terminated_and_truncated(no_leftover_godot):
    with GodotGame(game_args={"max_steps": 40}) as game:
        obs = game.reset(seed=1)["obs"]
        ended_terminated = ended_truncated = 0
        for _ in range(200):
            reply = game.step(toward_goal(obs))
            for a in np.flatnonzero(reply.terminated):
                ended_terminated += 1
                # reached the goal: the terminal obs is within the goal radius (|delta| = distance/2)
                assert np.linalg.norm(reply.terminal_obs["obs"][a, 2:]) * 2 < 0.1 + 1e-5
                # and the next obs starts a new episode at least MIN_START_DISTANCE away
                assert np.linalg.norm(reply.obs["obs"][a, 2:]) * 2 >= 0.5 - 1e-5
            ended_truncated += int(reply.truncated.sum())
            obs = reply.obs["obs"]
        assert ended_terminated > 20 and ended_truncated == 0  # greedy always reaches the goal in time
        obs = game.reset(seed=1)["obs"]
        for step in range(40):
            reply = game.step(np.zeros((4, 2), np.float32))
            assert reply.truncated.all() == (step == 39) and not reply.terminated.any()
        np.testing.assert_array_equal(reply.terminal_obs["obs"], obs)


@needs_godot
def test_seeds_make_the_game_deterministic(no_leftover_godot):
    def trajectory(game: GodotGame, seed: int) -> list[np.ndarray]:
        rng = np.random.default_rng(0)
        out = [game.reset(seed=seed)["obs"]]
        for _ in range(60):
            reply = game.step(rng.uniform(-1, 1, (4, 2)).astype(np.float32))
            out += [reply.obs["obs"], reply.rewards, reply.terminated, reply.truncated]
        return out

    with GodotGame(seed=5) as a, GodotGame(seed=99) as b:
        first = trajectory(a, 7)
        for x, y in zip(first, trajectory(b, 7)):  # another process, other launch seed: same reset seed wins
            np.testing.assert_array_equal(x, y)
        for x, y in zip(first, trajectory(a, 7)):  # the same process again
            np.testing.assert_array_equal(x, y)
        assert not np.array_equal(first[0], trajectory(a, 8)[0])
        # agent i is seeded with seed + i: agent 1 under seed 7 starts where agent 0 does under seed 8
        np.testing.assert_array_equal(a.reset(seed=7)["obs"][1], a.reset(seed=8)["obs"][0])


@needs_godot
def test_killed_godot_gives_a_clear_error(no_leftover_godot):
    game = GodotGame()
    game.reset(seed=0)
    os.kill(game.pid, signal.SIGKILL)
    with pytest.raises(GodotCrashedError, match=r"Godot game '.*godot3-server --path .*demo' \(pid \d+, port \d+\) failed during step \(killed by SIGKILL\)"):
        game.step(np.zeros((4, 2), np.float32))
    assert game.closed and process_state(game.pid) is None


@needs_godot
def test_crash_at_start_shows_the_game_output(no_leftover_godot):
    with pytest.raises(GodotCrashedError) as err:
        GodotGame(game_args={"n_agents": 0})
    assert "exited (exit code 2) before connecting" in str(err.value)
    assert "demo game: invalid launch flags: --n_agents=0: must be at least 1" in str(err.value)


@needs_godot
def test_game_that_never_connects_times_out(tmp_path, no_leftover_godot):
    (tmp_path / "project.godot").write_text('config_version=4\n[application]\nrun/main_scene="res://idle.tscn"\n')
    (tmp_path / "idle.tscn").write_text('[gd_scene format=2]\n\n[node name="Idle" type="Node"]\n')
    start = time.monotonic()
    with pytest.raises(GodotTimeoutError, match=r"did not connect to 127\.0\.0\.1:\d+ within 1\.5 s: does the game have a sync node"):
        GodotGame(project=tmp_path, connect_timeout=1.5)
    assert time.monotonic() - start < 10


@needs_godot
def test_hung_game_times_out_and_is_killed(no_leftover_godot):
    game = GodotGame(step_timeout=1.0)
    game.reset(seed=0)
    os.kill(game.pid, signal.SIGSTOP)  # frozen, connection still open
    with pytest.raises(GodotTimeoutError, match=r"did not answer step within 1 s \(step_timeout\); it was killed"):
        game.step(np.zeros((4, 2), np.float32))
    assert process_state(game.pid) is None


@needs_godot
def test_owner_death_kills_godot(no_leftover_godot):
    """SIGKILL of the process that launched the game: the kernel kills the game (PR_SET_PDEATHSIG)."""
    code = textwrap.dedent(
        """
        import os, sys, time
        from ppo_dict.envs.godot.game import GodotGame
        game = GodotGame()
        print(game.pid, flush=True)
        time.sleep(60)
        """
    )
    owner = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        godot_pid = int(owner.stdout.readline())
        assert process_state(godot_pid) not in (None, "Z")
        owner.kill()
        owner.wait()
        # a zombie is dead too: it waits for the reaper (pid 1 here) to collect it
        assert wait_gone(godot_pid), f"Godot {godot_pid} outlived its owner: state {process_state(godot_pid)}"
    finally:
        owner.kill()
        owner.wait()


@needs_godot
def test_pool_writes_storage_like_the_games(no_leftover_godot):
    """Two games x 4 agents into storage, against the same games stepped directly."""
    spec = godot_spec(game_args={"max_steps": 12})
    pool = godot_pool(spec, n_envs=8, n_steps=30)
    s = pool.storage
    assert pool.num_envs == 8 and len(pool.runner.games) == 2 and pool.observation_space == spaces.Dict({"obs": spaces.Box(-1, 1, (4,), np.float32)})
    references = [GodotGame(game_args={"max_steps": 12}), GodotGame(game_args={"max_steps": 12})]
    try:
        pool.reset(seed=10)
        ref_obs = np.concatenate([g.reset(seed=10 + 4 * i)["obs"] for i, g in enumerate(references)])
        np.testing.assert_array_equal(s.env_obs["obs"][0], ref_obs)
        rng = np.random.default_rng(1)
        returns = np.zeros(8)
        ends = 0
        for t in range(30):
            s.env_actions[...] = rng.uniform(-1, 1, (8, 2))
            pool.step(t)
            replies = [g.step(s.env_actions[4 * i : 4 * i + 4]) for i, g in enumerate(references)]
            np.testing.assert_array_equal(s.env_obs["obs"][t + 1], np.concatenate([r.obs["obs"] for r in replies]))
            np.testing.assert_array_equal(s.env_rewards[t], np.concatenate([r.rewards for r in replies]))
            np.testing.assert_array_equal(s.truncated[t], np.concatenate([r.truncated for r in replies]))
            returns += s.env_rewards[t]
            for i in np.flatnonzero(s.dones_at(t)):
                ends += 1
                terminal = replies[i // 4].terminal_obs["obs"][i % 4]
                np.testing.assert_array_equal(s.env_terminal_obs["obs"][i], terminal)
                assert s.episode_return[i] == pytest.approx(returns[i], abs=1e-5)
                returns[i] = 0
        assert ends >= 16  # every column hits the 12-step limit at least twice in 30 steps
        pids = [g.pid for g in pool.runner.games]
    finally:
        pool.close()
        for g in references:
            g.close()
    assert all(process_state(pid) is None for pid in pids)


@needs_godot
def test_pool_rejects_n_envs_that_split_a_game(no_leftover_godot):
    with pytest.raises(ValueError, match=r"6 envs for godot_demo: each Godot process runs 4 agents, so the envs of a pool \(or of one worker\) must be a positive multiple of 4"):
        godot_pool(godot_spec(), n_envs=6, n_steps=8)


def small_config(seed: int, total_timesteps: int, **overrides: object) -> Config:
    settings = dict(
        env="godot_demo", n_envs=8, num_workers=0, seed=seed, total_timesteps=total_timesteps, n_steps=128,
        batch_size=256, n_epochs=10, gamma=0.98, device="cpu", verbose=0,
    )
    return Config(**{**settings, **overrides})


@needs_godot
def test_ppo_trains_on_the_pool_and_is_deterministic(no_leftover_godot):
    """PPO on a Godot in-process pool runs, sees episodes end, and two runs with one seed agree bit for bit."""

    def run() -> tuple[PPO, list[torch.Tensor]]:
        cfg = small_config(seed=3, total_timesteps=2 * 8 * 32, n_steps=32, batch_size=64, n_epochs=2)
        pool = godot_pool(godot_spec(seed=3, game_args={"max_steps": 20}), cfg.n_envs, cfg.n_steps)
        try:
            model = PPO(cfg, pool, Logger(verbose=0)).learn()
        finally:
            pool.close()
        return model, [p.detach().clone() for p in model.policy.parameters()]

    first, first_params = run()
    assert first.num_timesteps == 512 and len(first.ep_info_buffer) >= 16
    assert all(e["l"] <= 20 for e in first.ep_info_buffer)
    second, second_params = run()
    assert [e["r"] for e in first.ep_info_buffer] == [e["r"] for e in second.ep_info_buffer]
    for a, b in zip(first_params, second_params):
        assert torch.equal(a, b)


def assert_learns_the_demo(cfg: Config, pool) -> None:
    """Train on ``pool`` (closed after); the deterministic return on 100 evaluation episodes (games seeded
    apart from training) must go from ~0 (< 2, reaching the goal < 10%) to > 10 (reaching it > 50%)."""
    from benchmarks.bench_godot import evaluate
    from ppo_dict.evaluation import EVAL_SEED_OFFSET

    try:
        model = PPO(cfg, pool, Logger(verbose=0))
        before = evaluate(model.policy, {}, 100, EVAL_SEED_OFFSET)
        model.learn()
        after = evaluate(model.policy, {}, 100, EVAL_SEED_OFFSET)
    finally:
        pool.close()
    assert before["return"] < 2.0 and before["success"] < 0.1, before
    assert after["return"] > 10.0 and after["success"] > 0.5, after


@needs_godot
@pytest.mark.slow
def test_ppo_learns_the_demo(no_leftover_godot):
    """About 40 s: 150k agent steps take the deterministic return from ~0 to ~12 (the greedy optimum)."""
    cfg = small_config(seed=0, total_timesteps=150_000)
    assert_learns_the_demo(cfg, godot_pool(godot_spec(seed=0), cfg.n_envs, cfg.n_steps))


PLUGIN_STYLE_GAME = '''#!{python}
"""Replies as a Godot RL Agents plugin game does: one space dict for all agents, no "truncated",
no "terminal_obs", done every 3rd step (the game resets the agent on a later frame)."""
import json, socket, struct, sys
port = int([a for a in sys.argv if a.startswith("--port=")][0].split("=")[1])
conn = socket.create_connection(("127.0.0.1", port))
def recv():
    def exact(n):
        data = b""
        while len(data) < n:
            data += conn.recv(n - len(data))
        return data
    return json.loads(exact(struct.unpack("<I", exact(4))[0]))
def send(message):
    body = json.dumps(message).encode()
    conn.sendall(struct.pack("<I", len(body)) + body)
assert recv()["type"] == "handshake"
assert recv()["type"] == "env_info"
send({{"type": "env_info", "n_agents": 2, "observation_space": {{"obs": {{"space": "box", "size": [1]}}}},
      "action_space": {{"jump": {{"action_type": "discrete", "size": 2}}, "move": {{"action_type": "continuous", "size": 1}}}}}})
steps = 0
while True:
    message = recv()
    if message["type"] == "reset":
        steps = 0
        send({{"type": "reset", "obs": [{{"obs": [0.0]}}, {{"obs": [0.5]}}]}})
    elif message["type"] == "action":
        steps += 1
        a = message["action"]
        send({{"type": "step", "obs": [{{"obs": [a[i]["move"][0] + a[i]["jump"]]}} for i in range(2)], "reward": [1.0, 2.0],
              "done": [steps % 3 == 0, False], "info": [{{}}, {{"TimeLimit.truncated": steps % 3 == 0}}]}})
    elif message["type"] == "close":
        sys.exit(0)
'''


def test_plugin_style_exported_game(tmp_path, no_leftover_godot):
    """An exported game (--env_path) that replies as plugin games do; needs no Godot engine."""
    game_path = tmp_path / "plugin_game.x86_64"
    game_path.write_text(PLUGIN_STYLE_GAME.format(python=sys.executable))
    game_path.chmod(0o755)
    with GodotGame(env_path=game_path) as game:
        assert game.n_agents == 2 and game.action_space == spaces.Box(-1, 1, (2,), np.float32)  # jump (binary) + move
        game.reset(seed=1)
        for step in range(1, 7):
            reply = game.step(np.array([[0.5, 0.25], [-0.5, -0.25]], np.float32))
            # "jump" > 0 -> 1; obs = move + jump
            np.testing.assert_allclose(reply.obs["obs"][:, 0], [1.25, -0.25])
            ended = step % 3 == 0
            # a plugin game's done is terminated; its info can mark a time limit
            assert reply.terminated.tolist() == [ended, False] and reply.truncated.tolist() == [False, ended]
            if ended:  # no terminal_obs sent: the reported obs is the episode's last
                np.testing.assert_array_equal(reply.terminal_obs["obs"], reply.obs["obs"])
            else:
                assert reply.terminal_obs is None
        pid = game.pid
    assert process_state(pid) is None


@needs_godot
def test_runner_writes_only_its_block_of_columns(no_leftover_godot):
    """A worker's view: one game behind columns 4..7 of 8, seeded as the in-process pool seeds them."""
    spec = godot_spec()
    pool = godot_pool(spec, n_envs=8, n_steps=4)
    storage = RolloutStorage(pool.observation_space, pool.action_space, n_steps=4, n_envs=8)
    runner = GodotRunner(spec, range(4, 8), storage)
    try:
        runner.open()
        pool.reset(seed=2)
        runner.reset(env_seeds(2, 8))
        storage.env_obs["obs"][:, :4] = np.nan
        for t in range(4):
            pool.storage.env_actions[...] = storage.env_actions[...] = np.full((8, 2), 0.3 * (t - 1), np.float32)
            pool.step(t)
            runner.step(t)
        np.testing.assert_array_equal(storage.env_obs["obs"][:, 4:], pool.storage.env_obs["obs"][:, 4:])
        np.testing.assert_array_equal(storage.env_rewards[:, 4:], pool.storage.env_rewards[:, 4:])
        assert np.isnan(storage.env_obs["obs"][:, :4]).all() and not storage.env_rewards[:, :4].any()
        assert runner.active == (4, "step")
    finally:
        pool.close()
        runner.close()
