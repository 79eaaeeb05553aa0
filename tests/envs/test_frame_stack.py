"""Frame stacking in the env against sb3's VecFrameStack: the stacking axis sb3 picks (channel-first
images, channel-last images, vectors, Dicts), the stacked space, terminal observations, resets."""

from __future__ import annotations

from typing import Any, Callable

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces
from stable_baselines3.common.vec_env import DummyVecEnv, VecFrameStack

from ppo_dict.envs import make_env, resolve_env_name
from ppo_dict.envs.dummy import DummyPixelEnv
from ppo_dict.envs.frame_stack import FrameStack
from tests.system_parts import needs


def dict_cartpole() -> gym.Env:
    env = gym.make("CartPole-v1", max_episode_steps=15)
    space = spaces.Dict({"twice": spaces.Box(-np.inf, np.inf, (4,), np.float32), "obs": env.observation_space})
    return gym.wrappers.TransformObservation(env, lambda o: {"obs": o, "twice": 2 * o}, space)


#: name: (env factory, n_stack, stacked shape)
ENVS: dict[str, tuple[Callable[[], gym.Env], int, Any]] = {
    "channel_first_image": (lambda: DummyPixelEnv(image_size=12, channels=2, episode_length=7), 3, (6, 12, 12)),
    "channel_last_image": (lambda: DummyPixelEnv(image_size=12, channel_last=True, episode_length=5), 4, (12, 12, 12)),
    "vector": (lambda: gym.make("CartPole-v1", max_episode_steps=9), 4, (16,)),
    "dict_every_key": (dict_cartpole, 2, {"obs": (8,), "twice": (8,)}),
}


def _equal(a: Any, b: Any) -> bool:
    if isinstance(a, dict):
        return list(a) == list(b) and all(_equal(a[k], b[k]) for k in a)
    return a.dtype == b.dtype and np.array_equal(a, b)


@pytest.mark.parametrize("name", list(ENVS))
def test_frame_stack_in_the_env_is_sb3s_vec_frame_stack(name: str) -> None:
    make, n_stack, shape = ENVS[name]
    n_envs = 2
    ours = [FrameStack(make(), n_stack) for _ in range(n_envs)]
    sb3 = VecFrameStack(DummyVecEnv([make] * n_envs), n_stack)
    assert ours[0].observation_space == sb3.observation_space
    space = ours[0].observation_space
    assert ({k: s.shape for k, s in space.spaces.items()} if isinstance(space, spaces.Dict) else space.shape) == shape
    sb3.seed(5)
    obs = sb3.reset()

    def row(batch: Any, i: int) -> Any:
        return {k: v[i] for k, v in batch.items()} if isinstance(batch, dict) else batch[i]

    assert all(_equal(env.reset(seed=5 + i)[0], row(obs, i)) for i, env in enumerate(ours))
    rng, ends = np.random.default_rng(1), 0
    for t in range(30):
        actions = (
            np.array([ours[0].action_space.sample() for _ in range(n_envs)])
            if name.startswith("channel")
            else rng.integers(2, size=n_envs)
        )
        obs, rewards, dones, infos = sb3.step(actions)
        for i, env in enumerate(ours):
            mine, reward, terminated, truncated, _ = env.step(actions[i])
            assert (terminated or truncated) == dones[i]
            if dones[i]:
                ends += 1
                assert _equal(mine, infos[i]["terminal_observation"]), f"terminal obs, step {t} env {i}"
                mine, _ = env.reset()
            assert _equal(mine, row(obs, i)), f"obs, step {t} env {i}"
    assert ends >= n_envs


@needs("gl")
def test_pixels_stack_their_frames_not_the_state() -> None:
    from ppo_dict.envs import PixelOptions

    spec = resolve_env_name(
        "gym_Reacher-v5", pixel=PixelOptions(image_size=36, grayscale=True, keep_state=True), frame_stack=2
    )
    env = make_env(spec)
    try:
        assert env.observation_space["pixels"].shape == (2, 36, 36) and env.observation_space["state"].shape == (10,)
    finally:
        env.close()


def test_frame_stack_refuses_what_sb3_cannot_stack() -> None:
    with pytest.raises(ValueError, match=r"frame stacking takes Box observations \(sb3 VecFrameStack\), not Discrete\(16\)"):
        make_env(resolve_env_name("gym_FrozenLake-v1", frame_stack=2))
