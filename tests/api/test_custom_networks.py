"""Custom networks, bit for bit: sb3's documentation's examples with the import changed.

* "Custom Feature Extractor": a ``BaseFeaturesExtractor`` subclass on images (``CnnPolicy``, with
  ``features_extractor_kwargs``), and on a Dict observation (``MultiInputPolicy``, separate extractors
  for actor and critic);
* "Custom Network Architecture": ``net_arch`` in its forms with another activation;
* ``optimizer_class=RMSprop`` with ``optimizer_kwargs`` (rl-zoo's A2C-style settings), and Adam with
  ``optimizer_kwargs`` of its own;
* sb3's own policy classes given as ``policy=`` (``ActorCriticPolicy``, ``MaskableActorCriticPolicy``).

Each runs under sb3's import and ppo_dict's; what the callbacks saw, the rollout buffers, log dumps,
parameters and optimizer state, and a reload of the saved zip by sb3 are compared with ``==``.
"""

from __future__ import annotations

import os
from types import SimpleNamespace

import gymnasium as gym
import numpy as np
import pytest
import torch
from stable_baselines3.common.preprocessing import get_flattened_obs_dim
from stable_baselines3.common.torch_layers import BaseFeaturesExtractor
from torch import nn

import ppo_dict
import ppo_dict.envs.masked  # noqa: F401  (registers PPODictMaskedJump-v0)
import ppo_dict.envs.toy  # noqa: F401  (registers PPODictToy-v0)
from ppo_dict.core.errors import ConfigError
from ppo_dict.envs.dummy import GYM_ID as PIXELS_ID
from tests.api.scripts import Record, Watch, run
from tests.api.test_scripts import assert_same_run


class CustomCNN(BaseFeaturesExtractor):
    """sb3's documentation's CustomCNN (one convolution fewer: 36-pixel frames)."""

    def __init__(self, observation_space: gym.spaces.Box, features_dim: int = 256):
        super().__init__(observation_space, features_dim)
        n_input_channels = observation_space.shape[0]
        self.cnn = nn.Sequential(
            nn.Conv2d(n_input_channels, 32, kernel_size=8, stride=4, padding=0),
            nn.ReLU(),
            nn.Conv2d(32, 64, kernel_size=4, stride=2, padding=0),
            nn.ReLU(),
            nn.Flatten(),
        )
        with torch.no_grad():
            n_flatten = self.cnn(torch.as_tensor(observation_space.sample()[None]).float()).shape[1]
        self.linear = nn.Sequential(nn.Linear(n_flatten, features_dim), nn.ReLU())

    def forward(self, observations: torch.Tensor) -> torch.Tensor:
        return self.linear(self.cnn(observations))


