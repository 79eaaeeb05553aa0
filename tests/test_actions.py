"""One ActionSpec per action space: its refusals, layout, distribution, env-side clip and training-side
cast agree with sb3's (and sb3-contrib's) own distributions, buffers and ``predict``."""

import numpy as np
import pytest
import torch
from gymnasium import spaces
from sb3_contrib.common.maskable.distributions import make_masked_proba_distribution
from stable_baselines3.common.distributions import StateDependentNoiseDistribution, make_proba_distribution
from stable_baselines3.common.policies import ActorCriticPolicy
from stable_baselines3.common.preprocessing import get_action_dim

from ppo_dict.data.actions import SUPPORTED_ACTION_SPACES, action_space_problem, action_spec, mask_sizes
from ppo_dict.data.masking import mask_offsets

LATENT = 8
CASES = {
    "box": (spaces.Box(-1, 1, (3,), np.float32), {}),
    "box-2d-float64": (spaces.Box(-2, 2, (2, 3), np.float64), {}),
    "gsde": (spaces.Box(-1, 1, (3,), np.float32), dict(use_sde=True)),
    "gsde-diagonal-expln": (spaces.Box(-1, 1, (2,), np.float32), dict(use_sde=True, full_std=False, use_expln=True)),
    "discrete": (spaces.Discrete(5), {}),
    "multi-discrete": (spaces.MultiDiscrete([3, 2, 4]), {}),
    "multi-binary": (spaces.MultiBinary(4), {}),
    "masked-discrete": (spaces.Discrete(5), dict(masked=True)),
    "masked-multi-discrete": (spaces.MultiDiscrete([3, 2, 4]), dict(masked=True)),
    "masked-multi-binary": (spaces.MultiBinary(4), dict(masked=True)),
}


@pytest.mark.parametrize(
    "space",
    [
        spaces.Text(5),
        spaces.Tuple((spaces.Discrete(2), spaces.Discrete(3))),
        spaces.Dict({"a": spaces.Discrete(2)}),
        spaces.Sequence(spaces.Discrete(2)),
        spaces.Graph(spaces.Discrete(2), None),
    ],
)
def test_the_factory_refuses_a_space_of_no_supported_kind_by_name(space: spaces.Space) -> None:
    expected = f"The algorithm only supports {SUPPORTED_ACTION_SPACES} as action spaces but {space} was provided"
    with pytest.raises(ValueError) as info:
        action_spec(space)
    assert str(info.value) == expected
    assert action_space_problem(space) == expected
    assert SUPPORTED_ACTION_SPACES == (spaces.Box, spaces.Discrete, spaces.MultiDiscrete, spaces.MultiBinary)  # sb3's order


def test_the_factory_refuses_gsde_and_masks_where_sb3_does() -> None:
    with pytest.raises(
        ValueError, match=r"^generalized State-Dependent Exploration \(gSDE\) can only be used with continuous actions\.$"
    ):
        action_spec(spaces.Discrete(3), use_sde=True)
    with pytest.raises(
        ValueError,
        match=r"^invalid-action masks need Discrete, "
        r"one-dimensional MultiDiscrete or MultiBinary\(n\) actions",
    ):
        action_spec(spaces.Box(-1, 1, (2,)), masked=True)


def test_a_spec_tells_what_sb3_refuses_in_a_space_of_its_kind() -> None:
    assert (
        action_space_problem(spaces.Box(-np.inf, np.inf, (2,)))
        == "Continuous action space must have a finite lower and upper bound"
    )
    assert action_space_problem(spaces.MultiBinary([2, 3])).startswith(
        "Multi-dimensional MultiBinary((2, 3)) action space is not supported"
    )
    assert action_space_problem(spaces.MultiDiscrete([[2, 3], [4, 5]])).startswith("Multi-dimensional MultiDiscrete")
    assert action_space_problem(spaces.MultiDiscrete([[2, 3]]), masked=True).startswith("Multi-dimensional MultiDiscrete")
    assert [action_spec(space, **kw).problem() for space, kw in CASES.values()] == [""] * len(CASES)
    # the storage lays out a space sb3 refuses (a shared-memory vec env steps it), so the spec exists
    assert action_spec(spaces.MultiBinary([2, 3])).layout == ((2, 3), np.dtype(np.int8), 6)
    with pytest.raises(ValueError, match="finite lower and upper bound"):
        from ppo_dict.algo.networks.policy import ActorCritic

        ActorCritic(spaces.Box(-1, 1, (3,)), spaces.Box(-np.inf, np.inf, (2,)))


@pytest.mark.parametrize("name", list(CASES))
def test_layout_is_what_sb3_stores_and_sends(name: str) -> None:
    """The env's action is shaped as the space samples it; the buffer keeps ``get_action_dim`` values per transition."""
    space, kwargs = CASES[name]
    shape, dtype, action_dim = action_spec(space, **kwargs).layout
    sample = np.asarray(space.sample())
    assert (shape, dtype, action_dim) == (sample.shape, sample.dtype, get_action_dim(space))


