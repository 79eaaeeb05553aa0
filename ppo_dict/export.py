"""Writing a trained model: ppo_dict's own file, and a zip that sb3's ``PPO.load`` opens.

Files are written atomically (temp file in the same directory, fsync, rename, fsync of the
directory): a crash mid-write leaves the previous file intact. ppo_dict's file holds only tensors
and plain values, so it loads with ``torch.load(weights_only=True)`` (no code is unpickled).
"""
from __future__ import annotations

import json
import os
import tempfile
from typing import TYPE_CHECKING, Any, Callable

import numpy as np
import torch
from gymnasium import spaces

from ppo_dict.config import make_schedule
from ppo_dict.errors import CheckpointError
from ppo_dict.policy import ACTIVATION_CLASSES

if TYPE_CHECKING:
    from ppo_dict.ppo import PPO

MODEL_FILE = "model.pt"


def atomic_write(path: str, write: Callable[[Any], None], mode: str = "wb") -> None:
    """Write ``path`` through ``write(file)`` so that readers see the old file or the whole new one."""
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, mode) as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    dir_fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def _to_tensors(value: Any) -> Any:
    """numpy arrays -> tensors, recursively, so the file loads with ``weights_only=True``."""
    if isinstance(value, (np.ndarray, np.generic)):  # 0-d statistics are numpy scalars
        return torch.from_numpy(np.array(value))
    if isinstance(value, dict):
        return {k: _to_tensors(v) for k, v in value.items()}
    return value


def _config_dict(model: "PPO") -> dict[str, Any]:
    return {k: (list(v) if isinstance(v, tuple) else v) for k, v in model.cfg.to_dict().items()}


def model_state(model: "PPO") -> dict[str, Any]:
    """Everything a trained model is: weights, optimizer, normaliser statistics, counters, config."""
    return {
        "format": "ppo_dict/1",
        "policy": model.policy.state_dict(),
        "optimizer": model.optimizer.state_dict(),
        "normalizer": None if model.normalizer is None else _to_tensors(model.normalizer.state_dict()),
        "num_timesteps": model.num_timesteps,
        "n_updates": model.n_updates,
        "config": _config_dict(model),
    }


def save_model(model: "PPO", directory: str) -> str:
    """Write ``directory/model.pt`` and ``directory/config.json``; returns the model file's path."""
    path = os.path.join(directory, MODEL_FILE)
    atomic_write(path, lambda f: torch.save(model_state(model), f))
    atomic_write(os.path.join(directory, "config.json"), lambda f: json.dump(_config_dict(model), f, indent=2), mode="w")
    return path


def load_model_state(path: str) -> dict[str, Any]:
    """Read a file written by :func:`save_model` (weights only: no code is unpickled)."""
    if os.path.isdir(path):
        path = os.path.join(path, MODEL_FILE)
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:
        raise CheckpointError(f"cannot load {path}: {type(exc).__name__}: {exc}") from exc
    if not isinstance(state, dict) or state.get("format") != "ppo_dict/1":
        raise CheckpointError(f"{path} is not a ppo_dict model file (no 'format': 'ppo_dict/1')")
    return state


def sb3_policy_name(observation_space: spaces.Space, model: str) -> str:
    if isinstance(observation_space, spaces.Dict):
        return "MultiInputPolicy"
    return "CnnPolicy" if model == "cnn" else "MlpPolicy"


def export_sb3(model: "PPO", path: str) -> str:
    """Write an sb3 ``PPO`` zip whose policy parameters equal ours exactly.

    Needs stable-baselines3 (the ``test`` extra). The policy's module names are sb3's, so the
    state dict loads unchanged; the optimizer state and step counter are carried over too.
    """
    from stable_baselines3 import PPO as SB3PPO  # optional dependency of this feature only
    from stable_baselines3.common.vec_env import DummyVecEnv

    from envs import make_env

    cfg, policy = model.cfg, model.policy
    if not path.endswith(".zip"):
        path += ".zip"
    vec_env = DummyVecEnv([lambda: make_env(model.pool.spec)])
    try:
        sb3_model = SB3PPO(
            sb3_policy_name(policy.observation_space, cfg.model),
            vec_env,
            learning_rate=make_schedule(cfg.learning_rate),
            n_steps=cfg.n_steps,
            batch_size=cfg.minibatch_size,
            n_epochs=cfg.n_epochs,
            gamma=cfg.gamma,
            gae_lambda=cfg.gae_lambda,
            clip_range=make_schedule(cfg.clip_range),
            clip_range_vf=None if cfg.clip_range_vf is None else make_schedule(cfg.clip_range_vf),
            normalize_advantage=cfg.normalize_advantage,
            ent_coef=cfg.ent_coef,
            vf_coef=cfg.vf_coef,
            max_grad_norm=cfg.max_grad_norm,
            target_kl=cfg.target_kl,
            seed=cfg.seed,
            device="cpu",
            policy_kwargs=dict(
                net_arch=policy.net_arch,
                activation_fn=ACTIVATION_CLASSES[cfg.activation_fn],
                ortho_init=cfg.ortho_init,
                log_std_init=cfg.log_std_init,
                share_features_extractor=cfg.share_features_extractor,
                normalize_images=cfg.normalize_images,
            ),
        )
        sb3_model.policy.load_state_dict({k: v.cpu() for k, v in policy.state_dict().items()})
        sb3_model.policy.optimizer.load_state_dict(model.optimizer.state_dict())
        sb3_model.num_timesteps = model.num_timesteps
        atomic_write(path, sb3_model.save)
    finally:
        vec_env.close()
    return path
