"""Atari games from ale-py, with sb3's ``AtariWrapper`` preprocessing (``--atari_wrapper True``).

Each wrapper here mirrors the sb3 wrapper of the same name (``stable_baselines3/common/
atari_wrappers.py``, 2.9.2) call for call, because every call to the emulator and to its RNG
shows in the frames: the same noop count drawn from the game's ``np_random``, the same frames
max-pooled (including a stale one when a game ends early in a skip), the same no-op step after a
lost life. ``tests/envs/test_atari.py`` steps each against sb3's own; sb3 is a test-only
dependency and is not imported here.

:func:`make_atari_env` builds what sb3's ``make_atari_env`` builds for one env:
``gym.make(id, render_mode="rgb_array")``, then the episode monitor (sb3's ``Monitor``, beneath the
training-only wrappers: ``envs.monitor``), then the ``AtariWrapper`` chain. Frame stacking comes
last (``envs.frame_stack``), as sb3's ``VecFrameStack`` does.
"""

from __future__ import annotations

import importlib
import os
import re
from typing import Any, SupportsFloat

import cv2
import gymnasium as gym
import numpy as np
from gymnasium import spaces

from .errors import AtariUnavailableError
from .monitor import EpisodeMonitor
from .spec import ALE_MODULE, AtariOptions, is_atari_entry

#: what to install, in every message about a missing ale-py or ROM
INSTALL = "ale-py: pip install ale-py (or pip install -e '.[atari]'); its wheels (ale-py >= 0.9) ship the game ROMs"
#: ids that name Atari games even before ale_py registered them: the ALE namespace, v0/v4 variants
ATARI_NAME = re.compile(r"^ALE/|NoFrameskip-v\d+$|Deterministic-v\d+$")
#: ids that may be Atari games (gym's v0/v4 versions): an unknown one gets the install hint too
MAYBE_ATARI_NAME = re.compile(r"-v[04]$")


def import_ale() -> None:
    """Import ale_py, which registers every Atari id with gymnasium; or say what to install."""
    try:
        importlib.import_module(ALE_MODULE)
    except ImportError as exc:
        raise AtariUnavailableError(f"Atari games need ale-py, which cannot be imported ({exc}); install {INSTALL}") from exc


def check_atari_options(gym_id: str, opts: AtariOptions) -> str:
    """Refuse an env sb3's AtariWrapper cannot wrap; returns a notice (``""`` when none is due)."""
    spec = gym.spec(gym_id)
    if not is_atari_entry(spec.entry_point):
        raise ValueError(
            f"--atari_wrapper applies sb3's AtariWrapper to Atari games from ale-py (e.g. "
            f"gym_BreakoutNoFrameskip-v4); {gym_id} is not one (entry point {spec.entry_point})"
        )
    skip = spec.kwargs.get("frameskip", 1)
    if opts.frame_skip > 1 and skip != 1:
        return (
            f"note: {gym_id} already skips {skip} frames per step; the AtariWrapper's frame skip {opts.frame_skip} "
            f"repeats each action {opts.frame_skip} times on top (sb3's wrapper expects *NoFrameskip-v4 ids)"
        )
    return ""


def make_ale_env(gym_id: str, kwargs: dict[str, Any]) -> gym.Env:
    """``gym.make`` of an Atari game as sb3's ``make_vec_env`` makes it (``render_mode="rgb_array"``),
    with a missing or damaged ROM reported with what to install."""
    import_ale()
    import ale_py

    ale_py.ALEInterface.setLoggerMode(ale_py.LoggerMode.Error)  # no ALE banner per env (in every worker)
    try:
        return gym.make(gym_id, **{"render_mode": "rgb_array", **kwargs})
    except (OSError, ValueError) as exc:  # ale_py.roms: FileNotFoundError, NotADirectoryError, OSError (md5)
        if "rom" not in str(exc).lower() and not isinstance(exc, (FileNotFoundError, NotADirectoryError)):
            raise
        roms_dir = os.environ.get("ALE_ROMS_DIR")
        fix = f"put the ROM into ALE_ROMS_DIR={roms_dir}, or unset it to use the ROMs of " if roms_dir else "reinstall "
        raise AtariUnavailableError(
            f"the ROM of {gym_id} cannot be loaded ({type(exc).__name__}: {exc}): {fix}{INSTALL}"
        ) from exc


