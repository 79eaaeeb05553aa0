"""An env's state as plain data (envs/state.py): taken after random steps and put into a fresh env (reset with another
seed first), it gives the same observations, rewards, terminations, truncations and infos for the next 100 steps,
resets included; every gymnasium v5 MuJoCo env one by one, classic control, toy text, Atari with sb3's AtariWrapper and
frame stacking, rendered pixels, the project's own envs, and an env of a user's own with the documented pair. An env
whose state is not plain data (a Box2D world) is named as such; a state that no env wrote is refused in one message.
"""

from __future__ import annotations

import copy
import io

import gymnasium as gym
import numpy as np
import pytest
import torch

from ppo_dict.envs import AtariOptions, PixelOptions, make_env, resolve_env_name
from ppo_dict.envs.saved_state import from_saved, to_saved
from ppo_dict.envs.state import StateNotRestorable, env_state, first_problem, load_env_state, restore_problem
from tests.system_parts import needs
import ppo_dict.envs.goal  # noqa: F401,E402  (each registers its gymnasium id)
import ppo_dict.envs.masked  # noqa: F401,E402
import ppo_dict.envs.toy  # noqa: F401,E402

MUJOCO_V5 = [
    "Ant-v5",
    "HalfCheetah-v5",
    "Hopper-v5",
    "Humanoid-v5",
    "HumanoidStandup-v5",
    "InvertedDoublePendulum-v5",
    "InvertedPendulum-v5",
    "Pusher-v5",
    "Reacher-v5",
    "Swimmer-v5",
    "Walker2d-v5",
]
CLASSIC_AND_TOY_TEXT = [
    "CartPole-v1",
    "Pendulum-v1",
    "Acrobot-v1",
    "MountainCar-v0",
    "MountainCarContinuous-v0",
    "FrozenLake-v1",
    "Taxi-v4",
    "CliffWalking-v1",
    "Blackjack-v1",
]
OWN = [
    "test_dummy",
    "PPODictToy-v0",
    "PPODictGoal-v0",
    "PPODictMaskedJump-v0",
    "PPODictMaskedJumpMasker-v0",
    "CartPoleNoVel-v1",
]


def same(a, b) -> bool:
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, np.ndarray):
        return isinstance(b, np.ndarray) and a.dtype == b.dtype and np.array_equal(a, b, equal_nan=True)
    return type(a) is type(b) and (a == b or (a != a and b != b))


def without_wall_time(info: dict) -> dict:
    """The episode's seconds since the monitor started (``info["episode"]["t"]``) are wall time, not state."""
    if "episode" in info:
        info = {**info, "episode": {k: v for k, v in info["episode"].items() if k != "t"}}
    return info


def through_a_checkpoint(state):
    """The state as a checkpoint stores it and ``torch.load(weights_only=True)`` reads it back."""
    buffer = io.BytesIO()
    tree, blob = to_saved(state)
    torch.save({"tree": tree, "blob": torch.from_numpy(blob)}, buffer)
    buffer.seek(0)
    read = torch.load(buffer, weights_only=True)
    return from_saved(read["tree"], read["blob"].numpy())


def assert_restored(make, before: int = 37, after: int = 100) -> None:
    env = make()
    env.reset(seed=1)
    env.action_space.seed(2)
    for _ in range(before):
        *_, terminated, truncated, _ = env.step(env.action_space.sample())
        if terminated or truncated:
            env.reset()
    state = through_a_checkpoint(env_state(env))
    actions = [env.action_space.sample() for _ in range(after)]

    def trajectory(e):
        out = []
        for action in actions:
            obs, reward, terminated, truncated, info = e.step(action)
            out.append((obs, reward, terminated, truncated, without_wall_time(info)))
            if terminated or truncated:
                out.append(e.reset())
        return out

    expected = trajectory(env)
    fresh = make()
    fresh.reset(seed=99)  # a restore resets first (a reset draws from the env's generator), then overwrites
    load_env_state(fresh, state)
    for t, (want, got) in enumerate(zip(expected, trajectory(fresh))):
        assert same(want, got), f"step {t}: {want[1:]} != {got[1:]}"
    env.close()
    fresh.close()


@pytest.mark.parametrize("env_id", MUJOCO_V5)
def test_every_mujoco_v5_env_steps_on_as_it_would_have(env_id) -> None:
    assert_restored(lambda: gym.make(env_id))


@pytest.mark.parametrize("env_id", CLASSIC_AND_TOY_TEXT)
def test_classic_control_and_toy_text_envs_step_on_as_they_would_have(env_id) -> None:
    assert_restored(lambda: gym.make(env_id))


@pytest.mark.parametrize("name", OWN)
def test_the_projects_own_envs_step_on_as_they_would_have(name) -> None:
    spec = resolve_env_name(name)
    assert_restored(lambda: make_env(spec))


@pytest.mark.parametrize("sticky", [0.0, 0.25])
def test_atari_with_sb3s_atari_wrapper_and_frame_stacking_steps_on_as_it_would_have(sticky) -> None:
    spec = resolve_env_name("PongNoFrameskip-v4", atari=AtariOptions(30, 4, 84, True, True, sticky), frame_stack=4)
    assert_restored(lambda: make_env(spec), before=60, after=100)


@needs("gl")
@pytest.mark.parametrize("env_id", ["Reacher-v5", pytest.param("Hopper-v5", marks=pytest.mark.slow)])
def test_rendered_pixels_step_on_as_they_would_have(env_id) -> None:
    """The pixel env's camera included: gymnasium's renderer points it at its first render, from the state of then."""
    spec = resolve_env_name(env_id, pixel=PixelOptions(48, False, env_id == "Hopper-v5"), frame_stack=2)
    assert_restored(lambda: make_env(spec), before=60, after=60)


