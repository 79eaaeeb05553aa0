"""GAE and one PPO update, teacher-forced from identical state (docs/sb3_parity.md tests 3, 9-14)."""

import warnings

import numpy as np
import pytest
import torch
from gymnasium import spaces
from stable_baselines3.common.buffers import RolloutBuffer

from ppo_dict.algo.training.update import compute_gae
from ppo_dict.core.config import Config
from tests.parity.sides import assert_same_value, make_ours, make_sb3


def test_gae_exact_and_close_to_float64() -> None:
    rng = np.random.default_rng(0)
    T, N = 37, 5
    buf = RolloutBuffer(T, spaces.Box(-1, 1, (1,)), spaces.Discrete(2), n_envs=N, gamma=0.97, gae_lambda=0.9)
    buf.rewards[:] = rng.normal(size=(T, N)).astype(np.float32)
    buf.values[:] = rng.normal(size=(T, N)).astype(np.float32)
    buf.episode_starts[:] = (rng.random((T, N)) < 0.1).astype(np.float32)
    buf.episode_starts[-1, 0] = 1.0  # an episode start at the last index
    last_values = rng.normal(size=(N, 1)).astype(np.float32)
    last_dones = rng.random(N) < 0.5
    rewards, values, starts = buf.rewards.copy(), buf.values.copy(), buf.episode_starts.copy()
    buf.compute_returns_and_advantage(torch.as_tensor(last_values), last_dones)
    adv, ret = compute_gae(rewards, values, starts, last_values.flatten(), last_dones, 0.97, 0.9)
    assert_same_value(buf.advantages, adv, "advantages")
    assert_same_value(buf.returns, ret, "returns")
    adv64, _ = compute_gae(
        rewards.astype(np.float64),
        values.astype(np.float64),
        starts.astype(np.float64),
        last_values.flatten().astype(np.float64),
        last_dones,
        0.97,
        0.9,
    )
    np.testing.assert_allclose(adv, adv64, rtol=1e-5, atol=1e-5)


BASE = dict(
    env="gym_CartPole-v1", n_envs=4, n_steps=50, batch_size=64, n_epochs=4, seed=9, total_timesteps=1000, num_workers=0
)
VARIANTS = {
    "default": {},
    "no_adv_norm_truncated_batch_of_one": dict(normalize_advantage=False, batch_size=199),  # 200 % 199 = 1
    "clip_range_vf": dict(clip_range_vf=0.05),
    "target_kl": dict(target_kl=1e-4, learning_rate=0.05),
    "continuous": dict(env="gym_Pendulum-v1", ent_coef=0.01, log_std_init=-0.3),
    # gSDE: the state-dependent scale in the loss; sb3 2.9.2's train() draws no new noise (the numpy RNG check sees it)
    "gsde": dict(env="gym_Pendulum-v1", use_sde=True, sde_sample_freq=4, ent_coef=0.01),
    "multi_discrete": dict(
        env="gym_PPODictToy-v0",
        gym_packages=("ppo_dict.envs.toy",),
        env_kwargs=dict(observation="multi_discrete", action="multi_discrete"),
        ent_coef=0.01,
    ),
    "multi_binary": dict(
        env="gym_PPODictToy-v0",
        gym_packages=("ppo_dict.envs.toy",),
        env_kwargs=dict(observation="box", action="multi_binary"),
        clip_range_vf=0.1,
    ),
}


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_one_train_teacher_forced(variant: str) -> None:
    cfg = Config(**{**BASE, **VARIANTS[variant]})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sb3 = make_sb3(cfg)
        ours = make_ours(cfg)
    total, callback = sb3._setup_learn(cfg.total_timesteps, callback=None)
    sb3.collect_rollouts(sb3.env, callback, sb3.rollout_buffer, n_rollout_steps=sb3.n_steps)
    sb3._update_current_progress_remaining(sb3.num_timesteps, total)

    # identical state on our side: weights, Adam, rollout, numpy RNG
    ours.policy.load_state_dict(sb3.policy.state_dict())
    ours.optimizer.load_state_dict(sb3.policy.optimizer.state_dict())
    buf, s = sb3.rollout_buffer, ours.storage
    s.obs["obs"][: cfg.n_steps] = buf.observations  # what the policy saw (no normalisation here: the env's own array)
    for name in ("actions", "rewards", "episode_starts", "values", "log_probs", "advantages", "returns"):
        getattr(s, name)[...] = getattr(buf, name)
    np_state, torch_state = np.random.get_state(), torch.get_rng_state()
    sb3.train()
    sb3_rng_after, sb3_torch_after = np.random.get_state(), torch.get_rng_state()
    np.random.set_state(np_state)
    torch.set_rng_state(torch_state)
    logs = ours.train(sb3._current_progress_remaining)
    assert torch.equal(sb3_torch_after, torch.get_rng_state()), (
        "train() draws from the torch RNG as sb3's does (gSDE: not at all)"
    )

    assert_same_value(sb3.policy.state_dict(), ours.policy.state_dict(), "parameters after train()")
    assert_same_value(sb3.policy.optimizer.state_dict(), ours.optimizer.state_dict(), "Adam state after train()")
    assert_same_value(
        list(sb3_rng_after), list(np.random.get_state()), "numpy RNG after train() (one permutation per started epoch)"
    )
    sb3_logs = {k: v for k, v in sb3.logger.name_to_value.items() if k.startswith("train/")}
    assert_same_value(dict(sorted(sb3_logs.items())), dict(sorted(ours.logger.current.items())), "train/* logs")
    assert logs["train/n_updates"] == sb3._n_updates
    if variant == "target_kl":
        assert sb3._n_updates < cfg.n_epochs, "the variant must stop early to test the early stop"
    ours.close()
    sb3.env.close()


def test_optimizer_matches_sb3_defaults() -> None:
    cfg = Config(**BASE)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sb3, ours = make_sb3(cfg), make_ours(cfg)
    a, b = sb3.policy.optimizer.param_groups[0], ours.optimizer.param_groups[0]
    assert type(sb3.policy.optimizer) is type(ours.optimizer) is torch.optim.Adam
    for key in ("lr", "betas", "eps", "weight_decay", "amsgrad", "foreach"):
        assert a[key] == b[key], key
    assert b["eps"] == 1e-5
    ours.close()
    sb3.env.close()
