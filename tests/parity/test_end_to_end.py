"""Whole training runs, sb3 and ppo_dict side by side, compared with exact equality:
every rollout buffer, every logged value, final parameters, Adam state, RNG states."""

import warnings

import pytest

from ppo_dict.core.config import Config
from tests.parity.sides import assert_same_record, run_both, run_ours

CONFIGS = {
    # docs/sb3_parity.md test 8: discrete, CartPole
    "discrete": Config(
        env="gym_CartPole-v1", n_envs=4, n_steps=32, batch_size=64, n_epochs=2, seed=0, total_timesteps=4 * 128, num_workers=0
    ),
    # test 16: continuous with time-limit truncations (Pendulum truncates at 200 steps)
    "continuous_timeouts": Config(
        env="gym_Pendulum-v1",
        n_envs=2,
        n_steps=256,
        batch_size=128,
        n_epochs=2,
        ent_coef=0.01,
        log_std_init=-0.3,
        seed=1,
        total_timesteps=3 * 512,
        num_workers=0,
    ),
    # test 17 / 15: VecNormalize + clip_range_vf + linear schedules; total not a multiple of the rollout
    "vecnormalize_schedules": Config(
        env="gym_Pendulum-v1",
        n_envs=2,
        n_steps=128,
        batch_size=64,
        n_epochs=3,
        normalize=True,
        gamma=0.95,
        clip_range_vf="lin_0.3",
        learning_rate="lin_1e-3",
        clip_range="lin_0.2",
        seed=2,
        total_timesteps=3 * 256 + 100,
        num_workers=0,
    ),
    # test 14: target_kl early stop with a large learning rate
    "target_kl": Config(
        env="gym_CartPole-v1",
        n_envs=2,
        n_steps=64,
        batch_size=32,
        n_epochs=10,
        learning_rate=0.05,
        target_kl=0.002,
        seed=3,
        total_timesteps=3 * 128,
        num_workers=0,
    ),
    # MuJoCo: float64 obs, truncation at 50 steps, normalisation, a truncated last minibatch (192 % 60 = 12)
    "mujoco_reacher": Config(
        env="gym_Reacher-v2",
        n_envs=3,
        n_steps=64,
        batch_size=60,
        n_epochs=2,
        normalize=True,
        gamma=0.9,
        net_arch=[32, 32],
        activation_fn="relu",
        seed=4,
        total_timesteps=3 * 192,
        num_workers=0,
    ),
    # test 12: no advantage normalisation, a minibatch of size 1 at the end (129 % 64 = 1)
    "no_adv_norm_batch_of_one": Config(
        env="gym_CartPole-v1",
        n_envs=1,
        n_steps=129,
        batch_size=64,
        n_epochs=2,
        normalize_advantage=False,
        seed=5,
        total_timesteps=2 * 129,
        num_workers=0,
    ),
    # test 18: images, CnnPolicy (NatureCNN), shared extractor
    "cnn_discrete": Config(
        env="test_dummy",
        model="cnn",
        env_kwargs=dict(image_size=36, channels=1),
        n_envs=2,
        n_steps=32,
        batch_size=32,
        n_epochs=2,
        seed=6,
        total_timesteps=2 * 64,
        num_workers=0,
    ),
    # test 18: channel-last images (sb3 adds VecTransposeImage), separate extractors, continuous actions
    "cnn_separate_channel_last": Config(
        env="test_dummy",
        model="cnn",
        env_kwargs=dict(image_size=40, continuous=True, channel_last=True, episode_length=20),
        share_features_extractor=False,
        n_envs=2,
        n_steps=32,
        batch_size=32,
        n_epochs=2,
        seed=7,
        total_timesteps=2 * 64,
        num_workers=0,
    ),
    # test 19: Dict observation (rendered frames + state), MultiInputPolicy, state normalised, images not
    "multi_input_pixels": Config(
        env="gym_Reacher-v2",
        model="cnn",
        pixel_obs_wrapper=True,
        pixel_keep_state=True,
        grayscale=True,
        frame_stack=2,
        image_size=36,
        normalize=True,
        n_envs=2,
        n_steps=40,
        batch_size=40,
        n_epochs=2,
        seed=8,
        total_timesteps=2 * 80,
        num_workers=0,
    ),
    # Longer runs (21-22 updates, small networks), so that a difference that starts late shows: a
    # renderer blanked mid-run by another's teardown (the rollouts of iteration 2 on), drifting rounding.
    "long_discrete": Config(
        env="gym_CartPole-v1",
        n_envs=3,
        n_steps=16,
        batch_size=20,
        n_epochs=2,
        net_arch=[16, 16],
        seed=9,
        total_timesteps=22 * 48,
        num_workers=0,
    ),
    "long_mujoco_normalize": Config(
        env="gym_Reacher-v2",
        n_envs=3,
        n_steps=16,
        batch_size=20,
        n_epochs=2,
        normalize=True,
        net_arch=[16, 16],
        seed=10,
        total_timesteps=21 * 48,
        num_workers=0,
    ),
    "long_multi_input_pixels": Config(
        env="gym_Reacher-v2",
        model="cnn",
        pixel_obs_wrapper=True,
        pixel_keep_state=True,
        grayscale=True,
        frame_stack=2,
        image_size=36,
        normalize=True,
        n_envs=2,
        n_steps=8,
        batch_size=16,
        n_epochs=1,
        net_arch=[16],
        seed=11,
        total_timesteps=21 * 16,
        num_workers=0,
    ),
}


@pytest.mark.parametrize("name", list(CONFIGS))
def test_end_to_end_bit_exact(name: str) -> None:
    cfg = CONFIGS[name]
    assert_same_record(*run_both(cfg))


def test_target_kl_config_really_stops_early() -> None:
    """Guard the target_kl case: it must exercise the early stop, not just run 10 epochs."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ours = run_ours(CONFIGS["target_kl"])
    n_updates = ours.last_logs["train/n_updates"]
    assert n_updates < 3 * CONFIGS["target_kl"].n_epochs


def test_continuous_config_really_bootstraps_timeouts() -> None:
    """Guard: the Pendulum run must contain truncations (episode starts after step 0)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ours = run_ours(CONFIGS["continuous_timeouts"])
    assert any(r["episode_starts"][1:].any() for r in ours.rollouts)
