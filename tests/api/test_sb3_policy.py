"""``model.policy`` as sb3's classes (``ppo_dict.api.sb3_policy``): ``isinstance`` of sb3's policy class for PPO,
MaskablePPO and RecurrentPPO; ``parameters_to_vector`` / ``load_from_vector``; ``save`` read by sb3's
``ActorCriticPolicy.load`` (sb3-contrib's classes too) into sb3's own policy, which acts as ours does;
``torch.save(model.policy)`` and back; ``get_distribution`` giving sb3's ``Distribution`` objects whose values are
those of sb3's policy of the same seed (masks, gSDE). Compared with sb3's models built beside, with ``==``."""

from __future__ import annotations

import io
import warnings

import numpy as np
import pytest
import torch
from sb3_contrib import MaskablePPO, RecurrentPPO
from sb3_contrib.common.maskable.policies import MaskableActorCriticPolicy
from sb3_contrib.common.recurrent.policies import RecurrentActorCriticPolicy
from stable_baselines3 import PPO
from stable_baselines3.common.distributions import Distribution
from stable_baselines3.common.policies import ActorCriticPolicy

import ppo_dict
import ppo_dict.core.errors
import ppo_dict.envs.masked  # noqa: F401  (registers PPODictMaskedJump-v0)
from tests.parity.sides import assert_same_value

#: name -> (ppo_dict's class, sb3's, the policy class the policy is, policy, env, settings)
CASES = {
    "ppo_box": (ppo_dict.PPO, PPO, ActorCriticPolicy, "MlpPolicy", "Pendulum-v1", {}),
    "ppo_gsde": (ppo_dict.PPO, PPO, ActorCriticPolicy, "MlpPolicy", "Pendulum-v1", dict(use_sde=True)),
    "ppo_discrete_relu": (
        ppo_dict.PPO,
        PPO,
        ActorCriticPolicy,
        "MlpPolicy",
        "CartPole-v1",
        dict(policy_kwargs=dict(net_arch=[16], activation_fn=torch.nn.ReLU)),
    ),
    "maskable": (ppo_dict.MaskablePPO, MaskablePPO, MaskableActorCriticPolicy, "MlpPolicy", "PPODictMaskedJump-v0", {}),
    "recurrent": (
        ppo_dict.RecurrentPPO,
        RecurrentPPO,
        RecurrentActorCriticPolicy,
        "MlpLstmPolicy",
        "CartPole-v1",
        dict(policy_kwargs=dict(lstm_hidden_size=8)),
    ),
}


def models(name: str):
    ours_cls, sb3_cls, base, policy, env, settings = CASES[name]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return (
            ours_cls(policy, env, seed=0, n_steps=64, batch_size=64, **settings),
            sb3_cls(policy, env, seed=0, n_steps=64, batch_size=64, **settings),
            base,
        )


def same_actions(policy, other, obs: np.ndarray, **kwargs) -> None:
    state = {}
    if isinstance(policy, RecurrentActorCriticPolicy):
        state = dict(state=None, episode_start=np.ones(len(obs), dtype=bool))
    assert_same_value(
        policy.predict(obs, deterministic=True, **state, **kwargs)[0],
        other.predict(obs, deterministic=True, **state, **kwargs)[0],
        "actions",
    )


@pytest.mark.parametrize("name", list(CASES))
def test_the_policy_is_sb3s_class_with_sb3s_files_and_vectors(name: str, tmp_path) -> None:
    ours, sb3, base = models(name)
    assert isinstance(ours.policy, base) and isinstance(ours.policy, torch.nn.Module)
    vector = sb3.policy.parameters_to_vector()
    assert_same_value(ours.policy.parameters_to_vector(), vector, "the same seed's parameters")
    ours.policy.load_from_vector(vector * 0.5)
    sb3.policy.load_from_vector(vector * 0.5)
    assert_same_value(ours.policy.state_dict(), sb3.policy.state_dict(), "after load_from_vector")
    obs = np.stack([ours.observation_space.sample() for _ in range(5)])
    ours.policy.save(str(tmp_path / "policy.pth"))
    loaded = base.load(str(tmp_path / "policy.pth"), device="cpu")  # sb3's own class, from our file
    assert type(loaded) is type(sb3.policy) or type(loaded) is base
    assert_same_value(loaded.state_dict(), sb3.policy.state_dict(), "sb3's load of our file")
    masks = {"action_masks": np.ones((5, 12), dtype=bool)} if name == "maskable" else {}
    same_actions(loaded, ours.policy, obs, **masks)
    buffer = io.BytesIO()
    torch.save(ours.policy, buffer)
    buffer.seek(0)
    again = torch.load(buffer, weights_only=False)
    assert type(again) is type(ours.policy)
    assert_same_value(again.state_dict(), ours.policy.state_dict(), "torch.save and torch.load")
    same_actions(again, ours.policy, obs, **masks)


