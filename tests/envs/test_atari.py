"""Atari games: each of our wrappers against sb3's own, the whole AtariWrapper + frame stack against
sb3's ``make_atari_env`` + ``VecFrameStack`` (real ROMs), and what a missing ale-py or ROM says."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from collections import Counter
from typing import Any, Callable

import ale_py  # noqa: F401  (registers the Atari ids for sb3's gym.make; ppo_dict imports it itself)
import gymnasium as gym
import numpy as np
import pytest
from stable_baselines3.common import atari_wrappers as sb3_atari
from stable_baselines3.common.env_util import make_atari_env as sb3_make_atari_env
from stable_baselines3.common.vec_env import VecFrameStack

from ppo_dict.envs import AtariOptions, make_env, resolve_env_name
from ppo_dict.envs import atari
from tests.conftest import ROOT

BREAKOUT = "BreakoutNoFrameskip-v4"  # FIRE to start, 5 lives, rewards 1/4/7
ASTERIX = "AsterixNoFrameskip-v4"  # no FIRE, 3 lives, rewards of 50 and more (clipping shows)


def raw(game: str = BREAKOUT, **kwargs: Any) -> gym.Env:
    return gym.make(game, render_mode="rgb_array", **kwargs)


def assert_same_step(ours: tuple, theirs: tuple, what: str) -> None:
    obs, reward, terminated, truncated, info = ours
    assert np.array_equal(obs, theirs[0]) and obs.dtype == theirs[0].dtype and obs.shape == theirs[0].shape, f"{what}: obs"
    assert reward == theirs[1] and type(reward) is type(theirs[1]), f"{what}: reward {reward!r} != {theirs[1]!r}"
    assert (terminated, truncated) == theirs[2:4], f"{what}: ends {(terminated, truncated)} != {theirs[2:4]}"
    assert info == theirs[4], f"{what}: info {info} != {theirs[4]}"


def play_side_by_side(ours: gym.Env, theirs: gym.Env, steps: int, seed: int) -> Counter:
    """Random actions into both, reset both at every end; returns counts of what happened."""
    seen: Counter = Counter()
    first_ours, first_theirs = ours.reset(seed=seed), theirs.reset(seed=seed)
    assert np.array_equal(first_ours[0], first_theirs[0]) and first_ours[1] == first_theirs[1], "first reset"
    rng = np.random.default_rng(seed)
    for t in range(steps):
        action = int(rng.integers(ours.action_space.n))
        step = ours.step(action)
        assert_same_step(step, theirs.step(action), f"step {t}")
        seen["reward != sign"] += step[1] not in (-1.0, 0.0, 1.0)
        seen["reward != 0"] += step[1] != 0
        if step[2] or step[3]:
            seen["terminated" if step[2] else "truncated"] += 1
            again_ours, again_theirs = ours.reset(), theirs.reset()
            assert np.array_equal(again_ours[0], again_theirs[0]) and again_ours[1] == again_theirs[1], f"reset after step {t}"
    return seen


#: name: (our wrapper, sb3's, kwargs, raw env kwargs, steps)
WRAPPERS: dict[str, tuple[Callable, Callable, dict, dict, int]] = {
    "noop_reset": (atari.NoopResetEnv, sb3_atari.NoopResetEnv, {"noop_max": 30}, {"max_num_frames_per_episode": 60}, 400),
    # truncations at frame 203 end games at every position in the skip, so the stale max-pool frame shows
    "max_and_skip": (atari.MaxAndSkipEnv, sb3_atari.MaxAndSkipEnv, {"skip": 4}, {"max_num_frames_per_episode": 203}, 600),
    "episodic_life": (atari.EpisodicLifeEnv, sb3_atari.EpisodicLifeEnv, {}, {}, 2500),
    "fire_reset": (atari.FireResetEnv, sb3_atari.FireResetEnv, {}, {"max_num_frames_per_episode": 50}, 300),
    "warp_frame": (atari.WarpFrame, sb3_atari.WarpFrame, {"width": 84, "height": 84}, {}, 200),
    "warp_frame_not_square": (atari.WarpFrame, sb3_atari.WarpFrame, {"width": 40, "height": 52}, {}, 100),
    "clip_reward": (atari.ClipRewardEnv, sb3_atari.ClipRewardEnv, {}, {}, 1500),
    "sticky_action": (atari.StickyActionEnv, sb3_atari.StickyActionEnv, {"action_repeat_probability": 0.25}, {}, 500),
}


@pytest.mark.parametrize("name", list(WRAPPERS))
def test_each_wrapper_steps_as_sb3s(name: str) -> None:
    ours_cls, sb3_cls, kwargs, env_kwargs, steps = WRAPPERS[name]
    game = ASTERIX if name == "clip_reward" else BREAKOUT
    ours, theirs = ours_cls(raw(game, **env_kwargs), **kwargs), sb3_cls(raw(game, **env_kwargs), **kwargs)
    assert ours.observation_space == theirs.observation_space
    seen = play_side_by_side(ours, theirs, steps, seed=3)
    if env_kwargs:
        assert seen["truncated"] >= 2, seen
    if name == "episodic_life":  # lost lives (terminated, then a no-op reset) and at least one real game over
        assert seen["terminated"] >= 5 and ours.was_real_done is not None, seen
    if name == "clip_reward":  # Asterix scores 50 and more: every reward was clipped
        assert seen["reward != 0"] >= 3 and seen["reward != sign"] == 0, seen
    ours.close()
    theirs.close()


#: name: (game, AtariOptions, frame_stack, env kwargs)
OPTIONS = {
    "defaults": (BREAKOUT, AtariOptions(), 4, {"max_num_frames_per_episode": 700}),
    "no_fire_unclipped_full_games": (
        ASTERIX,
        AtariOptions(terminal_on_life_loss=False, clip_reward=False),
        4,
        {"max_num_frames_per_episode": 900},
    ),
    "sticky_no_noop_no_skip_small": (
        BREAKOUT,
        AtariOptions(noop_max=0, frame_skip=1, screen_size=64, action_repeat_probability=0.25),
        2,
        {"max_num_frames_per_episode": 120},
    ),
    "skip_3_no_stack": (ASTERIX, AtariOptions(frame_skip=3, noop_max=5), 1, {"max_num_frames_per_episode": 500}),
}


@pytest.mark.parametrize("name", list(OPTIONS))
def test_atari_env_is_sb3s_make_atari_env_with_vec_frame_stack(name: str) -> None:
    """Two of our envs against sb3's DummyVecEnv of two: observations, rewards, ends, terminal
    observations and the Monitor's episodes (beneath the wrappers), step for step."""
    game, opts, frame_stack, env_kwargs = OPTIONS[name]
    n_envs, seed = 2, 11
    spec = resolve_env_name(f"gym_{game}", atari=opts, frame_stack=frame_stack, kwargs=env_kwargs)
    ours = [make_env(spec) for _ in range(n_envs)]
    sb3 = sb3_make_atari_env(game, n_envs=n_envs, seed=seed, wrapper_kwargs=dataclasses.asdict(opts), env_kwargs=env_kwargs)
    if frame_stack > 1:
        sb3 = VecFrameStack(sb3, frame_stack)
    assert ours[0].observation_space == sb3.observation_space
    obs = sb3.reset()
    assert np.array_equal(obs, np.stack([env.reset(seed=seed + i)[0] for i, env in enumerate(ours)]))
    rng, seen = np.random.default_rng(0), Counter()
    for t in range(250):
        actions = rng.integers(sb3.action_space.n, size=n_envs)
        obs, rewards, dones, infos = sb3.step(actions)
        for i, env in enumerate(ours):
            mine, reward, terminated, truncated, info = env.step(actions[i])
            assert np.float32(reward) == rewards[i] and (terminated or truncated) == dones[i], f"step {t} env {i}"
            if dones[i]:
                assert np.array_equal(mine, infos[i]["terminal_observation"]), f"terminal obs, step {t} env {i}"
                assert {k: v for k, v in info.get("episode", {}).items() if k != "t"} == {
                    k: v for k, v in infos[i].get("episode", {}).items() if k != "t"
                }, f"episode, step {t} env {i}"
                seen["game over" if "episode" in info else "life lost"] += 1
                mine, _ = env.reset()
            assert np.array_equal(mine, obs[i]), f"obs, step {t} env {i}"
    assert seen["game over"] >= 1, seen
    if opts.terminal_on_life_loss:
        assert seen["life lost"] >= 1, seen
    sb3.close()