class CustomCombinedExtractor(BaseFeaturesExtractor):
    """sb3's documentation's CustomCombinedExtractor: the image max-pooled, the state through a Linear."""

    def __init__(self, observation_space: gym.spaces.Dict):
        super().__init__(observation_space, features_dim=1)
        extractors, total_concat_size = {}, 0
        for key, subspace in observation_space.spaces.items():
            if key == "image":
                extractors[key] = nn.Sequential(nn.MaxPool2d(4), nn.Flatten())
                total_concat_size += subspace.shape[0] * (subspace.shape[1] // 4) * (subspace.shape[2] // 4)
            else:
                extractors[key] = nn.Linear(get_flattened_obs_dim(subspace), 16)
                total_concat_size += 16
        self.extractors = nn.ModuleDict(extractors)
        self._features_dim = total_concat_size

    def forward(self, observations: dict) -> torch.Tensor:
        return torch.cat([extractor(observations[key]) for key, extractor in self.extractors.items()], dim=1)


def train(api_class: type, policy, env, record: Record, tmp: str, steps: int, **kwargs) -> None:
    """Build, train with a watching callback, keep the parameters and optimizer state, save, and have
    sb3 load the zip (its parameters must be the model's)."""
    model = api_class(policy, env, seed=0, verbose=0, **kwargs)
    record.attach(model)
    model.learn(steps, callback=Watch(record))
    record.keep("trained", model)
    model.save(os.path.join(tmp, "model"))
    from sb3_contrib import MaskablePPO
    from stable_baselines3 import PPO

    loader = MaskablePPO if "Maskable" in type(model).__name__ else PPO
    loaded = loader.load(os.path.join(tmp, "model"), device="cpu")
    record.results["reloaded"] = {k: v.clone() for k, v in loaded.policy.state_dict().items()}
    record.results["reloaded_optimizer"] = loaded.policy.optimizer.state_dict()["state"]
    model.get_env().close()


def custom_cnn(api: SimpleNamespace, tmp: str, record: Record) -> None:
    """Channel-first frames: channel-last ones in sb3's DummyVecEnv are not bit-exact with sb3, NatureCNN's neither
    (``docs/python_api.md``); in ppo_dict's make_vec_env they are sb3's (``custom_dict``)."""
    env = api.make_vec_env(PIXELS_ID, n_envs=2, seed=7, env_kwargs=dict(image_size=36, channels=1, episode_length=20))
    train(
        api.PPO,
        "CnnPolicy",
        env,
        record,
        tmp,
        64,
        n_steps=16,
        batch_size=16,
        n_epochs=2,
        policy_kwargs=dict(features_extractor_class=CustomCNN, features_extractor_kwargs=dict(features_dim=32)),
    )


def custom_dict(api: SimpleNamespace, tmp: str, record: Record) -> None:
    env = api.make_vec_env(
        PIXELS_ID,
        n_envs=2,
        seed=8,
        env_kwargs=dict(image_size=36, channels=1, episode_length=20, channel_last=True, state_dim=3),
    )
    train(
        api.PPO,
        "MultiInputPolicy",
        env,
        record,
        tmp,
        64,
        n_steps=16,
        batch_size=16,
        n_epochs=2,
        policy_kwargs=dict(features_extractor_class=CustomCombinedExtractor, share_features_extractor=False, net_arch=[32]),
    )


def net_arch(api: SimpleNamespace, tmp: str, record: Record) -> None:
    env = api.make_vec_env("Pendulum-v1", n_envs=2, seed=9)
    train(
        api.PPO,
        "MlpPolicy",
        env,
        record,
        tmp,
        128,
        n_steps=32,
        batch_size=32,
        n_epochs=2,
        policy_kwargs=dict(activation_fn=nn.ReLU, net_arch=dict(pi=[32, 32], vf=[64])),
    )


def rmsprop(api: SimpleNamespace, tmp: str, record: Record) -> None:
    env = api.make_vec_env("CartPole-v1", n_envs=2, seed=10)
    train(
        api.PPO,
        "MlpPolicy",
        env,
        record,
        tmp,
        128,
        n_steps=32,
        batch_size=32,
        n_epochs=2,
        policy_kwargs=dict(
            optimizer_class=torch.optim.RMSprop, optimizer_kwargs=dict(alpha=0.99, eps=1e-5, weight_decay=0), net_arch=[16]
        ),
    )


def adam_kwargs(api: SimpleNamespace, tmp: str, record: Record) -> None:
    from stable_baselines3.common.policies import ActorCriticPolicy

    env = api.make_vec_env("CartPole-v1", n_envs=2, seed=11)
    train(
        api.PPO,
        ActorCriticPolicy,
        env,
        record,
        tmp,
        128,
        n_steps=32,
        batch_size=32,
        n_epochs=2,
        policy_kwargs=dict(optimizer_kwargs=dict(betas=(0.8, 0.9)), net_arch=[8, 8]),
    )


def maskable_class(api: SimpleNamespace, tmp: str, record: Record) -> None:
    from sb3_contrib.common.maskable.policies import MaskableActorCriticPolicy

    env = api.make_vec_env("PPODictMaskedJump-v0", n_envs=2, seed=12)
    train(
        api.MaskablePPO,
        MaskableActorCriticPolicy,
        env,
        record,
        tmp,
        128,
        n_steps=32,
        batch_size=32,
        n_epochs=2,
        policy_kwargs=dict(optimizer_class=torch.optim.RMSprop),
    )


class TwoLayers(BaseFeaturesExtractor):
    """A features extractor of a user's own on a vector observation."""

    def __init__(self, observation_space: gym.spaces.Box, features_dim: int = 16):
        super().__init__(observation_space, features_dim)
        self.net = nn.Sequential(
            nn.Linear(get_flattened_obs_dim(observation_space), 32), nn.Tanh(), nn.Linear(32, features_dim), nn.ReLU()
        )

    def forward(self, observations: torch.Tensor) -> torch.Tensor:
        return self.net(observations)


def recurrent_extractor(api: SimpleNamespace, tmp: str, record: Record) -> None:
    """sb3-contrib's RecurrentPPO with a features extractor of the user's (the LSTM reads its features) and RMSprop."""
    from sb3_contrib import RecurrentPPO

    env = api.make_vec_env("CartPole-v1", n_envs=2, seed=13)
    model = api.RecurrentPPO(
        "MlpLstmPolicy",
        env,
        n_steps=32,
        batch_size=32,
        n_epochs=2,
        seed=0,
        verbose=0,
        policy_kwargs=dict(features_extractor_class=TwoLayers, lstm_hidden_size=8, optimizer_class=torch.optim.RMSprop),
    )
    record.attach(model)
    model.learn(128, callback=Watch(record))
    record.keep("trained", model)
    model.save(os.path.join(tmp, "model"))
    record.results["reloaded"] = dict(RecurrentPPO.load(os.path.join(tmp, "model"), device="cpu").policy.state_dict())
    env.close()


NETWORK_SCRIPTS = {
    "recurrent_extractor": recurrent_extractor,
    "custom_cnn": custom_cnn,
    "custom_dict": custom_dict,
    "net_arch": net_arch,
    "rmsprop": rmsprop,
    "adam_kwargs": adam_kwargs,
    "maskable_class": maskable_class,
}


@pytest.mark.parametrize(
    "name,which",
    [(name, "ppo_dict") for name in NETWORK_SCRIPTS] + [("custom_cnn", "ppo_dict_envs"), ("custom_dict", "ppo_dict_envs")],
)
def test_custom_networks_give_sb3s_numbers(name: str, which: str, tmp_path) -> None:
    sb3 = run(name, "sb3", os.path.join(tmp_path, "sb3"), NETWORK_SCRIPTS)
    ours = run(name, which, os.path.join(tmp_path, "ours"), NETWORK_SCRIPTS)
    assert len(ours.rollouts) >= 2 and ours.results["reloaded"]
    assert_same_run(sb3, ours)


def test_a_custom_extractors_modules_are_the_policys() -> None:
    model = ppo_dict.PPO(
        "MultiInputPolicy",
        ppo_dict.make_vec_env(PIXELS_ID, env_kwargs=dict(image_size=36, channels=1, state_dim=3)),
        policy_kwargs=dict(features_extractor_class=CustomCombinedExtractor),
        seed=0,
        verbose=0,
    )
    assert isinstance(model.policy.features_extractor, CustomCombinedExtractor) and model.policy.features_dim == 81 + 16
    assert model.policy.net_arch == dict(pi=[64, 64], vf=[64, 64])  # sb3's default for an extractor other than NatureCNN
    model.close()


def test_what_is_not_a_class_of_the_right_kind_is_refused() -> None:
    with pytest.raises(ConfigError) as raised:
        ppo_dict.PPO(
            "MlpPolicy",
            "CartPole-v1",
            policy_kwargs=dict(features_extractor_class="CustomCNN", optimizer_class=nn.ReLU, optimizer_kwargs=[0.9]),
        )
    assert [p.split(": ", 1)[1] for p in raised.value.problems] == [
        "must be a features extractor class (sb3's BaseFeaturesExtractor)",
        "must be a torch optimizer class (torch.optim.Adam, torch.optim.RMSprop, ...)",
        "must be a dict of keyword arguments, or None",
    ]
    assert np.all([p.startswith("policy_kwargs ") for p in raised.value.problems])


def test_a_zip_of_a_custom_network_loads_and_continues_as_after_sb3s_load(tmp_path) -> None:
    """sb3's zip of a model with an extractor of its own, separate extractors and RMSprop, loaded with another env size."""
    from stable_baselines3 import PPO as SB3PPO
    from stable_baselines3.common.env_util import make_vec_env

    from tests.parity.sides import assert_same_value

    policy_kwargs = dict(
        features_extractor_class=TwoLayers, optimizer_class=torch.optim.RMSprop, share_features_extractor=False
    )
    model = SB3PPO(
        "MlpPolicy", "CartPole-v1", n_steps=32, batch_size=32, n_epochs=2, seed=1, verbose=0, policy_kwargs=policy_kwargs
    )
    model.learn(64)
    model.save(os.path.join(tmp_path, "custom"))
    results = []
    for cls in (SB3PPO, ppo_dict.PPO):
        # the extractor's class is named by the caller: ppo_dict rebuilds no class of the file's choosing (sb3 checks
        # they agree)
        loaded = cls.load(
            os.path.join(tmp_path, "custom"), env=make_vec_env("CartPole-v1", n_envs=2, seed=3), policy_kwargs=policy_kwargs
        )
        loaded.learn(128, reset_num_timesteps=False)
        results.append(
            ({k: v.clone() for k, v in loaded.policy.state_dict().items()}, loaded.policy.optimizer.state_dict()["state"])
        )
        assert isinstance(loaded.policy.optimizer, torch.optim.RMSprop)
    assert_same_value(results[0], results[1], "sb3's load + learn against ppo_dict's")
