"""GAE and the PPO update beyond the parity suite: hand-computed GAE, minibatch tensors, the logs' shape."""

import numpy as np
import pytest
import torch
from gymnasium import spaces

from ppo_dict.algo.networks.policy import ActorCritic
from ppo_dict.algo.training.update import (
    GaussianEvaluate,
    GradientStep,
    RolloutTensors,
    UpdateSettings,
    compute_gae,
    explained_variance,
    ppo_update,
)
from ppo_dict.core.seeding import same_values
from ppo_dict.data.actions import action_spec
from ppo_dict.data.storage import RolloutStorage


def test_gae_by_hand() -> None:
    """T=2, one env, gamma 0.5, lambda 0.5; the episode restarts at step 1 for the second column."""
    rewards = np.array([[1.0, 1.0], [2.0, 2.0]], np.float32)
    values = np.array([[0.5, 0.5], [1.0, 1.0]], np.float32)
    starts = np.array([[1.0, 1.0], [0.0, 1.0]], np.float32)
    adv, ret = compute_gae(rewards, values, starts, np.array([4.0, 4.0], np.float32), np.array([False, True]), 0.5, 0.5)
    # column 0: delta1 = 2 + 0.5*4 - 1 = 3; delta0 = 1 + 0.5*1 - 0.5 = 1; adv0 = 1 + 0.25*3 = 1.75
    # column 1: last step done (no bootstrap): delta1 = 2 - 1 = 1; step 1 starts an episode: adv0 = 1 + 0 - 0.5 = 0.5
    assert adv.tolist() == [[1.75, 0.5], [3.0, 1.0]] and adv.dtype == np.float32
    assert np.array_equal(ret, adv + values)


def test_explained_variance() -> None:
    y = np.array([1.0, 2.0, 3.0], np.float32)
    assert explained_variance(y, y) == 1.0 and np.isnan(explained_variance(y, np.ones(3, np.float32)))
    assert explained_variance(np.zeros(3, np.float32), y) == 0.0


@pytest.mark.parametrize("action_space", [spaces.Discrete(3), spaces.Box(-1, 1, (2,), np.float32)])
def test_minibatch_tensors(action_space) -> None:
    s = RolloutStorage(spaces.Box(-1, 1, (4,), np.float64), action_space, n_steps=3, n_envs=2)
    s.actions[...] = np.arange(s.actions.size).reshape(s.actions.shape)
    batch = RolloutTensors(s.flat_samples(), action_spec(action_space).to_training, torch.device("cpu")).take(
        torch.tensor([5, 0])
    )
    assert batch.obs.dtype == torch.float64 and batch.obs.shape == (2, 4)  # the buffer's dtype; the forward casts
    if isinstance(action_space, spaces.Discrete):
        assert batch.actions.dtype == torch.int64 and batch.actions.tolist() == [5, 0]  # env 1, step 2 first
    else:
        assert batch.actions.dtype == torch.float32 and batch.actions.shape == (2, 2)
    assert all(t.shape == (2,) for t in (batch.old_values, batch.old_log_prob, batch.advantages, batch.returns))


def test_update_counts_epochs_and_logs_sb3s_keys() -> None:
    torch.manual_seed(0)
    np.random.seed(0)
    policy = ActorCritic(spaces.Box(-1, 1, (3,), np.float32), spaces.Box(-1, 1, (1,), np.float32))
    optimizer = torch.optim.Adam(policy.parameters(), lr=1e-3, eps=1e-5)
    s = RolloutStorage(policy.observation_space, policy.action_space, n_steps=8, n_envs=2)
    rng = np.random.default_rng(0)
    s.env_obs["obs"][...] = rng.normal(size=s.env_obs["obs"].shape)
    s.advantages[...], s.returns[...] = rng.normal(size=(8, 2)), rng.normal(size=(8, 2))
    settings = UpdateSettings(
        learning_rate=1e-3,
        clip_range=0.2,
        clip_range_vf=None,
        n_epochs=3,
        batch_size=6,
        normalize_advantage=True,
        ent_coef=0.0,
        vf_coef=0.5,
        max_grad_norm=0.5,
        target_kl=None,
    )
    logs, n_updates = ppo_update(policy, optimizer, s, settings, 7, torch.device("cpu"))
    assert n_updates == 10 and logs["train/n_updates"] == 10
    assert list(logs) == [
        "train/entropy_loss",
        "train/policy_gradient_loss",
        "train/value_loss",
        "train/approx_kl",
        "train/clip_fraction",
        "train/loss",
        "train/explained_variance",
        "train/std",
        "train/n_updates",
        "train/clip_range",
    ]
    assert optimizer.state[policy.log_std]["step"] == 9  # 3 epochs x 3 minibatches of 16 samples (6, 6, 4)


