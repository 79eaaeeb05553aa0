"""GodotGame: one headless Godot process: spaces, auto-reset, seeds, crashes, hangs, no orphans, plugin-style games."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
from gymnasium import spaces

from ppo_dict.envs.errors import GodotCrashedError, GodotNotFoundError, GodotTimeoutError
from ppo_dict.envs.godot.game import GodotGame
from tests.faults.lines import Lines
from tests.godot_helpers import PLUGIN_STYLE_GAME, needs_godot, process_state, toward_goal, wait_gone

ROOT = Path(__file__).resolve().parent.parent.parent


def test_missing_binary_names_the_package(no_leftover_godot):
    with pytest.raises(GodotNotFoundError) as err:
        GodotGame(binary="godot3-server-not-installed")
    assert str(err.value) == (
        "Godot binary 'godot3-server-not-installed' not found on PATH: install Godot 3's headless engine, the Debian "
        "package godot3-server (apt-get install godot3-server), or pass an exported game with --env_path"
    )
    with pytest.raises(
        GodotNotFoundError, match="exported Godot game '/nonexistent/game.x86_64' does not exist or is not executable"
    ):
        GodotGame(env_path="/nonexistent/game.x86_64")


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
    with pytest.raises(
        GodotCrashedError,
        match=r"Godot game '.*godot3-server --path .*demo' \(pid \d+, "
        r"port \d+\) failed during step \(killed by SIGKILL\)",
    ):
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
    with pytest.raises(
        GodotTimeoutError, match=r"did not connect to 127\.0\.0\.1:\d+ within 1\.5 s: does the game have a sync node"
    ):
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
    owner = subprocess.Popen(
        [sys.executable, "-c", code], cwd=ROOT, stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)}
    )
    try:
        godot_pid = int(Lines(owner).wait_for("", timeout=120))  # its first line, with a deadline (a game that never starts)
        assert process_state(godot_pid) not in (None, "Z")
        owner.kill()
        owner.wait()
        # a zombie is dead too: it waits for the reaper (pid 1 here) to collect it
        assert wait_gone(godot_pid), f"Godot {godot_pid} outlived its owner: state {process_state(godot_pid)}"
    finally:
        owner.kill()
        owner.wait()


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