def make_atari_env(gym_id: str, kwargs: dict[str, Any], opts: AtariOptions) -> gym.Env:
    """One env of sb3's ``make_atari_env(gym_id, wrapper_kwargs=opts, env_kwargs=kwargs)``."""
    cv2.ocl.setUseOpenCL(False)  # as sb3's atari_wrappers sets it (at import there; here when an env is made)
    return wrap_atari(EpisodeMonitor(make_ale_env(gym_id, kwargs)), opts)


def wrap_atari(env: gym.Env, opts: AtariOptions) -> gym.Env:
    """sb3 ``AtariWrapper.__init__``: the same wrappers, in the same order, under the same conditions."""
    if opts.action_repeat_probability > 0.0:
        env = StickyActionEnv(env, opts.action_repeat_probability)
    if opts.noop_max > 0:
        env = NoopResetEnv(env, noop_max=opts.noop_max)
    if opts.frame_skip > 1:  # frame_skip=1 is no frame skip
        env = MaxAndSkipEnv(env, skip=opts.frame_skip)
    if opts.terminal_on_life_loss:
        env = EpisodicLifeEnv(env)
    if "FIRE" in env.unwrapped.get_action_meanings():
        env = FireResetEnv(env)
    env = WarpFrame(env, width=opts.screen_size, height=opts.screen_size)
    if opts.clip_reward:
        env = ClipRewardEnv(env)
    return env


def _action_meanings(env: gym.Env) -> list[str]:
    return env.unwrapped.get_action_meanings()


class StickyActionEnv(gym.Wrapper):
    """Repeat the previous action with probability ``action_repeat_probability`` (sb3 ``StickyActionEnv``)."""

    def __init__(self, env: gym.Env, action_repeat_probability: float):
        super().__init__(env)
        if _action_meanings(env)[0] != "NOOP":
            raise ValueError(f"sticky actions need action 0 to be NOOP, got {_action_meanings(env)[0]}")
        self.action_repeat_probability = action_repeat_probability

    def reset(self, **kwargs: Any):
        self._sticky_action = 0  # NOOP
        return self.env.reset(**kwargs)

    def step(self, action: int):
        if self.np_random.random() >= self.action_repeat_probability:  # the game's own RNG, as sb3
            self._sticky_action = action
        return self.env.step(self._sticky_action)


class NoopResetEnv(gym.Wrapper):
    """Start each game with 1..``noop_max`` no-ops, drawn from the game's RNG (sb3 ``NoopResetEnv``)."""

    def __init__(self, env: gym.Env, noop_max: int = 30):
        super().__init__(env)
        if _action_meanings(env)[0] != "NOOP":
            raise ValueError(f"noop reset needs action 0 to be NOOP, got {_action_meanings(env)[0]}")
        self.noop_max = noop_max
        self.noop_action = 0

    def reset(self, **kwargs: Any):
        self.env.reset(**kwargs)
        noops = self.unwrapped.np_random.integers(1, self.noop_max + 1)
        obs, info = np.zeros(0), {}
        for _ in range(noops):
            obs, _, terminated, truncated, info = self.env.step(self.noop_action)
            if terminated or truncated:
                obs, info = self.env.reset(**kwargs)
        return obs, info


