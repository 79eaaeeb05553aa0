"""ShmVecEnv tested the way sb3 tests its own vec envs (sb3's ``tests/test_vec_envs.py``): the same
calls over DummyVecEnv, SubprocVecEnv and ShmVecEnv side by side, each call's result compared
with DummyVecEnv's where the envs are deterministic."""

from __future__ import annotations

import collections
import copy
import functools
import warnings
from typing import Any, Optional

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces
from stable_baselines3.common.monitor import Monitor
from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv, VecFrameStack, VecNormalize

from ppo_dict import ShmVecEnv

N_ENVS = 3
VEC_ENV_CLASSES = {
    "dummy": DummyVecEnv,
    "subproc": SubprocVecEnv,
    "shm": functools.partial(ShmVecEnv, num_workers=N_ENVS),
    "shm-one-worker": functools.partial(ShmVecEnv, num_workers=1),
}
VEC_ENV_WRAPPERS = [None, VecNormalize, VecFrameStack]
#: every class bare, and every wrapper over DummyVecEnv and ShmVecEnv (one worker: each process start costs seconds on 2
#: busy cores)
CLASS_AND_WRAPPER = [(name, None) for name in VEC_ENV_CLASSES] + [
    (name, w) for name in ("dummy", "shm-one-worker") for w in VEC_ENV_WRAPPERS[1:]
]
SPACES = collections.OrderedDict(
    [
        ("discrete", spaces.Discrete(2)),
        ("multidiscrete", spaces.MultiDiscrete([2, 3])),
        ("multibinary", spaces.MultiBinary(3)),
        ("continuous", spaces.Box(low=np.zeros(2, np.float32), high=np.ones(2, np.float32))),
    ]
)


class CustomGymEnv(gym.Env):
    """sb3's test env, with its randomness from its own seeded generators (so runs can be compared)."""

    def __init__(self, space: spaces.Space, render_mode: Optional[str] = "rgb_array"):
        # each env its own spaces and sampling RNGs, as in another process (sb3's shares one space object)
        self.action_space, self.observation_space = copy.deepcopy(space), copy.deepcopy(space)
        self.current_step, self.ep_length, self.render_mode = 0, 4, render_mode

    def reset(self, *, seed: Optional[int] = None, options: Optional[dict] = None):
        if seed is not None:
            super().reset(seed=seed)
            self.observation_space.seed(seed)
        self.current_step = 0
        self.state = self.observation_space.sample()
        return self.state, {"options": options}

    def step(self, action: Any):
        reward = float(self.np_random.random())
        self.state = self.observation_space.sample()
        self.current_step += 1
        done = self.current_step >= self.ep_length
        return self.state, reward, done, done, {}

    def render(self) -> Optional[np.ndarray]:
        return np.full((4, 4, 3), self.current_step, np.uint8) if self.render_mode == "rgb_array" else None

    @staticmethod
    def custom_method(dim_0: int = 1, dim_1: int = 1) -> np.ndarray:
        return np.ones((dim_0, dim_1))


def make_box_env() -> CustomGymEnv:
    return CustomGymEnv(spaces.Box(low=np.zeros(2, np.float32), high=np.ones(2, np.float32)))


def wrap(vec_env: Any, wrapper: Any) -> Any:
    if wrapper is None:
        return vec_env
    return wrapper(vec_env, n_stack=2) if wrapper is VecFrameStack else wrapper(vec_env)


def same(a: Any, b: Any) -> bool:
    if isinstance(a, dict):
        return type(a) is type(b) and list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (tuple, list)):
        return type(a) is type(b) and len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, np.ndarray):
        return isinstance(b, np.ndarray) and a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b)
    return a == b


