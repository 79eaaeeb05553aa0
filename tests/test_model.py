"""The Model: a model file read back predicts as sb3's ``PPO.load(zip).predict`` on the same weights,
for one observation and for a batch; ``save`` and ``from_file`` round-trip; bad input is named."""

import numpy as np
import pytest
import torch

from ppo_dict.algo.model import Model
from ppo_dict.algo.ppo import PPO
from ppo_dict.core.config import Config
from ppo_dict.core.errors import CheckpointError
from ppo_dict.core.seeding import same_values
from ppo_dict.envs import make_env
from ppo_dict.interop.sb3 import export_sb3
from ppo_dict.run.checkpoint import load_for_resume, save_model
from ppo_dict.vec import env_spec, make_env_pool

CONFIGS = {
    "box": Config(env="gym_Pendulum-v1", n_envs=2, n_steps=64, batch_size=64, n_epochs=1, seed=0),  # Gaussian, clipped
    "discrete": Config(env="gym_CartPole-v1", n_envs=2, n_steps=64, batch_size=64, n_epochs=1, seed=1),
    "dict": Config(
        env="gym_PPODictMaskedJump-v0",
        gym_packages=("ppo_dict.envs.masked",),
        env_kwargs=dict(action="multi_discrete", observation="dict", size=6),
        n_envs=2,
        n_steps=32,
        batch_size=32,
        n_epochs=1,
        seed=2,
    ),
}


def trained(cfg: Config, tmp_path) -> tuple[str, str]:
    """Two updates, then the model file and sb3's zip of the same weights."""
    ppo = PPO(cfg.replace(num_workers=0, verbose=0), make_env_pool(cfg.replace(num_workers=0)))
    try:
        ppo.learn(total_timesteps=cfg.n_steps * 2 * 2)
        return save_model(ppo, str(tmp_path / "run")), export_sb3(ppo, str(tmp_path / "sb3.zip"))
    finally:
        ppo.close()


@pytest.mark.parametrize("name", list(CONFIGS))
def test_predict_is_sb3_predict_on_one_observation_and_on_a_batch(name: str, tmp_path) -> None:
    from stable_baselines3 import PPO as SB3PPO

    path, zip_path = trained(CONFIGS[name], tmp_path)
    model, sb3 = Model.from_file(path), SB3PPO.load(zip_path, device="cpu")
    env = make_env(env_spec(model.cfg))
    observations = [env.reset(seed=3)[0]]
    for _ in range(6):
        observations.append(env.step(env.action_space.sample())[0])
    env.close()
    for obs in observations:  # one observation: no batch dimension in, none out
        ours, theirs = model.predict(obs, deterministic=True)[0], sb3.predict(obs, deterministic=True)[0]
        assert ours.shape == theirs.shape and np.array_equal(ours, theirs), (ours, theirs)
    keys = observations[0].keys() if isinstance(observations[0], dict) else None
    batch = {k: np.stack([o[k] for o in observations]) for k in keys} if keys else np.stack(observations)
    ours, theirs = model.predict(batch, deterministic=True)[0], sb3.predict(batch, deterministic=True)[0]
    assert ours.shape == theirs.shape == (len(observations), *model.action_space.shape) and np.array_equal(ours, theirs)
    torch.manual_seed(0)
    sampled = model.predict(batch)[0]  # sb3's default: stochastic
    assert model.action_space.contains(sampled[0].astype(model.action_space.dtype))


def test_save_and_from_file_round_trip_and_a_saved_model_is_not_resumed(tmp_path) -> None:
    cfg = CONFIGS["box"].replace(normalize=True)
    path, _ = trained(cfg, tmp_path)
    model = Model.from_file(path)
    assert model.normalizer is not None and model.num_timesteps == cfg.n_steps * 2 * 2
    again = Model.from_file(model.save(str(tmp_path / "again.pt")))
    batch = np.random.default_rng(0).normal(size=(5, 3)).astype(np.float32)
    assert np.array_equal(model.predict(batch, deterministic=True)[0], again.predict(batch, deterministic=True)[0])
    assert same_values(model.state()["normalizer"], again.state()["normalizer"])  # the frozen statistics travel with it
    with pytest.raises(CheckpointError, match="without its training state"):  # refused before the run builds anything
        load_for_resume(str(tmp_path / "again.pt"))


def test_bad_observations_and_other_envs_are_named(tmp_path) -> None:
    path, _ = trained(CONFIGS["box"], tmp_path)
    model = Model.from_file(path)
    with pytest.raises(ValueError, match=r"observation 'obs': shape \(4,\); expected \(3,\)"):
        model.predict(np.zeros(4, np.float32))
    other = make_env(env_spec(CONFIGS["discrete"]))
    try:
        with pytest.raises(CheckpointError, match="Observation spaces do not match"):
            Model.from_file(path, env=other)
    finally:
        other.close()