@pytest.mark.parametrize("name", ["ppo_box", "ppo_gsde", "ppo_discrete_relu", "maskable", "recurrent"])
def test_get_distribution_is_sb3s_distribution_with_sb3s_values(name: str) -> None:
    ours, sb3, _ = models(name)
    obs, _ = sb3.policy.obs_to_tensor(np.stack([ours.observation_space.sample() for _ in range(6)]))
    if name == "ppo_gsde":  # the same exploration matrices on both sides (ours are drawn by ppo_dict's noise)
        ours.policy.reset_noise(6)
        noise = ours.policy.action_spec.gsde
        sb3.policy.action_dist.exploration_mat, sb3.policy.action_dist.exploration_matrices = (
            noise.exploration_mat,
            noise.exploration_matrices,
        )
    masks = {}
    if name == "maskable":
        masks = {"action_masks": np.arange(6 * 12).reshape(6, 12) % 3 != 0}
    with torch.no_grad():
        if name == "recurrent":  # (distribution, states) from zero states at an episode start
            hidden = torch.zeros(1, 6, 8)
            (a, ours_states), (b, sb3_states) = (
                policy.get_distribution(obs, (hidden, hidden), torch.ones(6)) for policy in (ours.policy, sb3.policy)
            )
            assert_same_value(ours_states, sb3_states, "the actor's states")
        else:
            a, b = ours.policy.get_distribution(obs, **masks), sb3.policy.get_distribution(obs, **masks)
        assert type(a) is type(b) and isinstance(a, Distribution)
        actions = b.get_actions(deterministic=True)
        assert_same_value(a.get_actions(deterministic=True), actions, "mode")
        assert_same_value(a.log_prob(actions), b.log_prob(actions), "log_prob")
        assert_same_value(a.entropy(), b.entropy(), "entropy")
        torch.manual_seed(3)
        drawn = a.sample()
        torch.manual_seed(3)
        assert_same_value(drawn, b.sample(), "a sample from the same RNG state")


class Hostile:
    """What a hostile policy file holds: an object whose unpickling runs a command."""

    def __init__(self, marker: str):
        self.marker = marker

    def __reduce__(self):
        import os

        return os.system, (f"touch {self.marker}",)


@pytest.mark.parametrize("name", ["ppo_box", "ppo_gsde", "ppo_discrete_relu", "maskable"])
def test_a_policy_file_sb3_saved_loads_as_data_into_ours(name: str, tmp_path) -> None:
    """sb3's ``policy.save`` read by our class's ``load`` (nothing the file names runs): sb3's parameters, sb3's
    actions, and a file that sb3's ``load`` reads back after ours saves it again; a file naming a command is refused."""
    ours, sb3, base = models(name)
    path = str(tmp_path / "sb3.pth")
    sb3.policy.save(path)
    loaded = type(ours.policy).load(path, device="cpu")
    assert type(loaded) is type(ours.policy) and isinstance(loaded, base)
    assert_same_value(loaded.state_dict(), sb3.policy.state_dict(), "parameters")
    obs = np.stack([ours.observation_space.sample() for _ in range(5)])
    masks = {"action_masks": np.arange(5 * 12).reshape(5, 12) % 2 == 0} if name == "maskable" else {}
    same_actions(loaded, sb3.policy, obs, **masks)
    loaded.save(str(tmp_path / "again.pth"))
    assert_same_value(
        base.load(str(tmp_path / "again.pth"), device="cpu").state_dict(), sb3.policy.state_dict(), "saved again"
    )
    marker = tmp_path / "ran"
    torch.save(
        {"state_dict": sb3.policy.state_dict(), "data": {"observation_space": Hostile(str(marker))}},
        str(tmp_path / "hostile.pth"),
    )
    with pytest.raises(
        ppo_dict.core.errors.CheckpointError,
        match="not read as an sb3 policy file .nothing it names is run.: it names posix.system, which",
    ):
        type(ours.policy).load(str(tmp_path / "hostile.pth"))
    assert not marker.exists()
