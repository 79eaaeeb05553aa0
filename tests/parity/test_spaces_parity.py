"""The rest of sb3's PPO against sb3, exact: gSDE, MultiDiscrete and MultiBinary actions, and every
observation space sb3 takes (Discrete, MultiDiscrete, MultiBinary, Dict of them), for network
construction, sampling (with the lean rollout step), evaluation, and whole short runs."""

import warnings

import numpy as np
import pytest
import torch
from gymnasium import spaces
from stable_baselines3.common.policies import ActorCriticPolicy, MultiInputActorCriticPolicy

from ppo_dict.algo.rollout.rollout_step import PolicyStep
from ppo_dict.core.config import Config
from tests.parity.sides import assert_same_record, assert_same_value, build_policies, run_ours, run_sb3

BOX = spaces.Box(-1.0, 1.0, (5,), np.float32)
LEAVES = spaces.Dict({"md": spaces.MultiDiscrete([3, 2]), "mb": spaces.MultiBinary(3), "cell": spaces.Discrete(4), "vec": BOX})
SDE = dict(use_sde=True)
SDE_DIAGONAL = dict(use_sde=True, full_std=False, use_expln=True, log_std_init=0.4)
#: name: (sb3 policy class, observation space, action space, keyword arguments for both)
CASES = {
    "multi_discrete_actions": (ActorCriticPolicy, BOX, spaces.MultiDiscrete([3, 4, 2]), {}),
    "multi_binary_actions": (ActorCriticPolicy, BOX, spaces.MultiBinary(4), {}),
    "gsde": (ActorCriticPolicy, BOX, spaces.Box(-1, 1, (3,), np.float32), SDE),
    "gsde_diagonal_expln": (ActorCriticPolicy, BOX, spaces.Box(-2, 2, (2,), np.float32), SDE_DIAGONAL),
    "multi_discrete_obs": (ActorCriticPolicy, spaces.MultiDiscrete([3, 2, 5]), spaces.Discrete(3), {}),
    "multi_binary_2d_obs": (ActorCriticPolicy, spaces.MultiBinary([2, 3]), spaces.Box(-1, 1, (2,), np.float32), {}),
    "dict_of_every_leaf": (MultiInputActorCriticPolicy, LEAVES, spaces.MultiBinary(3), dict(share_features_extractor=False)),
}


def build_both(name: str, seed: int = 3):
    sb3_cls, obs_space, act_space, kwargs = CASES[name]
    return build_policies(sb3_cls, obs_space, act_space, kwargs, kwargs, seed)


@pytest.mark.parametrize("name", list(CASES))
def test_init_exact(name: str) -> None:
    """The same parameters, names and order, and the same torch RNG draws (gSDE samples while it builds)."""
    sb3, sb3_rng, ours, our_rng = build_both(name)
    assert_same_value(sb3.state_dict(), ours.state_dict(), "initial state_dict")
    assert torch.equal(sb3_rng, our_rng), "construction consumed the torch RNG differently"
    assert [n for n, _ in ours.named_parameters()] == [n for n, _ in sb3.named_parameters()]
    assert ours.features_dim == sb3.features_dim
    if ours.use_sde:
        assert_same_value(
            sb3.action_dist.exploration_mat.detach(), ours.action_spec.gsde.exploration_mat, "first exploration matrix"
        )


def random_batch(space: spaces.Space, n: int, rng: np.random.Generator):
    """A batch as the rollout storage holds it (Discrete as [n, 1])."""
    if isinstance(space, spaces.Dict):
        return {k: random_batch(sub, n, rng) for k, sub in space.spaces.items()}
    if isinstance(space, spaces.Discrete):
        return torch.as_tensor(rng.integers(0, space.n, size=(n, 1)))
    if isinstance(space, spaces.MultiDiscrete):
        return torch.as_tensor(rng.integers(0, space.nvec, size=(n, len(space.nvec))))
    if isinstance(space, spaces.MultiBinary):
        return torch.as_tensor(rng.integers(0, 2, size=(n, *space.shape)).astype(np.int8))
    return torch.as_tensor(rng.uniform(-1, 1, size=(n, *space.shape)).astype(space.dtype))


@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("n_envs", [1, 2, 8])
def test_sampling_lean_step_and_evaluation_exact(name: str, n_envs: int) -> None:
    """sb3's forward, ours and the lean rollout step: the same actions, values, log-probs and RNG draws;
    then evaluate_actions and predict_values. gSDE draws one exploration matrix per env first (bmm path)."""
    sb3, _, ours, _ = build_both(name)
    ours.load_state_dict(sb3.state_dict())
    obs = random_batch(CASES[name][1], n_envs, np.random.default_rng(n_envs))
    if ours.use_sde:
        for policy in (sb3, ours):
            torch.manual_seed(5)
            policy.reset_noise(n_envs)
        assert_same_value(
            sb3.action_dist.exploration_matrices.detach(), ours.action_spec.gsde.exploration_matrices, "exploration matrices"
        )
    outputs, rng_states = [], []
    for forward in (sb3, ours, PolicyStep(ours, n_envs)):
        torch.manual_seed(11)
        with torch.no_grad():
            outputs.append(forward(obs))
        rng_states.append(torch.get_rng_state())
    for other, rng in zip(outputs[1:], rng_states[1:]):
        for what, x, y in zip(("actions", "values", "log_probs"), outputs[0], other):
            assert_same_value(x, y, what)
        assert torch.equal(rng_states[0], rng)
    actions = outputs[0][0].float()
    for what, x, y in zip(
        ("values", "log_prob", "entropy"), sb3.evaluate_actions(obs, actions), ours.evaluate_actions(obs, actions)
    ):
        assert_same_value(x.detach(), y.detach(), f"evaluate_actions {what}")
    assert_same_value(sb3.predict_values(obs).detach(), ours.predict_values(obs).detach(), "predict_values")
    torch.manual_seed(11)
    deterministic = sb3(obs, deterministic=True)[0]
    assert_same_value(deterministic, ours(obs, deterministic=True)[0], "deterministic actions")


