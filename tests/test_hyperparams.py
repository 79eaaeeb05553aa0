"""rl-zoo interop: hyperparams/ppo.yml entries, flags over the file, refused keys; vecnormalize.pkl for rl-zoo's enjoy."""
import pickle

import numpy as np
import pytest

from ppo_dict.checks import validate
from ppo_dict.cli import config_from_args
from ppo_dict.errors import ConfigError
from ppo_dict.export import load_model_state
from tests.test_main_ppo import QUICK, run_cli

ZOO = """
HalfCheetah-v4:
  normalize: true
  n_envs: 1
  policy: 'MlpPolicy'
  n_timesteps: !!float 1e6
  batch_size: 64
  n_steps: 512
  gamma: 0.98
  learning_rate: 2.0633e-05
  clip_range: lin_0.1
  policy_kwargs: "dict(
                    log_std_init=-2,
                    ortho_init=False,
                    activation_fn=nn.ReLU,
                    net_arch=dict(pi=[256, 256], vf=[256, 256])
                  )"
Reacher-v2:
  normalize: "{'norm_obs': False, 'norm_reward': True}"
  n_envs: 4
  env_wrapper: sb3_contrib.common.wrappers.TimeFeatureWrapper
  policy_kwargs: "__import__('os').system('touch PWNED')"
"""


def test_rl_zoo_entry_sets_defaults_and_flags_win(tmp_path) -> None:
    path = tmp_path / "ppo.yml"
    path.write_text(ZOO)
    cfg = config_from_args(["--env", "gym_HalfCheetah-v4", "--hyperparams", str(path), "--n_steps", "128"])
    assert (cfg.normalize, cfg.n_envs, cfg.model, cfg.total_timesteps, cfg.batch_size, cfg.gamma) == (True, 1, "mlp", 1_000_000, 64, 0.98)
    assert cfg.n_steps == 128  # the explicit flag, not the file's 512
    assert (cfg.learning_rate, cfg.clip_range) == (2.0633e-05, "lin_0.1")
    assert (cfg.log_std_init, cfg.ortho_init, cfg.activation_fn, cfg.net_arch) == (-2.0, False, "relu", {"pi": [256, 256], "vf": [256, 256]})
    validate(cfg)


def test_unsupported_keys_are_reported_with_the_other_problems(tmp_path) -> None:
    path = tmp_path / "ppo.yml"
    path.write_text(ZOO)
    cfg = config_from_args(["--env", "gym_Reacher-v2", "--hyperparams", str(path), "--gamma", "1.5"])
    assert (cfg.normalize, cfg.norm_obs, cfg.norm_reward, cfg.n_envs) == (True, False, True, 4)
    with pytest.raises(ConfigError) as info:
        validate(cfg)
    problems = info.value.problems
    assert len(problems) == 3
    assert problems[0] == "gamma=1.5: must be in [0.0, 1.0]"
    assert problems[1] == f"hyperparams {path}[Reacher-v2]: 'env_wrapper' is not supported: env wrappers from the file are not applied"
    assert problems[2].startswith(f"hyperparams {path}[Reacher-v2]: policy_kwargs=\"__import__('os').system('touch PWNED')\": ")
    assert not (tmp_path / "PWNED").exists()
    cfg = config_from_args(["--env", "gym_Hopper-v5", "--hyperparams", str(path)])
    with pytest.raises(ConfigError, match=r"no entry for gym_Hopper-v5 or Hopper-v5 \(entries: HalfCheetah-v4, Reacher-v2\)"):
        validate(cfg)


def test_export_sb3_writes_vecnormalize_pkl_that_sb3_loads(tmp_path) -> None:
    from stable_baselines3.common.vec_env import DummyVecEnv, VecNormalize

    from ppo_dict.envs import make_env, resolve_env_name

    zip_path, save_dir = tmp_path / "CartPole-v1.zip", tmp_path / "model"
    proc = run_cli("--env", "gym_CartPole-v1", "--num_workers", "0", "--n_envs", "2", *QUICK, "--normalize", "True",
                   "--norm_reward", "False", "--run_dir", str(tmp_path / "run"), "--save_path", str(save_dir), "--export_sb3", str(zip_path))
    assert proc.returncode == 0, proc.stderr
    ours = load_model_state(str(save_dir))["normalizer"]
    pkl = tmp_path / "CartPole-v1" / "vecnormalize.pkl"
    venv = DummyVecEnv([lambda: make_env(resolve_env_name("gym_CartPole-v1"))])
    loaded = VecNormalize.load(str(pkl), venv)
    assert isinstance(loaded, VecNormalize) and loaded.training is False and loaded.norm_reward is False
    assert np.array_equal(loaded.obs_rms.mean, ours["obs_rms"]["obs"]["mean"].numpy())
    assert np.array_equal(loaded.obs_rms.var, ours["obs_rms"]["obs"]["var"].numpy())
    assert loaded.obs_rms.count == float(ours["obs_rms"]["obs"]["count"])
    assert np.array_equal(loaded.ret_rms.var, ours["ret_rms"]["var"].numpy())
    with open(pkl, "rb") as f:
        assert type(pickle.load(f)).__name__ == "VecNormalize"
    assert "normalize: true" in (tmp_path / "CartPole-v1" / "config.yml").read_text()
    venv.close()