class FireResetEnv(gym.Wrapper):
    """Press FIRE, then action 2, after each reset, for games that wait for it (sb3 ``FireResetEnv``).

    Returns an empty info, as sb3 does.
    """

    def __init__(self, env: gym.Env):
        super().__init__(env)
        meanings = _action_meanings(env)
        if meanings[1] != "FIRE" or len(meanings) < 3:
            raise ValueError(f"fire reset needs action 1 to be FIRE and 3 actions or more, got {meanings}")

    def reset(self, **kwargs: Any):
        self.env.reset(**kwargs)
        obs, _, terminated, truncated, _ = self.env.step(1)
        if terminated or truncated:
            self.env.reset(**kwargs)
        obs, _, terminated, truncated, _ = self.env.step(2)
        if terminated or truncated:
            self.env.reset(**kwargs)
        return obs, {}


class EpisodicLifeEnv(gym.Wrapper):
    """A lost life ends the episode for training; ``reset`` then takes one no-op step instead of
    restarting the game, and restarts it only after a real game over (sb3 ``EpisodicLifeEnv``)."""

    def __init__(self, env: gym.Env):
        super().__init__(env)
        self.lives = 0
        self.was_real_done = True

    def step(self, action: int):
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.was_real_done = terminated or truncated
        lives = self.env.unwrapped.ale.lives()
        if 0 < lives < self.lives:  # lives > 0: some games sit at 0 lives for a few frames before game over
            terminated = True
        self.lives = lives
        return obs, reward, terminated, truncated, info

    def reset(self, **kwargs: Any):
        if self.was_real_done:
            obs, info = self.env.reset(**kwargs)
        else:
            obs, _, terminated, truncated, info = self.env.step(0)  # no-op past the lost life
            if terminated or truncated:  # the no-op itself ended the game
                obs, info = self.env.reset(**kwargs)
        self.lives = self.env.unwrapped.ale.lives()
        return obs, info


class MaxAndSkipEnv(gym.Wrapper):
    """Repeat each action ``skip`` times, sum the rewards, return the pixel-wise max of the last two
    frames (sb3 ``MaxAndSkipEnv``).

    The two-frame buffer lives across steps and resets, as sb3's: when a game ends before the
    second-to-last repeat, the max includes a frame of an earlier step, and so must ours.
    """

    def __init__(self, env: gym.Env, skip: int = 4):
        super().__init__(env)
        self._obs_buffer = np.zeros((2, *env.observation_space.shape), dtype=env.observation_space.dtype)
        self._skip = skip

    def step(self, action: int):
        total_reward = 0.0
        terminated = truncated = False
        info: dict[str, Any] = {}
        for i in range(self._skip):
            obs, reward, terminated, truncated, info = self.env.step(action)
            if i == self._skip - 2:
                self._obs_buffer[0] = obs
            if i == self._skip - 1:
                self._obs_buffer[1] = obs
            total_reward += float(reward)
            if terminated or truncated:
                break
        return self._obs_buffer.max(axis=0), total_reward, terminated, truncated, info


class ClipRewardEnv(gym.RewardWrapper):
    """Rewards binned to {-1, 0, +1} by their sign (sb3 ``ClipRewardEnv``: ``np.sign(float(r))``)."""

    def reward(self, reward: SupportsFloat) -> float:
        return np.sign(float(reward))


class WarpFrame(gym.ObservationWrapper):
    """RGB frames to ``[height, width, 1]`` grey, as sb3 ``WarpFrame``: OpenCV's RGB2GRAY, then an
    INTER_AREA resize (channel-last: sb3's ``VecTransposeImage`` turns it for the CNN)."""

    def __init__(self, env: gym.Env, width: int = 84, height: int = 84):
        super().__init__(env)
        if not isinstance(env.observation_space, spaces.Box):
            raise ValueError(f"WarpFrame takes Box observations, got {env.observation_space}")
        self.width, self.height = width, height
        self.observation_space = spaces.Box(low=0, high=255, shape=(height, width, 1), dtype=env.observation_space.dtype)

    def observation(self, frame: np.ndarray) -> np.ndarray:
        frame = cv2.cvtColor(frame, cv2.COLOR_RGB2GRAY)
        frame = cv2.resize(frame, (self.width, self.height), interpolation=cv2.INTER_AREA)
        return frame[:, :, None]
