"""sb3's policy surface on ``model.policy`` and the policy arguments sb3 takes, as scripts use them, ``==`` sb3.

Inference and export code written for sb3 calls ``model.policy.predict`` (with ``state``, ``episode_start``,
``deterministic``; sb3-contrib's ``action_masks``), ``obs_to_tensor``, ``get_distribution``, ``evaluate_actions``,
``predict_values``, ``extract_features``, ``set_training_mode``, ``scale_action`` / ``unscale_action``. Each
script trains briefly, then reads all of them on a batch and on one observation, under sb3's import and ppo_dict's:

* PPO with gSDE, ``squash_output=True`` and an activation class of torch's outside the config's names
  (``nn.Softplus``), separate features extractors, on Pendulum;
* PPO's CnnPolicy on channel-last images (``obs_to_tensor`` transposes them as sb3's);
* MaskablePPO with masks; RecurrentPPO with its states, ``lstm_kwargs=dict(dropout=...)`` over two layers (dropout
  draws while training) and ``stats_window_size``.
"""

from __future__ import annotations

import os
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from torch import nn

import ppo_dict
import ppo_dict.envs.masked  # noqa: F401  (registers PPODictMaskedJump-v0)
from ppo_dict.core.errors import CheckpointError, ConfigError
from ppo_dict.envs.dummy import GYM_ID as PIXELS_ID
from tests.api.scripts import Record, Watch, run
from tests.api.test_scripts import assert_same_run


def detached(value):
    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    if isinstance(value, (tuple, list)):
        return type(value)(detached(v) for v in value)
    if isinstance(value, dict):
        return {k: detached(v) for k, v in value.items()}
    return value


def one(obs):
    """The first env's observation of a batch, as one env gives it."""
    return {k: v[0] for k, v in obs.items()} if isinstance(obs, dict) else obs[0]


def read_policy(policy, obs, record: Record, **masks) -> None:
    """What a script reads of sb3's policy: predictions (deterministic, sampled after a seed, of one observation),
    the tensors, the distribution, the passes, the features, the mode switch, the action scaling."""
    torch.manual_seed(7)
    out = {
        "predicted": policy.predict(obs, deterministic=True, **masks),
        "sampled": policy.predict(obs, **masks),
        "one": policy.predict(one(obs), deterministic=True, **({"action_masks": masks["action_masks"][:1]} if masks else {})),
    }
    tensor, vectorized = policy.obs_to_tensor(obs)
    distribution = policy.get_distribution(tensor, **masks)
    actions = distribution.get_actions(deterministic=True)
    entropy = distribution.entropy()
    out.update(
        tensor=(tensor, vectorized, policy.is_vectorized_observation(one(obs))),
        actions=actions,
        log_prob=distribution.log_prob(actions),
        entropy=entropy,
        evaluated=policy.evaluate_actions(tensor, actions, **masks),
        values=policy.predict_values(tensor),
        features=policy.extract_features(tensor),
        squashed=policy.squash_output,
        device=str(policy.device),
    )
    policy.set_training_mode(True)
    out["training"] = (policy.training, policy.mlp_extractor.training)
    policy.set_training_mode(False)
    if hasattr(policy.action_space, "low"):
        out["scaled"] = (
            policy.scale_action(np.asarray(out["predicted"][0])),
            policy.unscale_action(np.zeros(policy.action_space.shape)),
        )
    record.results["policy"] = detached(out)


def squashed_softplus(api: SimpleNamespace, tmp: str, record: Record) -> None:
    env = api.make_vec_env("Pendulum-v1", n_envs=2, seed=3)
    model = api.PPO(
        "MlpPolicy",
        env,
        n_steps=32,
        batch_size=32,
        n_epochs=2,
        use_sde=True,
        sde_sample_freq=8,
        seed=0,
        verbose=0,
        policy_kwargs=dict(squash_output=True, activation_fn=nn.Softplus, share_features_extractor=False, net_arch=[16]),
    )
    record.attach(model)
    model.learn(128, callback=Watch(record))
    record.keep("trained", model)
    read_policy(model.policy, env.reset(), record)
    env.close()


def cnn_channel_last(api: SimpleNamespace, tmp: str, record: Record) -> None:
    env = api.make_vec_env(PIXELS_ID, n_envs=2, seed=7, env_kwargs=dict(image_size=36, channels=1, episode_length=20))
    model = api.PPO("CnnPolicy", env, n_steps=8, batch_size=8, n_epochs=1, seed=0, verbose=0)
    model.learn(16, callback=Watch(record))
    read_policy(model.policy, env.reset(), record)  # channel-last, as the env gives them: transposed as sb3's maybe_transpose
    env.close()