IMAGE = spaces.Box(0, 255, (3, 36, 36), np.uint8)
STEP_CASES = {  # (observation space, action space, policy keywords)
    "box": (spaces.Box(-1, 1, (10,), np.float32), spaces.Box(-1, 1, (2,), np.float32), {}),
    "gsde": (spaces.Box(-1, 1, (10,), np.float32), spaces.Box(-1, 1, (2,), np.float32), dict(use_sde=True)),
    "discrete": (spaces.Box(-1, 1, (4,), np.float32), spaces.Discrete(3), {}),
    "multi_discrete": (spaces.Box(-1, 1, (4,), np.float32), spaces.MultiDiscrete([3, 2]), {}),
    "multi_binary": (spaces.Box(-1, 1, (4,), np.float32), spaces.MultiBinary(3), {}),
    "dict_cnn_separate": (
        spaces.Dict({"img": IMAGE, "vec": spaces.Box(-1, 1, (3,), np.float32)}),
        spaces.Discrete(2),
        dict(share_features_extractor=False),
    ),
    "cnn_relu": (IMAGE, spaces.Box(-1, 1, (2,), np.float32), dict(model="cnn", activation_fn="relu")),
}


def _loss(policy: ActorCritic, batch: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    space = policy.observation_space
    subspaces = space.spaces if isinstance(space, spaces.Dict) else {None: space}
    obs = {
        k: torch.randint(0, 255, (batch, *s.shape), generator=g).float()
        if s.dtype == np.uint8
        else torch.randn(batch, *s.shape, generator=g)
        for k, s in subspaces.items()
    }
    obs = obs if isinstance(space, spaces.Dict) else obs[None]
    with torch.no_grad():
        actions, _, _ = policy(obs)
    values, log_prob, entropy = policy.evaluate_actions(
        obs, actions.float() if not isinstance(policy.action_space, spaces.Discrete) else actions.long().flatten()
    )
    return values.pow(2).mean() - log_prob.mean() * 0.7 - 0.01 * entropy.mean()


@pytest.mark.parametrize("case", list(STEP_CASES))
def test_gradient_step_gives_the_bits_of_torchs_calls(case: str) -> None:
    """zero_grad, clip_grad_norm_ and Adam.step as sb3 calls them, against GradientStep's: the same
    gradients, norms, parameters and optimizer state_dict (param groups included), step after step,
    from the step that creates Adam's state on."""
    obs_space, action_space, kwargs = STEP_CASES[case]
    sides = []
    for _ in range(2):
        torch.manual_seed(0)
        policy = ActorCritic(obs_space, action_space, **kwargs)
        sides.append((policy, torch.optim.Adam(policy.parameters(), lr=3e-3, eps=1e-5)))
    (ref, ref_opt), (fast, fast_opt) = sides
    step = GradientStep(fast, fast_opt)
    assert step.adam_groups, "sb3's Adam takes the fast path"
    for i in range(4):
        torch.manual_seed(100 + i)  # the same action draws on both sides
        ref_opt.zero_grad()
        _loss(ref, 32, i).backward()
        ref_norm = torch.nn.utils.clip_grad_norm_(ref.parameters(), 0.5 if i % 2 else 1e3)  # clipping and not
        ref_opt.step()
        torch.manual_seed(100 + i)
        step.zero_grad()
        _loss(fast, 32, i).backward()
        fast_norm = step.clip_grad_norm(0.5 if i % 2 else 1e3)
        step.adam_step()
        assert torch.equal(ref_norm, fast_norm)
        for a, b in zip(ref.parameters(), fast.parameters()):
            assert torch.equal(a, b) and torch.equal(a.grad, b.grad) and a.grad.stride() == b.grad.stride()
        assert same_values(ref_opt.state_dict(), fast_opt.state_dict())
    assert fast_opt.state_dict()["param_groups"][0]["foreach"] is None  # what sb3's zip holds: nothing written


def test_gradient_step_falls_back_where_torchs_step_differs() -> None:
    """A parameter without a gradient is skipped by Adam (torch's own step runs); amsgrad is not the fast path."""
    torch.manual_seed(0)
    policy = ActorCritic(spaces.Box(-1, 1, (3,), np.float32), spaces.Box(-1, 1, (1,), np.float32))
    assert GradientStep(policy, torch.optim.Adam(policy.parameters(), amsgrad=True)).adam_groups == []
    optimizer = torch.optim.Adam(policy.parameters(), lr=1e-3)
    step = GradientStep(policy, optimizer)
    for _ in range(2):
        step.zero_grad()
        policy.predict_values(torch.randn(4, 3)).sum().backward()  # the actor gets no gradient
        step.clip_grad_norm(0.5)
        step.adam_step()
    assert policy.log_std not in optimizer.state and optimizer.state[policy.value_net.weight]["step"] == 2


LEAN_CASES = {  # observation space, policy keywords
    "vector": (spaces.Box(-1, 1, (10,), np.float32), {}),
    "float64_matrix_relu": (spaces.Box(-1, 1, (3, 4), np.float64), dict(activation_fn="relu", net_arch=[32])),
}


@pytest.mark.parametrize("case", list(LEAN_CASES))
def test_gaussian_evaluate_gives_the_bits_of_evaluate_actions_and_their_gradients(case: str) -> None:
    """The lean evaluation builds the same autograd graph: same outputs, same gradients of a loss of all three."""
    obs_space, kwargs = LEAN_CASES[case]
    torch.manual_seed(0)
    policy = ActorCritic(obs_space, spaces.Box(-1, 1, (3,), np.float32), log_std_init=-0.4, **kwargs)
    evaluate = GaussianEvaluate.of(policy)
    assert evaluate is not None
    g = torch.Generator().manual_seed(1)
    obs = torch.randn(64, *obs_space.shape, generator=g, dtype=torch.float64).to(
        torch.from_numpy(np.zeros(0, obs_space.dtype)).dtype
    )
    actions = torch.randn(64, 3, generator=g)
    grads = []
    for outputs in (policy.evaluate_actions(obs, actions), evaluate(obs, actions)):
        policy.zero_grad(set_to_none=True)
        values, log_prob, entropy = outputs
        (
            values.flatten().pow(2).mean() - (log_prob.exp() * torch.linspace(-1, 1, 64)).mean() - 0.01 * entropy.mean()
        ).backward()
        grads.append(([o.detach() for o in outputs], [p.grad.clone() for p in policy.parameters()]))
    (ref_out, ref_grads), (out, lean_grads) = grads
    assert all(torch.equal(a, b) for a, b in zip(ref_out, out))
    assert all(torch.equal(a, b) for a, b in zip(ref_grads, lean_grads))


def test_gaussian_evaluate_only_where_it_applies() -> None:
    box, image = spaces.Box(-1, 1, (4,), np.float32), spaces.Box(0, 255, (3, 36, 36), np.uint8)
    action = spaces.Box(-1, 1, (2,), np.float32)
    assert GaussianEvaluate.of(ActorCritic(box, spaces.Discrete(2))) is None
    assert GaussianEvaluate.of(ActorCritic(box, action, use_sde=True)) is None
    assert GaussianEvaluate.of(ActorCritic(image, action, model="cnn")) is None
    assert GaussianEvaluate.of(ActorCritic(spaces.Dict({"a": box}), action)) is None
    assert GaussianEvaluate.of(ActorCritic(box, action, share_features_extractor=False)) is None