def sb3_distribution(
    space: spaces.Space, use_sde: bool = False, masked: bool = False, full_std: bool = True, use_expln: bool = False
):
    if masked:
        return make_masked_proba_distribution(space)
    if use_sde:
        return StateDependentNoiseDistribution(get_action_dim(space), full_std=full_std, use_expln=use_expln)
    return make_proba_distribution(space)


def sb3_pass(dist, head: torch.Tensor, log_std, latent: torch.Tensor, masks):
    """sb3's ``_get_action_dist_from_latent`` (and sb3-contrib's masking) for each kind of distribution."""
    if isinstance(dist, StateDependentNoiseDistribution):
        return dist.proba_distribution(head, log_std, latent)
    if log_std is not None:
        return dist.proba_distribution(head, log_std)
    dist = dist.proba_distribution(head)
    if masks is not None:
        dist.apply_masking(masks)
    return dist


@pytest.mark.parametrize("name", list(CASES))
def test_distribution_mode_and_cast_are_sb3s_bit_for_bit(name: str) -> None:
    """Layers built from the same RNG state; then the mode, samples, log-probs (of the stored actions
    cast as ``PPO.train`` casts them) and entropies of sb3's distribution, bit for bit."""
    space, kwargs = CASES[name]
    spec, theirs = action_spec(space, **kwargs), sb3_distribution(space, **kwargs)
    torch.manual_seed(3)
    action_net, log_std = spec.build(LATENT, -0.3)
    torch.manual_seed(3)
    built = (
        theirs.proba_distribution_net(LATENT, -0.3) if log_std is not None else (theirs.proba_distribution_net(LATENT), None)
    )
    assert torch.equal(action_net.weight, built[0].weight) and torch.equal(action_net.bias, built[0].bias)
    assert (log_std is None and built[1] is None) or torch.equal(log_std, built[1])
    if spec.gsde is not None:
        assert torch.equal(spec.gsde.exploration_mat, theirs.exploration_mat)
    latent = torch.randn(6, LATENT)
    masks = None
    if spec.masked:
        rng = np.random.default_rng(0)
        masks = rng.random((6, spec.n_outputs)) < 0.5
        masks[:, mask_offsets(mask_sizes(space))] = True
        masks = torch.as_tensor(masks)
    with torch.no_grad():
        head = action_net(latent)
        ours, sb3 = spec.distribution(head, log_std, latent, masks), sb3_pass(theirs, head, log_std, latent, masks)
        torch.manual_seed(4)
        sample = ours.sample()
        torch.manual_seed(4)
        assert torch.equal(sample, sb3.sample())
        assert torch.equal(ours.mode(), sb3.mode())
        for actions in (ours.mode(), sample):
            stored = actions.reshape(len(actions), -1).float()  # sb3's RolloutBuffer: float32 [B, action_dim]
            cast = stored.long().flatten() if isinstance(space, spaces.Discrete) else stored  # sb3 PPO.train
            assert torch.equal(ours.log_prob(spec.to_training(stored)), sb3.log_prob(cast))
        assert torch.equal(ours.entropy(), sb3.entropy())


@pytest.mark.parametrize("name", ["box", "box-2d-float64", "discrete", "multi-discrete", "multi-binary"])
def test_env_actions_are_sb3_predicts(name: str) -> None:
    """What the env gets from the policy's actions is sb3 ``predict``'s (Box: clipped to the bounds),
    from a batch ``[B, *shape]`` or into the storage's rows ``[B, action_dim]``; the ONNX graph's module agrees."""
    space, kwargs = CASES[name]
    obs_space = spaces.Box(-1, 1, (4,), np.float32)
    torch.manual_seed(0)
    policy = ActorCriticPolicy(obs_space, space, lr_schedule=lambda _: 0.0)
    obs = np.random.default_rng(0).normal(size=(64, 4)).astype(np.float32)
    with torch.no_grad():
        policy.action_net.bias.add_(0.5)  # half the Gaussian means outside the bounds
        torch.manual_seed(1)
        raw = policy._predict(torch.as_tensor(obs), deterministic=False).cpu().numpy().reshape((-1, *space.shape))
    torch.manual_seed(1)
    expected, _ = policy.predict(obs, deterministic=False)
    spec = action_spec(space, **kwargs)
    ours = spec.to_env(raw)
    assert ours.dtype == expected.dtype and np.array_equal(ours, expected)
    if isinstance(space, spaces.Box):
        assert not np.array_equal(raw, expected)  # the clip did something
    _, _, action_dim = spec.layout
    rows = np.zeros((len(raw), action_dim), dtype=raw.dtype)
    result = spec.to_env(raw.reshape(len(raw), action_dim), out=rows)
    assert np.shares_memory(result, rows) and np.array_equal(rows, expected.reshape(len(raw), action_dim))
    graph = spec.env_module()(torch.as_tensor(raw)).numpy()
    assert np.array_equal(graph, expected)
