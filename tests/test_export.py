"""Files a trained model is written to: atomic writes, the weights-only model file, sb3's keyword arguments."""

import os

import pytest
import torch

from ppo_dict.algo.ppo import PPO
from ppo_dict.core.config import Config
from ppo_dict.core.errors import CheckpointError
from ppo_dict.core.files import atomic_write, config_values, load_model_state
from ppo_dict.interop.sb3 import sb3_ppo_kwargs
from ppo_dict.run.checkpoint import model_state, save_model
from ppo_dict.vec import make_env_pool


def test_atomic_write_keeps_the_old_file_when_writing_fails(tmp_path) -> None:
    path = tmp_path / "f.bin"
    atomic_write(str(path), lambda f: f.write(b"old"))
    mode = os.stat(path).st_mode & 0o777

    def half(f) -> None:
        f.write(b"new, half")
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError, match="disk full"):
        atomic_write(str(path), half)
    assert path.read_bytes() == b"old" and os.listdir(tmp_path) == ["f.bin"]  # no temp file left behind
    umask = os.umask(0)
    os.umask(umask)
    assert mode == 0o666 & ~umask  # the permissions open() would have given


def test_model_file_loads_weights_only_and_holds_everything(tmp_path) -> None:
    cfg = Config(env="gym_CartPole-v1", n_envs=2, num_workers=0, n_steps=16, batch_size=16, seed=3, normalize=True, verbose=0)
    ppo = PPO(cfg, make_env_pool(cfg))
    try:
        ppo.learn(total_timesteps=32)
        path = save_model(ppo, str(tmp_path / "model"))
        state = torch.load(path, weights_only=True)
        expected = model_state(ppo, envs=False)  # a model file holds no envs: a checkpoint does
        assert set(state) == set(expected) and state["num_timesteps"] == 32 and state["config"] == config_values(cfg)
        assert all(torch.equal(state["policy"][k], v) for k, v in expected["policy"].items())
        assert load_model_state(str(tmp_path / "model"))["format"] == "ppo_dict/1"
    finally:
        ppo.close()
    (tmp_path / "other.pt").write_bytes(b"not a model")
    with pytest.raises(CheckpointError, match=r"cannot load .*other.pt: UnpicklingError"):
        load_model_state(str(tmp_path / "other.pt"))
    torch.save({"x": torch.zeros(1)}, tmp_path / "plain.pt")
    with pytest.raises(CheckpointError, match="is not a ppo_dict model file"):
        load_model_state(str(tmp_path / "plain.pt"))


def test_sb3_keyword_arguments_mean_what_the_config_means() -> None:
    kwargs = sb3_ppo_kwargs(
        Config(learning_rate="lin_1e-3", clip_range=0.3, net_arch="32", activation_fn="relu", batch_size=32)
    )
    assert kwargs["learning_rate"](0.5) == 0.5 * 1e-3 and kwargs["clip_range"](0.1) == 0.3 and kwargs["clip_range_vf"] is None
    assert kwargs["policy_kwargs"]["net_arch"] == [32] and kwargs["policy_kwargs"]["activation_fn"] is torch.nn.ReLU
    assert "net_arch" not in sb3_ppo_kwargs(Config())["policy_kwargs"]  # sb3 then picks the default ppo_dict picks