@pytest.mark.parametrize("cls_name, wrapper", CLASS_AND_WRAPPER)
def test_vecenv_custom_calls(cls_name: str, wrapper: Any) -> None:
    """sb3's ``test_vecenv_custom_calls``: seed, render, env_method, set_attr/get_attr with indices,
    negative ones included (the last env, not a hang)."""
    vec_env = wrap(VEC_ENV_CLASSES[cls_name]([make_box_env for _ in range(N_ENVS)]), wrapper)
    vec_env.seed(0)
    assert np.array_equal(vec_env.render(mode="rgb_array"), vec_env.render())
    with pytest.warns(UserWarning):
        vec_env.render(mode="something_else")
    assert all((r == np.ones((1, 2))).all() for r in vec_env.env_method("custom_method", 1, indices=None, dim_1=2))
    assert [vec_env.set_attr("current_step", i, indices=i) for i in range(N_ENVS)] == [None] * N_ENVS
    assert vec_env.get_attr("current_step") == list(range(N_ENVS))
    subset = vec_env.env_method("custom_method", 1, indices=[0, 2], dim_1=3)
    assert len(subset) == 2 and all((r == np.ones((1, 3))).all() for r in subset)
    assert vec_env.set_attr("current_step", 42, indices=None) is None and vec_env.get_attr("current_step") == [42] * N_ENVS
    vec_env.reset()
    vec_env.set_attr("current_step", 12, indices=[0, 1])
    assert vec_env.get_attr("current_step") == [12, 12, 0] and vec_env.get_attr("current_step", indices=[0, 2]) == [12, 0]
    vec_env.reset()
    vec_env.set_attr("current_step", 12, indices=[0, -1])
    assert vec_env.get_attr("current_step") == [12, 0, 12] and vec_env.get_attr("current_step", indices=[-1]) == [12]
    assert vec_env.get_attr("current_step", indices=[-3, 2, 2, -1]) == [12, 12, 12, 12]  # as a list indexes, duplicates too
    assert vec_env.env_is_wrapped(Monitor, indices=[-1]) == [False]
    with pytest.raises(IndexError, match="index out of range"):  # "tuple index..." for SubprocVecEnv
        vec_env.get_attr("current_step", indices=[N_ENVS])
    assert vec_env.get_attr("current_step", indices=[-2]) == [0], "a refused index leaves the vec env usable"
    vec_env.close()


class StepEnv(gym.Env):
    """sb3's env for ``terminal_observation``: obs counts the steps, episodes of ``max_steps``."""

    def __init__(self, max_steps: int):
        self.action_space = spaces.Discrete(2)
        self.observation_space = spaces.Box(np.array([0]), np.array([999]), dtype="int")
        self.max_steps, self.current_step = max_steps, 0

    def reset(self, *, seed: Optional[int] = None, options: Optional[dict] = None):
        self.current_step = 0
        return np.array([self.current_step], dtype="int"), {}

    def step(self, action: Any):
        prev_step = self.current_step
        self.current_step += 1
        done = self.current_step >= self.max_steps
        return np.array([prev_step], dtype="int"), 0.0, done, done, {}


@pytest.mark.parametrize("cls_name, wrapper", CLASS_AND_WRAPPER)
def test_vecenv_terminal_obs(cls_name: str, wrapper: Any) -> None:
    step_nums = [i + 5 for i in range(N_ENVS)]
    vec_env = wrap(VEC_ENV_CLASSES[cls_name]([functools.partial(StepEnv, n) for n in step_nums]), wrapper)
    zero_acts = np.zeros((N_ENVS,), dtype="int")
    prev_obs_b = vec_env.reset()
    for step_num in range(1, max(step_nums) + 1):
        obs_b, _, done_b, info_b = vec_env.step(zero_acts)
        assert len(obs_b) == len(done_b) == len(info_b) == N_ENVS
        for prev_obs, obs, done, info, final_step_num in zip(prev_obs_b, obs_b, done_b, info_b, step_nums):
            assert done == (step_num == final_step_num)
            if not done:
                assert "terminal_observation" not in info
            else:
                terminal_obs = info["terminal_observation"]
                assert np.all(prev_obs < terminal_obs) and np.all(obs < prev_obs)
                if not isinstance(vec_env, VecNormalize):
                    assert np.all(prev_obs + 1 == terminal_obs) and np.all(obs == 0)
        prev_obs_b = obs_b
    vec_env.close()


def run_spaces(cls: Any, space: spaces.Space) -> list[Any]:
    """sb3's ``check_vecenv_spaces``, recording every return value: reset, then steps with sampled
    actions (one per env, as sb3's test sends them) until an episode ends."""
    vec_env = cls([functools.partial(CustomGymEnv, space) for _ in range(N_ENVS)])
    vec_env.seed(4)
    record = [vec_env.reset()]
    vec_env.action_space.seed(0)
    dones = [False] * N_ENVS
    while not any(dones):
        obs, rewards, dones, infos = vec_env.step([vec_env.action_space.sample() for _ in range(N_ENVS)])
        record.append((obs, rewards, dones, [info.get("terminal_observation") for info in infos]))
    vec_env.close()
    return record


