"""sb3's file formats: a zip that sb3's ``PPO.load`` (sb3-contrib's ``MaskablePPO.load`` with masks,
``RecurrentPPO.load`` with an LSTM) opens, with a ``VecNormalize`` pickle beside it, and the sb3 keyword arguments that
mean what a config means. The trainer's own files (checkpoints, model files, the run's config) are
``ppo_dict.run.checkpoint``'s.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from gymnasium import spaces

from ppo_dict.algo.networks.policy import ACTIVATION_CLASSES, policy_settings
from ppo_dict.core.files import atomic_write
from ppo_dict.interop.schedules import zip_schedule
from ppo_dict.interop.vecnormalize import STATISTICS_FILES, write_npz

if TYPE_CHECKING:
    from ppo_dict.algo.ppo import PPO
    from ppo_dict.core.config import Config


def sb3_policy_name(observation_space: spaces.Space, model: str) -> str:
    """sb3's policy alias for ``--model`` (sb3-contrib's RecurrentPPO's ``*LstmPolicy`` for a recurrent model)."""
    lstm = "Lstm" if model.endswith("_lstm") else ""
    if isinstance(observation_space, spaces.Dict):
        return f"MultiInput{lstm}Policy"
    return f"Cnn{lstm}Policy" if model.startswith("cnn") else f"Mlp{lstm}Policy"


def sb3_ppo_kwargs(cfg: "Config") -> dict[str, Any]:
    """The ``stable_baselines3.PPO`` keyword arguments that mean what ``cfg`` means.

    ``net_arch`` is passed only when set: sb3 then picks the same default ppo_dict does.
    """
    policy_kwargs = {k: v for k, v in policy_settings(cfg).items() if v is not None}
    policy_kwargs["activation_fn"] = ACTIVATION_CLASSES[cfg.activation_fn]
    return dict(
        learning_rate=zip_schedule(cfg.learning_rate),
        n_steps=cfg.n_steps,
        batch_size=cfg.minibatch_size,
        n_epochs=cfg.n_epochs,
        gamma=cfg.gamma,
        gae_lambda=cfg.gae_lambda,
        clip_range=zip_schedule(cfg.clip_range),
        clip_range_vf=None if cfg.clip_range_vf is None else zip_schedule(cfg.clip_range_vf),
        normalize_advantage=cfg.normalize_advantage,
        ent_coef=cfg.ent_coef,
        vf_coef=cfg.vf_coef,
        max_grad_norm=cfg.max_grad_norm,
        target_kl=cfg.target_kl,
        use_sde=cfg.use_sde,
        sde_sample_freq=cfg.sde_sample_freq,
        seed=cfg.seed,
        stats_window_size=cfg.stats_window_size,
        device="cpu",
        policy_kwargs=policy_kwargs,
    )


def maskable_ppo_kwargs(cfg: "Config") -> dict[str, Any]:
    """The ``sb3_contrib.MaskablePPO`` keyword arguments that mean what ``cfg`` means: sb3's PPO
    arguments less gSDE's, the policy's less the Gaussian ones (``MaskableActorCriticPolicy`` takes none)."""
    kwargs = {k: v for k, v in sb3_ppo_kwargs(cfg).items() if k not in ("use_sde", "sde_sample_freq")}
    kwargs["policy_kwargs"] = {
        k: v for k, v in kwargs["policy_kwargs"].items() if k not in ("log_std_init", "full_std", "use_expln", "squash_output")
    }
    return kwargs


def recurrent_ppo_kwargs(cfg: "Config") -> dict[str, Any]:
    """The ``sb3_contrib.RecurrentPPO`` keyword arguments that mean what ``cfg`` means: sb3's PPO
    arguments, with the LSTM's in the policy's (``RecurrentActorCriticPolicy``)."""
    kwargs = sb3_ppo_kwargs(cfg)
    kwargs["policy_kwargs"] = {**kwargs["policy_kwargs"], **cfg.lstm_settings}
    return kwargs


def sb3_kwargs(cfg: "Config") -> dict[str, Any]:
    """The keyword arguments of the sb3 class a run of ``cfg`` is (MaskablePPO's with ``--action_masks``, RecurrentPPO's
    with a recurrent model, masked or not, else PPO's)."""
    return (
        recurrent_ppo_kwargs(cfg) if cfg.recurrent else maskable_ppo_kwargs(cfg) if cfg.action_masks else sb3_ppo_kwargs(cfg)
    )