TOY = dict(env="gym_PPODictToy-v0", gym_packages=("ppo_dict.envs.toy",), num_workers=0)
RUNS = {
    # gSDE: matrices drawn at rollout start, every 4 steps (twice at step 0), one per env (bmm); timeouts bootstrapped
    "gsde_sample_freq_4": Config(
        env="gym_Pendulum-v1",
        n_envs=2,
        n_steps=64,
        batch_size=32,
        n_epochs=2,
        use_sde=True,
        sde_sample_freq=4,
        seed=1,
        total_timesteps=4 * 128,
        num_workers=0,
    ),
    # gSDE once per rollout, one env (mm path), one std per latent feature, expln
    "gsde_diagonal_expln_one_env": Config(
        env="gym_Pendulum-v1",
        n_envs=1,
        n_steps=64,
        batch_size=32,
        n_epochs=2,
        use_sde=True,
        full_std=False,
        use_expln=True,
        log_std_init=-1.0,
        seed=2,
        total_timesteps=3 * 64,
        num_workers=0,
    ),
    "multi_discrete": Config(
        **TOY,
        env_kwargs=dict(observation="multi_discrete", action="multi_discrete"),
        n_envs=2,
        n_steps=32,
        batch_size=32,
        n_epochs=2,
        seed=3,
        total_timesteps=3 * 64,
    ),
    # MultiBinary both ways, with reward normalisation (an integer observation is not normalised, as sb3's norm_obs_keys)
    "multi_binary_normalized_reward": Config(
        **TOY,
        env_kwargs=dict(observation="multi_binary", action="multi_binary"),
        n_envs=2,
        n_steps=32,
        batch_size=32,
        n_epochs=2,
        normalize=True,
        seed=4,
        total_timesteps=3 * 64,
    ),
    # every leaf in a Dict, the Box key normalised, separate extractors
    "dict_of_every_leaf_normalized": Config(
        **TOY,
        env_kwargs=dict(observation="dict", action="discrete"),
        n_envs=3,
        n_steps=32,
        batch_size=48,
        n_epochs=2,
        normalize=True,
        share_features_extractor=False,
        seed=5,
        total_timesteps=3 * 96,
    ),
    "discrete_obs_box_actions": Config(
        **TOY,
        env_kwargs=dict(observation="discrete", action="box"),
        n_envs=2,
        n_steps=32,
        batch_size=32,
        n_epochs=2,
        seed=6,
        total_timesteps=3 * 64,
    ),
}


def run_both(cfg: Config):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return run_sb3(cfg), run_ours(cfg)


@pytest.mark.parametrize("name", list(RUNS))
def test_whole_run_bit_exact(name: str) -> None:
    sb3, ours = run_both(RUNS[name])
    assert_same_record(sb3, ours)


def test_runs_exercise_what_they_claim() -> None:
    """Guards: the gSDE cadence changes the actions (so the parity run tests it); the toy runs have
    terminations and truncations; the normalised dict run normalises its Box key only."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        every_4 = run_ours(RUNS["gsde_sample_freq_4"])
        once = run_ours(RUNS["gsde_sample_freq_4"].replace(sde_sample_freq=-1))
        dict_run = run_ours(RUNS["dict_of_every_leaf_normalized"])
    assert not np.array_equal(every_4.rollouts[0]["actions"][4:], once.rollouts[0]["actions"][4:])
    assert every_4.last_logs["train/std"] > 0 and "train/std" not in dict_run.last_logs
    assert list(dict_run.normalizer["obs"]) == ["box"]
    starts = np.concatenate([r["episode_starts"][1:] for r in dict_run.rollouts])
    assert starts.sum() > 3 * 3 * 1  # truncations every 20 steps plus random terminations


@pytest.mark.parametrize(
    "name, mp_method",
    [
        ("dict_of_every_leaf_normalized", "forkserver"),
        ("multi_binary_normalized_reward", "spawn"),
        ("gsde_sample_freq_4", "forkserver"),
    ],
)
def test_worker_pool_is_bit_exact(name: str, mp_method: str) -> None:
    """The same runs through worker processes (the main process steps some envs itself): every
    leaf of the observation and the actions travel through shared memory."""
    from ppo_dict.vec import make_env_pool

    cfg = RUNS[name].replace(num_workers=RUNS[name].n_envs, mp_method=mp_method)
    sb3, ours = run_sb3(cfg), run_ours(cfg, make_env_pool(cfg))
    assert_same_record(sb3, ours)