def ordered(obs: Any) -> Any:
    return collections.OrderedDict(obs) if isinstance(obs, dict) else obs


def check_obs(obs: Any, space: spaces.Space) -> None:
    if isinstance(space, spaces.Dict):
        assert isinstance(obs, dict) and obs.keys() == space.spaces.keys()
        for key, values in obs.items():
            check_obs(values, space.spaces[key])
    elif isinstance(space, spaces.Tuple):
        assert isinstance(obs, tuple) and len(obs) == len(space.spaces)
        for values, inner in zip(obs, space.spaces):
            check_obs(values, inner)
    else:
        assert obs.shape[0] == N_ENVS and all(space.contains(value) for value in obs)


@pytest.mark.parametrize(
    "space", [*SPACES.values(), spaces.Dict(SPACES), spaces.Tuple(tuple(SPACES.values()))], ids=[*SPACES, "dict", "tuple"]
)
def test_vecenv_spaces_side_by_side(space: spaces.Space) -> None:
    """sb3's ``test_vecenv_single_space``, ``test_vecenv_dict_spaces`` and ``test_vecenv_tuple_spaces``:
    observations of the space (an OrderedDict, a tuple), and every value equal to DummyVecEnv's."""
    reference = run_spaces(DummyVecEnv, space)
    for name, cls in VEC_ENV_CLASSES.items():
        record = run_spaces(cls, space) if name != "dummy" else reference
        check_obs(record[0], space)
        for obs, *_ in record[1:]:
            check_obs(obs, space)
        # SubprocVecEnv: float64 rewards (it stacks Python floats) and plain dicts; the rest is DummyVecEnv's
        if name == "subproc":
            record = [ordered(record[0])] + [
                (ordered(obs), rewards.astype(np.float32), *rest) for obs, rewards, *rest in record[1:]
            ]
        assert same(reference, record), name


@pytest.mark.parametrize("cls_name", ["subproc", "shm"])
def test_bad_start_method_is_multiprocessings_error(cls_name: str) -> None:
    with pytest.raises(ValueError, match="cannot find context for 'illegal_method'"):
        VEC_ENV_CLASSES[cls_name]([make_box_env for _ in range(N_ENVS)], start_method="illegal_method")


@pytest.mark.parametrize("start_method", ["forkserver", "spawn", "fork"])
def test_start_methods(start_method: str) -> None:
    space = spaces.Discrete(2)
    reference = run_spaces(DummyVecEnv, space)
    assert same(reference, run_spaces(functools.partial(ShmVecEnv, start_method=start_method), space))


@pytest.mark.parametrize("cls_name", list(VEC_ENV_CLASSES))
def test_vec_env_is_wrapped_and_seeding(cls_name: str) -> None:
    cls = VEC_ENV_CLASSES[cls_name]
    vec_env = cls([make_box_env, lambda: Monitor(make_box_env()), make_box_env])
    assert vec_env.env_is_wrapped(Monitor) == [False, True, False]
    vec_env.seed(3)
    first = vec_env.reset()
    vec_env.seed(3)
    assert np.array_equal(first, vec_env.reset()) and not np.array_equal(first, vec_env.reset())
    vec_env.set_options({"x": 1})
    vec_env.reset()
    assert [info["options"] for info in vec_env.reset_infos] == [{"x": 1}] * N_ENVS  # options used once
    vec_env.reset()
    assert [info["options"] for info in vec_env.reset_infos] == [None] * N_ENVS
    vec_env.close()


@pytest.mark.parametrize("cls_name", list(VEC_ENV_CLASSES))
def test_get_images_warns_without_rgb_array(cls_name: str) -> None:
    vec_env = VEC_ENV_CLASSES[cls_name]([functools.partial(CustomGymEnv, SPACES["discrete"], None) for _ in range(N_ENVS)])
    with pytest.warns(
        UserWarning, match="The render mode is None, but this method assumes it is `rgb_array` to obtain images."
    ):
        assert list(vec_env.get_images()) == [None] * N_ENVS
    vec_env.close()
    vec_env = VEC_ENV_CLASSES[cls_name]([make_box_env for _ in range(N_ENVS)])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert all(np.array_equal(image, np.zeros((4, 4, 3), np.uint8)) for image in vec_env.get_images())
    vec_env.close()
