"""A policy class of the script's own, as sb3's documentation writes one, trained bit for bit as sb3 trains it.

sb3's "Advanced Example" subclasses ``ActorCriticPolicy`` with a network of its own (``_build_mlp_extractor``);
others override a method (here ``_get_action_dist_from_latent``: the logits tempered), use gSDE, or subclass
sb3-contrib's ``MaskableActorCriticPolicy``. Each is built as sb3 builds it and trained through its own
methods (``ppo_dict.algo.networks.own_policy``), saved, loaded with the class named in ``custom_objects``, and trained
on, under sb3's import and ppo_dict's; what the callbacks saw, the parameters and Adam's state are ``==``.
"""

from __future__ import annotations

import os
from types import SimpleNamespace

import gymnasium as gym
import pytest
import torch
from sb3_contrib.common.maskable.policies import MaskableActorCriticPolicy
from stable_baselines3.common.distributions import Distribution
from stable_baselines3.common.policies import ActorCriticPolicy
from torch import nn

import ppo_dict
import ppo_dict.envs.masked  # noqa: F401  (registers PPODictMaskedJump-v0)
from ppo_dict.core.errors import CheckpointError, ConfigError
from tests.api.scripts import Record, Watch, run
from tests.api.test_scripts import assert_same_run


class CustomNetwork(nn.Module):
    """sb3's documentation's: a policy and a value network of their own on the extracted features."""

    def __init__(self, feature_dim: int, last_layer_dim_pi: int = 64, last_layer_dim_vf: int = 64):
        super().__init__()
        self.latent_dim_pi, self.latent_dim_vf = last_layer_dim_pi, last_layer_dim_vf
        self.policy_net = nn.Sequential(nn.Linear(feature_dim, last_layer_dim_pi), nn.ReLU())
        self.value_net = nn.Sequential(nn.Linear(feature_dim, last_layer_dim_vf), nn.ReLU())

    def forward(self, features: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.forward_actor(features), self.forward_critic(features)

    def forward_actor(self, features: torch.Tensor) -> torch.Tensor:
        return self.policy_net(features)

    def forward_critic(self, features: torch.Tensor) -> torch.Tensor:
        return self.value_net(features)


class CustomActorCriticPolicy(ActorCriticPolicy):
    """sb3's documentation's "Advanced Example" (orthogonal initialisation off, the network above)."""

    def __init__(self, observation_space: gym.spaces.Space, action_space: gym.spaces.Space, lr_schedule, *args, **kwargs):
        kwargs["ortho_init"] = False
        super().__init__(observation_space, action_space, lr_schedule, *args, **kwargs)

    def _build_mlp_extractor(self) -> None:
        self.mlp_extractor = CustomNetwork(self.features_dim, 32, 16)


class Tempered(ActorCriticPolicy):
    """A method of sb3's overridden: the action distribution of logits divided by a temperature."""

    def _get_action_dist_from_latent(self, latent_pi: torch.Tensor) -> Distribution:
        return self.action_dist.proba_distribution(action_logits=self.action_net(latent_pi) / 2.0)


class MaskableCustom(MaskableActorCriticPolicy):
    def _build_mlp_extractor(self) -> None:
        self.mlp_extractor = CustomNetwork(self.features_dim, 16, 16)


def train(api: SimpleNamespace, tmp: str, record: Record, algorithm: str, policy: type, env_id: str, **kwargs) -> None:
    env = api.make_vec_env(env_id, n_envs=2, seed=5)
    model = getattr(api, algorithm)(policy, env, n_steps=32, batch_size=32, n_epochs=2, seed=1, verbose=0, **kwargs)
    record.attach(model)
    model.learn(128, callback=Watch(record))
    record.results["class"] = type(model.policy).__name__
    record.keep("trained", model)
    model.save(os.path.join(tmp, "own"))
    loaded = getattr(api, algorithm).load(os.path.join(tmp, "own"), env=env, custom_objects={"policy_class": policy})
    record.attach(loaded)
    loaded.learn(64, reset_num_timesteps=False, callback=Watch(record))
    record.keep("loaded", loaded)
    record.results["predicted"] = loaded.predict(env.reset(), deterministic=True)[0]
    env.close()


SCRIPTS = {
    "advanced_example": lambda api, tmp, record: train(api, tmp, record, "PPO", CustomActorCriticPolicy, "CartPole-v1"),
    "overridden_method": lambda api, tmp, record: train(
        api, tmp, record, "PPO", Tempered, "CartPole-v1", policy_kwargs=dict(net_arch=[8])
    ),
    "gsde": lambda api, tmp, record: train(
        api, tmp, record, "PPO", CustomActorCriticPolicy, "Pendulum-v1", use_sde=True, sde_sample_freq=4
    ),
    "maskable": lambda api, tmp, record: train(api, tmp, record, "MaskablePPO", MaskableCustom, "PPODictMaskedJump-v0"),
}


@pytest.mark.parametrize("name", list(SCRIPTS))
def test_a_policy_class_of_the_scripts_own_trains_as_sb3s(name: str, tmp_path) -> None:
    sb3 = run(name, "sb3", os.path.join(tmp_path, "sb3"), SCRIPTS)
    ours = run(name, "ppo_dict_envs", os.path.join(tmp_path, "ours"), SCRIPTS)
    assert ours.results["class"] == sb3.results["class"] != "ActorCritic"
    assert_same_run(sb3, ours)


def test_its_zip_names_the_class_to_pass_and_recurrent_classes_are_refused(tmp_path) -> None:
    from sb3_contrib.common.recurrent.policies import RecurrentActorCriticPolicy

    model = ppo_dict.PPO(CustomActorCriticPolicy, "CartPole-v1", n_steps=16, batch_size=16, seed=0)
    assert isinstance(model.policy, CustomActorCriticPolicy) and isinstance(model.policy.mlp_extractor, CustomNetwork)
    model.save(os.path.join(tmp_path, "own"))
    model.close()
    with pytest.raises(
        CheckpointError,
        match=r"a class of a script's own, which ppo_dict does not unpickle from a file: "
        r"pass the class, PPO.load\(path, custom_objects=\{'policy_class': "
        r"CustomActorCriticPolicy\}\)",
    ):
        ppo_dict.PPO.load(os.path.join(tmp_path, "own"))
    for cls, policy in ((ppo_dict.RecurrentPPO, RecurrentActorCriticPolicy), (ppo_dict.PPO, nn.Module)):
        with pytest.raises(ConfigError, match="not a policy ppo_dict trains"):
            cls(type("Mine", (policy,), {}), "CartPole-v1")