def masked(api: SimpleNamespace, tmp: str, record: Record) -> None:
    from sb3_contrib.common.maskable.utils import get_action_masks

    env = api.make_vec_env("PPODictMaskedJump-v0", n_envs=2, seed=8)
    model = api.MaskablePPO("MlpPolicy", env, n_steps=16, batch_size=16, n_epochs=1, seed=0, verbose=0)
    model.learn(32, callback=Watch(record))
    obs = env.reset()
    read_policy(model.policy, obs, record, action_masks=get_action_masks(env))
    env.close()


def recurrent_dropout(api: SimpleNamespace, tmp: str, record: Record) -> None:
    env = api.make_vec_env("CartPole-v1", n_envs=2, seed=13)
    model = api.RecurrentPPO(
        "MlpLstmPolicy",
        env,
        n_steps=32,
        batch_size=32,
        n_epochs=2,
        seed=0,
        verbose=0,
        stats_window_size=3,
        policy_kwargs=dict(lstm_hidden_size=8, n_lstm_layers=2, lstm_kwargs=dict(dropout=0.3)),
    )
    record.attach(model)
    model.learn(192, callback=Watch(record))
    record.keep("trained", model)
    record.results["window"] = (model.ep_info_buffer.maxlen, len(model.ep_info_buffer))
    policy, obs = model.policy, env.reset()
    torch.manual_seed(7)
    actions, states = policy.predict(obs, deterministic=True)
    again = policy.predict(obs, state=states, episode_start=np.array([True, False]))
    tensor, _ = policy.obs_to_tensor(obs)
    h = tuple(torch.as_tensor(s) for s in states)
    distribution, after = policy.get_distribution(tensor, h, torch.zeros(2))
    record.results["policy"] = detached(
        (
            actions,
            states,
            again,
            distribution.get_actions(True),
            distribution.log_prob(distribution.mode()),
            after,
            policy.predict_values(tensor, h, torch.zeros(2)),
            policy.extract_features(tensor),
        )
    )
    env.close()


SCRIPTS = {
    "squashed_softplus": squashed_softplus,
    "cnn_channel_last": cnn_channel_last,
    "masked": masked,
    "recurrent_dropout": recurrent_dropout,
}


@pytest.mark.parametrize("name", list(SCRIPTS))
def test_the_policys_methods_and_arguments_give_sb3s_numbers(name: str, tmp_path) -> None:
    sb3 = run(name, "sb3", os.path.join(tmp_path, "sb3"), SCRIPTS)
    ours = run(name, "ppo_dict_envs", os.path.join(tmp_path, "ours"), SCRIPTS)
    if name == "squashed_softplus":
        policy = ours.results["policy"]
        assert policy["squashed"] and policy["entropy"] is None and isinstance(policy["features"], tuple)
        assert np.all(np.abs(policy["sampled"][0]) <= 2.0) and policy["training"] == (True, True)
    if name == "recurrent_dropout":
        assert ours.results["window"] == (3, 3)
    assert_same_run(sb3, ours)


def test_an_activation_class_is_built_and_a_zip_naming_one_outside_the_allow_list_is_refused_by_name(tmp_path) -> None:
    """Any torch.nn.Module class given in code is built; a zip that names one is read only from the narrow allow-list."""

    class Square(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x * x

    model = ppo_dict.PPO(
        "MlpPolicy", "CartPole-v1", n_steps=16, batch_size=16, seed=0, policy_kwargs=dict(activation_fn=Square, net_arch=[8])
    )
    assert isinstance(model.policy.mlp_extractor.policy_net[1], Square) and model.cfg.activation_fn == "tanh"
    model.save(os.path.join(tmp_path, "square"))
    with pytest.raises(
        CheckpointError, match=r"'policy_kwargs' \(a pickled dict: activation_fn: <class '[\w.<>]+Square'> is not a value"
    ):
        ppo_dict.PPO.load(os.path.join(tmp_path, "square"))
    loaded = ppo_dict.PPO.load(os.path.join(tmp_path, "square"), policy_kwargs=dict(activation_fn=Square, net_arch=[8]))
    assert isinstance(loaded.policy.mlp_extractor.policy_net[1], Square)
    with pytest.raises(ConfigError) as refused:
        ppo_dict.PPO("MlpPolicy", "Pendulum-v1", policy_kwargs=dict(activation_fn="softplus", squash_output=True))
    assert [p.split(":")[0] for p in refused.value.problems] == [
        "policy_kwargs activation_fn='softplus'",
        "squash_output=True",
    ]
    model.close()
