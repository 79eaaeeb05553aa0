"""Network construction and sampling against sb3's policies, exact (docs/sb3_parity.md tests 1-6)."""

import numpy as np
import pytest
import torch
from gymnasium import spaces
from stable_baselines3.common.policies import ActorCriticCnnPolicy, ActorCriticPolicy, MultiInputActorCriticPolicy
from torch import nn

from tests.parity.sides import assert_same_value, build_policies

BOX_OBS = spaces.Box(-1.0, 1.0, (11,), np.float64)
IMAGE = spaces.Box(0, 255, (3, 40, 40), np.uint8)
DICT_OBS = spaces.Dict({"vec": spaces.Box(-1, 1, (5,), np.float32), "img": IMAGE})

CASES = {
    "mlp_discrete": (ActorCriticPolicy, BOX_OBS, spaces.Discrete(3), {}, {}),
    "mlp_box_log_std": (
        ActorCriticPolicy,
        BOX_OBS,
        spaces.Box(-1, 1, (6,), np.float32),
        dict(log_std_init=-0.5),
        dict(log_std_init=-0.5),
    ),
    "mlp_custom_arch": (
        ActorCriticPolicy,
        BOX_OBS,
        spaces.Box(-1, 1, (2,), np.float32),
        dict(net_arch=dict(pi=[32, 16], vf=[48]), activation_fn=nn.ReLU, ortho_init=True),
        dict(net_arch=dict(pi=[32, 16], vf=[48]), activation_fn="relu"),
    ),
    "mlp_list_arch_no_ortho": (
        ActorCriticPolicy,
        BOX_OBS,
        spaces.Discrete(4),
        dict(net_arch=[20, 20], ortho_init=False),
        dict(net_arch=[20, 20], ortho_init=False),
    ),
    "mlp_discrete_obs": (ActorCriticPolicy, spaces.Discrete(7), spaces.Discrete(2), {}, {}),
    "cnn_shared": (ActorCriticCnnPolicy, IMAGE, spaces.Discrete(4), {}, dict(model="cnn")),
    "cnn_separate": (
        ActorCriticCnnPolicy,
        IMAGE,
        spaces.Box(-1, 1, (2,), np.float32),
        dict(share_features_extractor=False),
        dict(model="cnn", share_features_extractor=False),
    ),
    "multi_input": (MultiInputActorCriticPolicy, DICT_OBS, spaces.Discrete(3), {}, dict(model="cnn")),
    "multi_input_separate": (
        MultiInputActorCriticPolicy,
        DICT_OBS,
        spaces.Box(-1, 1, (3,), np.float32),
        dict(share_features_extractor=False),
        dict(model="mlp", share_features_extractor=False),
    ),
}


def build_both(name: str, seed: int = 7):
    return build_policies(*CASES[name], seed=seed)


@pytest.mark.parametrize("name", list(CASES))
def test_init_exact(name: str) -> None:
    sb3, sb3_rng, ours, our_rng = build_both(name)
    assert_same_value(sb3.state_dict(), ours.state_dict(), "initial state_dict")
    assert torch.equal(sb3_rng, our_rng), "construction consumed the torch RNG differently"
    sb3_order = [n for n, _ in sb3.named_parameters()]
    assert [n for n, _ in ours.named_parameters()] == sb3_order
    if isinstance(CASES[name][2], spaces.Box):
        assert sb3_order[0] == "log_std"  # clip_grad_norm_ stacks norms in this order
    assert ours.features_dim == sb3.features_dim


def test_default_net_arch_and_features_dims() -> None:
    assert build_both("cnn_shared")[2].net_arch == [] and build_both("cnn_shared")[2].features_dim == 512
    assert build_both("mlp_discrete")[2].net_arch == dict(pi=[64, 64], vf=[64, 64])
    multi = build_both("multi_input")[2]
    assert multi.features_dim == 256 + 5 and multi.net_arch == dict(pi=[64, 64], vf=[64, 64])
    assert list(multi.features_extractor.extractors) == ["img", "vec"]  # gymnasium sorts Dict keys


def _batch(space: spaces.Space, n: int, rng: np.random.Generator):
    if isinstance(space, spaces.Dict):
        return {k: _batch(sub, n, rng) for k, sub in space.spaces.items()}
    if isinstance(space, spaces.Discrete):
        return torch.as_tensor(rng.integers(0, space.n, size=(n, 1)))
    if space.dtype == np.uint8:
        return torch.as_tensor(rng.integers(0, 256, size=(n, *space.shape), dtype=np.uint8))
    return torch.as_tensor(rng.uniform(-1, 1, size=(n, *space.shape)).astype(space.dtype))


@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("n_envs", [1, 2, 8])
def test_forward_sampling_and_evaluation_exact(name: str, n_envs: int) -> None:
    sb3, _, ours, _ = build_both(name)
    ours.load_state_dict(sb3.state_dict())
    obs = _batch(CASES[name][1], n_envs, np.random.default_rng(n_envs))
    with torch.no_grad():
        torch.manual_seed(11)
        a1, v1, l1 = sb3(obs)
        rng1 = torch.get_rng_state()
        torch.manual_seed(11)
        a2, v2, l2 = ours(obs)
        rng2 = torch.get_rng_state()
    for what, x, y in (("actions", a1, a2), ("values", v1, v2), ("log_probs", l1, l2)):
        assert_same_value(x, y, what)
    assert torch.equal(rng1, rng2)
    actions = a1.float() if isinstance(CASES[name][2], spaces.Box) else a1.long().flatten()
    for what, x, y in zip(
        ("values", "log_prob", "entropy"), sb3.evaluate_actions(obs, actions), ours.evaluate_actions(obs, actions)
    ):
        assert_same_value(x.detach(), y.detach(), f"evaluate_actions {what}")
    assert_same_value(sb3.predict_values(obs).detach(), ours.predict_values(obs).detach(), "predict_values")