def _main_ppo(code_before: str, env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    """``python -m ppo_dict.main_ppo ARGS`` after ``code_before``, in its own process."""
    code = (
        f"{code_before}\nimport runpy, sys\nsys.argv = ['main_ppo', *{list(args)!r}]\n"
        "runpy.run_module('ppo_dict.main_ppo', run_name='__main__')\n"
    )
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": ROOT, **env},
    )


ARGS = (
    "--env",
    "gym_BreakoutNoFrameskip-v4",
    "--atari_wrapper",
    "True",
    "--frame_stack",
    "4",
    "--model",
    "cnn",
    "--n_envs",
    "2",
    "--num_workers",
    "2",
    "--total_timesteps",
    "64",
    "--n_steps",
    "32",
    "--batch_size",
    "32",
)


def test_missing_ale_py_names_the_package_before_anything_starts() -> None:
    proc = _main_ppo("import sys; sys.modules['ale_py'] = None  # as if not installed", {}, *ARGS)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert (
        "env='gym_BreakoutNoFrameskip-v4': Atari games need ale-py, which cannot be imported (import of ale_py halted; "
        "None in sys.modules); install ale-py: pip install ale-py (or pip install -e '.[atari]')"
    ) in proc.stderr


def test_missing_rom_names_the_package_before_anything_starts(tmp_path) -> None:
    proc = _main_ppo("", {"ALE_ROMS_DIR": str(tmp_path)}, *ARGS)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert (
        "env='gym_BreakoutNoFrameskip-v4': the ROM of BreakoutNoFrameskip-v4 cannot be loaded (FileNotFoundError: "
    ) in proc.stderr
    assert (
        f"put the ROM into ALE_ROMS_DIR={tmp_path}, or unset it to use the ROMs of ale-py: pip install ale-py"
    ) in proc.stderr


def test_names_and_options_are_checked() -> None:
    assert resolve_env_name("gym_ALE/Pong-v5").is_atari and not resolve_env_name("gym_CartPole-v1").is_atari
    spec = resolve_env_name("gym_ALE/Pong-v5", atari=AtariOptions())
    assert spec.notice.startswith("note: ALE/Pong-v5 already skips 4 frames per step; the AtariWrapper's frame skip 4 repeats")
    with pytest.raises(
        ValueError,
        match=r"--atari_wrapper applies sb3's AtariWrapper to Atari games from ale-py \(e.g. "
        r"gym_BreakoutNoFrameskip-v4\); CartPole-v1 is not one",
    ):
        resolve_env_name("gym_CartPole-v1", atari=AtariOptions())
    with pytest.raises(gym.error.NameNotFound, match="Did you mean: `Breakout`"):
        resolve_env_name("gym_Breakot-v4")
    with pytest.raises(ValueError, match="godot_demo is a Godot game, which sends its own observations: drop --atari_wrapper"):
        resolve_env_name("godot_demo", frame_stack=4)