def export_sb3(ppo: "PPO", path: str) -> str:
    """Write an sb3 ``PPO`` zip (with ``--action_masks``, an sb3-contrib ``MaskablePPO`` zip; with a recurrent
    model, a ``RecurrentPPO`` zip) whose policy parameters equal ours exactly.

    Needs stable-baselines3 (the ``test`` extra; sb3-contrib for masks and LSTMs). The policy's module names
    are sb3's, so the state dict loads unchanged; the optimizer state and step counter are carried over too.
    """
    from stable_baselines3 import PPO as SB3PPO  # optional dependency of this feature only
    from stable_baselines3.common.vec_env import DummyVecEnv

    from ppo_dict.envs import make_env
    from ppo_dict.vec import env_spec

    cfg, policy = ppo.cfg, ppo.policy
    if not path.endswith(".zip"):
        path += ".zip"
    spec = env_spec(cfg)
    vec_env = DummyVecEnv([lambda: make_env(spec)])
    try:
        if cfg.action_masks:
            from sb3_contrib import MaskablePPO

            model_class = MaskablePPO
        elif cfg.recurrent:
            from sb3_contrib import RecurrentPPO

            model_class = RecurrentPPO
        else:
            model_class = SB3PPO
        sb3_model = model_class(sb3_policy_name(policy.observation_space, cfg.model), vec_env, **sb3_kwargs(cfg))
        sb3_model.policy.load_state_dict({k: v.cpu() for k, v in policy.state_dict().items()})
        sb3_model.policy.optimizer.load_state_dict(ppo.optimizer.state_dict())
        sb3_model.num_timesteps, sb3_model._n_updates = ppo.num_timesteps, ppo.n_updates
        atomic_write(path, sb3_model.save)
        if ppo.normalizer is not None:
            export_vecnormalize(ppo, vec_env, vecnormalize_path(path))
    finally:
        vec_env.close()
    return path


def vecnormalize_path(zip_path: str) -> str:
    """rl-zoo's layout: ``logs/.../<name>.zip`` has its statistics in ``logs/.../<name>/vecnormalize.pkl``."""
    return os.path.join(zip_path[: -len(".zip")], "vecnormalize.pkl")


def export_vecnormalize(ppo: "PPO", vec_env: Any, path: str) -> str:
    """Pickle a real sb3 ``VecNormalize`` holding our statistics, as ``VecNormalize.save`` does, and write them
    beside it as ``vecnormalize.npz`` (``ppo_dict.interop.vecnormalize``), which ppo_dict reads without a pickle.

    ``VecNormalize.load(path, venv)`` (and so rl-zoo's ``enjoy``) restores it; its ``obs_rms``
    (a ``RunningMeanStd``, or a dict of them for Dict observations) equals ours exactly.
    """
    import pickle

    from stable_baselines3.common.running_mean_std import RunningMeanStd as SB3RunningMeanStd
    from stable_baselines3.common.vec_env import VecNormalize

    from ppo_dict.data.storage import OBS_KEY

    norm, cfg = ppo.normalizer, ppo.cfg
    if norm is None:
        raise ValueError("export_vecnormalize: the model was trained without --normalize")
    dict_obs = isinstance(vec_env.observation_space, spaces.Dict)
    # training=True, as rl-zoo's SaveVecNormalizeCallback saves it from the training env: continuing
    # (--trained-agent) keeps updating the statistics, and rl-zoo's enjoy switches them off itself.
    # Only Box vector keys are normalised (images and integer keys are not): sb3's norm_obs_keys; a
    # non-Dict observation without any such key (Discrete...) is sb3's norm_obs=False.
    vec_normalize = VecNormalize(
        vec_env,
        training=True,
        norm_obs=norm.norm_obs and bool(norm.obs_rms),
        norm_reward=norm.norm_reward,
        clip_obs=norm.clip_obs,
        clip_reward=norm.clip_reward,
        gamma=norm.gamma,
        epsilon=norm.epsilon,
        norm_obs_keys=list(norm.obs_rms) if dict_obs else None,
    )

    def to_sb3(rms: Any) -> SB3RunningMeanStd:
        out = SB3RunningMeanStd(shape=rms.mean.shape)
        out.mean, out.var, out.count = rms.mean.copy(), rms.var.copy(), rms.count
        return out

    if isinstance(getattr(vec_normalize, "obs_rms", None), dict):
        vec_normalize.obs_rms = {key: to_sb3(rms) for key, rms in norm.obs_rms.items()}
    elif norm.obs_rms:
        vec_normalize.obs_rms = to_sb3(norm.obs_rms[OBS_KEY])
    vec_normalize.ret_rms = to_sb3(norm.ret_rms)
    atomic_write(path, lambda f: pickle.dump(vec_normalize, f))  # VecNormalize.__getstate__ drops the venv
    # the same, read with no pickle
    write_npz(os.path.join(os.path.dirname(path), STATISTICS_FILES[0]), norm, list(norm.obs_rms))
    atomic_write(
        os.path.join(os.path.dirname(path), "config.yml"),
        lambda f: f.write(
            f"normalize: {'true' if cfg.normalize else 'false'}\nn_envs: {cfg.num_envs}\npolicy: "
            f"{sb3_policy_name(ppo.policy.observation_space, cfg.model)}\n"
        ),
        mode="w",
    )
    return path