class Counter(gym.Env):
    """An env of a user's own whose state is held in an object that is not plain data, with the documented pair."""

    observation_space = gym.spaces.Box(0, 1000, (1,), np.float32)
    action_space = gym.spaces.Discrete(2)

    class Box:  # not plain data
        def __init__(self) -> None:
            self.count = 0

    def __init__(self) -> None:
        self.box = Counter.Box()

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.box.count = int(self.np_random.integers(10))
        return np.array([self.box.count], np.float32), {}

    def step(self, action):
        self.box.count += int(action) + int(self.np_random.integers(2))
        return np.array([self.box.count], np.float32), float(self.box.count), False, self.box.count > 500, {}

    def state_dict(self) -> dict:
        return {"count": self.box.count, "rng": self.np_random.bit_generator.state}

    def load_state_dict(self, state: dict) -> None:
        self.box.count = int(state["count"])
        self.np_random.bit_generator.state = state["rng"]


def test_a_users_env_with_state_dict_and_load_state_dict_is_restored_through_them() -> None:
    assert_restored(lambda: gym.wrappers.TimeLimit(Counter(), 50))
    without_pair = type("NoPair", (Counter,), {"state_dict": None, "load_state_dict": None})
    assert restore_problem(without_pair()) == "NoPair.box is a tests.envs.test_env_state.Counter.Box, not plain data"


def test_box2d_envs_are_named_as_not_restorable() -> None:
    pytest.importorskip("Box2D")
    env = gym.make("LunarLander-v3")
    assert restore_problem(env) == "LunarLander.world is a Box2D.Box2D.b2World, not plain data"
    with pytest.raises(StateNotRestorable, match="LunarLander.world is a Box2D"):
        env_state(env)


def saved_cartpole() -> tuple[gym.Env, list]:
    env = gym.make("CartPole-v1")
    env.reset(seed=0)
    return env, env_state(env)


@pytest.mark.parametrize(
    "corrupt, message",
    [
        (
            lambda s: s[:-1],
            "the saved wrapper stack has 3 layers, this env 4 ({time_limit.__name__} > OrderEnforcing > PassiveEnvChecker > "
            "CartPoleEnv)",
        ),
        (
            lambda s: [{**s[0], "class": "os.system"}, *s[1:]],
            "the saved layer 'os.system' is a {time_limit.__module__}.{time_limit.__qualname__} in this env",
        ),
        (
            lambda s: [*s[:3], {**s[3], "attrs": {**s[3]["attrs"], "step": 1}}],
            "CartPoleEnv: the saved attributes ['step'] are not state of this env",
        ),
        (
            lambda s: [*s[:3], {**s[3], "attrs": {**s[3]["attrs"], "state": np.zeros(7)}}],
            "CartPoleEnv.state: saved with the shape (7,), this env has (4,)",
        ),
        (lambda s: [*s[:3], {**s[3], "attrs": {**s[3]["attrs"], "_np_random": 5}}], None),
    ],
)
def test_a_state_no_env_wrote_is_refused_in_one_message(corrupt, message) -> None:
    env, state = saved_cartpole()
    bad = corrupt(copy.deepcopy(state))
    if message is None:  # a generator replaced by a number: refused where the generator is put back
        bad[3]["attrs"]["_np_random"] = {"__generator__": {"bit_generator": "MT19937", "state": 1}}
        with pytest.raises(StateNotRestorable):
            load_env_state(env, bad)
        return
    with pytest.raises(StateNotRestorable) as info:
        load_env_state(env, bad)
    # gymnasium's TimeLimit, or what replaced it process-wide (rl_zoo3's import puts its PatchedTimeLimit in its place)
    assert str(info.value) == message.format(time_limit=type(env))


def test_saved_arrays_are_checked_as_they_are_read() -> None:
    assert first_problem(from_saved(*to_saved(saved_cartpole()[1]))) is None
    tree, blob = to_saved(saved_cartpole()[1])
    tree[3]["attrs"]["state"]["dtype"] = "<f4"  # the same bytes read as another dtype: sizes that do not agree
    with pytest.raises(StateNotRestorable, match=r"32 bytes for an array of float32\(4,\)"):
        from_saved(tree, blob)
    nan_tree, nan_blob = to_saved([{"class": "x", "attrs": {"state": np.full(4, np.nan)}}])
    assert first_problem(from_saved(nan_tree, nan_blob)) == "holds NaN"
    forged = {"__ndarray__": 0, "nbytes": 8, "dtype": "<f8", "shape": [10**12]}
    with pytest.raises(StateNotRestorable, match="8 bytes for an array of float64"):
        from_saved(forged, np.zeros(8, np.uint8))
    with pytest.raises(StateNotRestorable, match="outside the saved 8"):
        from_saved({**forged, "nbytes": 16, "shape": [2]}, np.zeros(8, np.uint8))
    with pytest.raises(StateNotRestorable, match="an array of dtype 'O'"):
        from_saved({"__ndarray__": 0, "nbytes": 0, "dtype": "O", "shape": [0]}, np.zeros(0, np.uint8))
    deep: list = []
    for _ in range(40):
        deep = [deep]
    with pytest.raises(StateNotRestorable, match="nested deeper than"):
        from_saved(deep, np.zeros(0, np.uint8))
