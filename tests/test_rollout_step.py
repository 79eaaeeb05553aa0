"""The lean rollout step computes ActorCritic.forward's floats bit for bit, and draws the same random numbers."""

import numpy as np
import pytest
import torch
from gymnasium import spaces

from ppo_dict.data.actions import mask_sizes

from ppo_dict.algo.networks.policy import ActorCritic
from ppo_dict.algo.rollout.rollout_step import PolicyStep
from ppo_dict.data.masking import mask_offsets, with_action_masks

BOX_OBS = spaces.Box(-np.inf, np.inf, (11,), np.float64)
IMAGE = spaces.Box(0, 255, (3, 36, 36), np.uint8)
CASES = {
    "mlp-box-2": (BOX_OBS, spaces.Box(-1, 1, (2,), np.float32), dict()),
    "mlp-box-6-relu-log-std": (BOX_OBS, spaces.Box(-1, 1, (6,), np.float32), dict(activation_fn="relu", log_std_init=-0.7)),
    "mlp-box-1-deep": (BOX_OBS, spaces.Box(-2, 2, (1,), np.float32), dict(net_arch=dict(pi=[32, 32, 16], vf=[8]))),
    "mlp-discrete": (BOX_OBS, spaces.Discrete(5), dict()),
    "mlp-separate-extractors": (BOX_OBS, spaces.Box(-1, 1, (2,), np.float32), dict(share_features_extractor=False)),
    "discrete-obs": (spaces.Discrete(7), spaces.Discrete(3), dict()),
    "cnn": (IMAGE, spaces.Discrete(4), dict(model="cnn")),
    "dict": (
        spaces.Dict({"img": IMAGE, "vec": spaces.Box(-1, 1, (3,), np.float32)}),
        spaces.Box(-1, 1, (2,), np.float32),
        dict(),
    ),
    "gsde": (BOX_OBS, spaces.Box(-1, 1, (3,), np.float32), dict(use_sde=True, log_std_init=-0.5)),
    "gsde-diagonal-expln": (
        BOX_OBS,
        spaces.Box(-1, 1, (2,), np.float32),
        dict(use_sde=True, full_std=False, use_expln=True, log_std_init=0.5),
    ),
    "multi-discrete": (BOX_OBS, spaces.MultiDiscrete([3, 2]), dict()),
    "multi-binary": (BOX_OBS, spaces.MultiBinary(3), dict()),
    "multi-discrete-and-binary-obs": (
        spaces.Dict({"md": spaces.MultiDiscrete([4, 2]), "mb": spaces.MultiBinary([2, 2])}),
        spaces.Discrete(3),
        dict(),
    ),
}


def random_obs(space: spaces.Space, n: int, rng: np.random.Generator):
    if isinstance(space, spaces.Dict):
        return {k: random_obs(sub, n, rng) for k, sub in space.spaces.items()}
    if isinstance(space, spaces.Discrete):
        return torch.as_tensor(rng.integers(space.n, size=(n, 1)))
    if isinstance(space, spaces.MultiDiscrete):
        return torch.as_tensor(rng.integers(space.nvec, size=(n, len(space.nvec))))
    if isinstance(space, spaces.MultiBinary):
        return torch.as_tensor(rng.integers(2, size=(n, *space.shape)).astype(np.int8))
    if space.dtype == np.uint8:
        return torch.as_tensor(rng.integers(0, 256, size=(n, *space.shape), dtype=np.uint8))
    return torch.as_tensor(rng.normal(size=(n, *space.shape)).astype(space.dtype))


@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("n_envs", [1, 2, 8, 32])
def test_step_equals_forward_bit_for_bit(name: str, n_envs: int) -> None:
    obs_space, action_space, kwargs = CASES[name]
    torch.manual_seed(0)
    policy = ActorCritic(obs_space, action_space, **kwargs)
    step = PolicyStep(policy, n_envs)
    rng = np.random.default_rng(n_envs)
    for trial in range(3):
        if trial == 2:  # parameters moved (an update): refresh() picks up the new log_std
            with torch.no_grad():
                for p in policy.parameters():
                    p.add_(0.01 * torch.randn_like(p))
            step.refresh()
        if policy.use_sde:  # the collector draws the exploration matrices (one per env) at sb3's cadence
            policy.reset_noise(n_envs)
        obs = random_obs(obs_space, n_envs, rng)
        torch.manual_seed(100 + trial)
        with torch.no_grad():
            expected = policy(obs)
        expected_rng = torch.get_rng_state()
        torch.manual_seed(100 + trial)
        got = step(obs)
        assert torch.equal(torch.get_rng_state(), expected_rng), "the same random draws"
        for what, a, b in zip(("actions", "values", "log_probs"), expected, got):
            assert a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b), what
        with torch.no_grad():
            assert torch.equal(step.value(obs), policy.predict_values(obs))


