"""sb3's own algorithms on ShmVecEnv give DummyVecEnv's numbers (sb3 is deterministic for a seed on
the CPU): PPO with CnnPolicy on channel-last images (sb3 adds its VecTransposeImage), A2C, SAC,
DQN, and DQN with HER on dict goals (MultiBinary observations, ``compute_reward`` through
``env_method``); sb3's wrappers see the env's own layout; actions cast as sb3's classes take them."""

from __future__ import annotations

import warnings
from typing import Any, Callable, Optional

import gymnasium as gym
import numpy as np
import pytest
import torch
from stable_baselines3 import A2C, DQN, PPO, SAC, HerReplayBuffer
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.envs import BitFlippingEnv
from stable_baselines3.common.vec_env import DummyVecEnv, VecFrameStack, VecNormalize, VecTransposeImage

from ppo_dict import ShmVecEnv


def small() -> dict:
    """Small networks; a new dict each time (sb3's off-policy algorithms write into their policy_kwargs)."""
    return dict(net_arch=[32, 32])


CHANNEL_LAST = dict(image_size=36, channel_last=True, episode_length=20)


def bit_flipping() -> gym.Env:
    return BitFlippingEnv(n_bits=6, continuous=False, max_steps=6)


#: name: (algorithm, its kwargs, env steps, env id or env_fn, env kwargs)
ALGORITHMS: dict[str, tuple[Any, dict, int, Any, Optional[dict]]] = {
    "ppo_cnn_channel_last": (
        PPO,
        dict(policy="CnnPolicy", n_steps=16, batch_size=32, n_epochs=1),
        64,
        "ppo_dict.envs.dummy:PPODictTestDummy-v0",
        CHANNEL_LAST,
    ),
    "a2c": (A2C, dict(policy="MlpPolicy", n_steps=8, policy_kwargs=small()), 128, "CartPole-v1", None),
    "sac": (
        SAC,
        dict(policy="MlpPolicy", learning_starts=40, batch_size=16, buffer_size=500, policy_kwargs=small()),
        80,
        "Pendulum-v1",
        None,
    ),
    "dqn": (
        DQN,
        dict(policy="MlpPolicy", learning_starts=40, batch_size=16, buffer_size=500, train_freq=2, policy_kwargs=small()),
        120,
        "CartPole-v1",
        None,
    ),
    "her_dqn_dict_goals": (
        DQN,
        dict(
            policy="MultiInputPolicy",
            learning_starts=40,
            batch_size=16,
            buffer_size=500,
            policy_kwargs=small(),
            replay_buffer_class=HerReplayBuffer,
            replay_buffer_kwargs=dict(n_sampled_goal=2, goal_selection_strategy="future"),
        ),
        120,
        bit_flipping,
        None,
    ),
}


def train(name: str, vec_env_cls: Callable, **vec_env_kwargs: Any) -> dict[str, torch.Tensor]:
    algorithm, kwargs, steps, env, env_kwargs = ALGORITHMS[name]
    kwargs = {k: dict(v) if isinstance(v, dict) else v for k, v in kwargs.items()}
    if callable(env):
        venv = vec_env_cls([env, env], **vec_env_kwargs)
    else:
        venv = make_vec_env(
            env, n_envs=2, seed=0, vec_env_cls=vec_env_cls, vec_env_kwargs=vec_env_kwargs, env_kwargs=env_kwargs
        )
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model = algorithm(env=venv, seed=0, device="cpu", verbose=0, **kwargs)
            before = {k: v.clone() for k, v in model.policy.state_dict().items()}
            model.learn(steps)
        if name == "ppo_cnn_channel_last":
            assert isinstance(model.get_env(), VecTransposeImage), (
                "sb3 must see the channel-last layout and transpose it itself"
            )
    finally:
        venv.close()
    after = model.policy.state_dict()
    assert any(not torch.equal(before[k], after[k]) for k in after), "the run must train"
    return after


@pytest.mark.parametrize("name", list(ALGORITHMS))
def test_sb3_algorithm_on_shm_vec_env_equals_dummy_vec_env(name: str) -> None:
    dummy, shm = train(name, DummyVecEnv), train(name, ShmVecEnv, num_workers=2)
    assert list(dummy) == list(shm)
    for key in dummy:
        assert torch.equal(dummy[key], shm[key]), key


def test_channel_last_images_keep_the_env_layout_through_sb3_wrappers() -> None:
    """Observations, terminal observations, VecFrameStack (stacks on the last axis) and VecNormalize
    (statistics of the env's shape) as over DummyVecEnv."""
    venvs = [
        make_vec_env(
            "ppo_dict.envs.dummy:PPODictTestDummy-v0",
            n_envs=2,
            seed=1,
            vec_env_cls=cls,
            env_kwargs=dict(CHANNEL_LAST, episode_length=3),
            vec_env_kwargs=kwargs,
        )
        for cls, kwargs in ((DummyVecEnv, {}), (ShmVecEnv, dict(num_workers=2)))
    ]
    try:
        stacked = [VecFrameStack(v, n_stack=2) for v in venvs]
        first = [v.reset() for v in stacked]
        assert first[0].shape == first[1].shape == (2, 36, 36, 6) and np.array_equal(*first)
        for _ in range(3):
            steps = [v.step(np.array([1, 2])) for v in stacked]
            assert np.array_equal(steps[0][0], steps[1][0]) and steps[1][0].flags.c_contiguous
        terminal = [info["terminal_observation"] for info in steps[1][3]]
        assert all(t.shape == (36, 36, 6) for t in terminal) and np.array_equal(
            terminal[0], steps[0][3][0]["terminal_observation"]
        )
        normalized = VecNormalize(venvs[1], norm_reward=False)
        assert normalized.obs_rms.mean.shape == (36, 36, 3) and normalized.reset().shape == (2, 36, 36, 3)
    finally:
        for v in venvs:
            v.close()


def test_actions_cast_as_sb3s_classes_take_them() -> None:
    """Python floats (float64) for Pendulum, float 0/1 for MultiBinary (what sb3's PPO sends), int32
    for Discrete; a batch that would lose meaning is refused before any worker steps."""
    shm = ShmVecEnv([lambda: gym.make("Pendulum-v1")] * 2, num_workers=1)
    try:
        shm.reset()
        assert shm.step([[0.5], [-0.5]])[1].dtype == np.float32
        with pytest.raises(ValueError, match=r"expected actions of shape \(2, 1\) and dtype float32"):
            shm.step([0.5, -0.5])
    finally:
        shm.close()
    toy = [lambda: gym.make("ppo_dict.envs.toy:PPODictToy-v0", observation="box", action="multi_binary")] * 2
    shm, dummy = ShmVecEnv(toy, num_workers=2), DummyVecEnv(toy)
    try:
        for venv in (shm, dummy):
            venv.seed(0)
            venv.reset()
        bits = np.array([[1, 0, 0, 1, 0, 0], [0, 1, 0, 0, 0, 1]], np.float32)
        assert np.array_equal(shm.step(bits)[1], dummy.step(bits)[1])
        with pytest.raises(
            ValueError,
            match=r"expected actions of shape \(2, 6\) and dtype int8 \(or values that cast to it "
            r"unchanged\), got shape \(2, 6\) and dtype float32",
        ):
            shm.step(bits * 0.5)
    finally:
        shm.close()
        dummy.close()