@pytest.mark.parametrize("name", ["mlp-box-2", "mlp-discrete", "dict", "gsde", "multi-discrete", "multi-binary"])
def test_outputs_land_in_the_storage_rows_with_the_same_values(name: str) -> None:
    obs_space, action_space, kwargs = CASES[name]
    policy = ActorCritic(obs_space, action_space, **kwargs)
    step = PolicyStep(policy, 8)
    obs = random_obs(obs_space, 8, np.random.default_rng(0))
    action_dim = 1 if isinstance(action_space, spaces.Discrete) else action_space.shape[0]
    dtype = torch.from_numpy(np.zeros(0, action_space.dtype)).dtype  # the storage's action dtype
    rows = (torch.zeros(3, 8, action_dim, dtype=dtype), torch.zeros(3, 8), torch.zeros(3, 8))
    torch.manual_seed(5)
    expected = step(obs)
    torch.manual_seed(5)
    step(obs, out=(rows[0][1], rows[1][1], rows[2][1]))
    assert torch.equal(rows[0][1].reshape(expected[0].shape), expected[0].to(dtype))
    assert torch.equal(rows[1][1], expected[1].ravel()) and torch.equal(rows[2][1], expected[2])
    assert not rows[1][0].any() and not rows[1][2].any()  # only the step's own row was written


MASKED = {
    "discrete": spaces.Discrete(6),
    "multi_discrete": spaces.MultiDiscrete([3, 5, 2]),
    "multi_binary": spaces.MultiBinary(4),
}


@pytest.mark.parametrize("name", list(MASKED))
@pytest.mark.parametrize("n_envs", [1, 2, 8, 32])
def test_masked_step_equals_forward_bit_for_bit(name: str, n_envs: int) -> None:
    """sb3-contrib's maskable categoricals (one per entry for MultiDiscrete and MultiBinary): the lean
    step's actions, values, log-probs and draws are forward's, masks given or not, and land in the rows."""
    torch.manual_seed(0)
    space = MASKED[name]
    policy = ActorCritic(BOX_OBS, with_action_masks(space), action_masks=True)
    step = PolicyStep(policy, n_envs)
    rng = np.random.default_rng(n_envs)
    action_dim = 1 if name == "discrete" else space.shape[0]
    for trial in range(3):
        obs = random_obs(BOX_OBS, n_envs, rng)
        masks = rng.random((n_envs, sum(mask_sizes(space)))) < 0.5
        masks[:, mask_offsets(mask_sizes(space))] = True  # every categorical keeps a valid action
        given = None if trial == 2 else torch.as_tensor(masks)
        torch.manual_seed(100 + trial)
        with torch.no_grad():
            expected = policy(obs, action_masks=given)
        expected_rng = torch.get_rng_state()
        rows = (torch.zeros(n_envs, action_dim), torch.zeros(n_envs), torch.zeros(n_envs))  # the storage's float32 rows
        for out in (None, rows):
            torch.manual_seed(100 + trial)
            got = step(obs, out=out, masks=given)
            assert torch.equal(torch.get_rng_state(), expected_rng), "the same random draws"
            if out is not None:
                got = (got[0].reshape(expected[0].shape).to(expected[0].dtype), got[1], got[2])
            for what, a, b in zip(("actions", "values", "log_probs"), expected, got):
                assert a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b), what


def test_gsde_halves_explore_with_their_own_envs_matrices() -> None:
    """Double-buffered halves (a batch other than n_envs) keep one exploration matrix per env: the
    half's rows of the matrices, not the single matrix sb3 takes for other batch sizes."""
    obs_space, action_space, kwargs = CASES["gsde"]
    torch.manual_seed(0)
    policy = ActorCritic(obs_space, action_space, **kwargs)
    policy.reset_noise(8)
    gsde = policy.action_spec.gsde
    latent = torch.randn(8, gsde.exploration_matrices.shape[1])
    whole = gsde.get_noise(latent)  # the whole batch: one matrix per env, as sb3
    for rows in (slice(0, 4), slice(4, 8)):
        assert torch.equal(gsde.get_noise(latent[rows], rows), whole[rows])
    assert not torch.equal(gsde.get_noise(latent[4:8]), whole[4:8])  # sb3's single matrix for a batch other than its own
    # the step passes the half's rows through: the same actions as the mean plus that noise
    step, obs = PolicyStep(policy, 4), random_obs(obs_space, 4, np.random.default_rng(0))
    latent_pi = step.latents(obs)[0]
    expected = torch.add(policy.action_net(latent_pi), gsde.get_noise(latent_pi, slice(4, 8)))
    assert torch.equal(step(obs, rows=slice(4, 8))[0], expected)
