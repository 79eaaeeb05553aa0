"""sb3's ``_setup_model`` for an algorithm of sb3's API: the envs' pool, the seeds, the policy and its optimizer, the trainer.

The policy is built as sb3 builds it, so the same seed gives the same weights: ppo_dict's networks
(sb3's modules in sb3's order and initialisation, with the features extractor and activation classes
``policy_kwargs`` names), or a policy class of the script's own (a subclass of sb3's ``ActorCriticPolicy``,
or sb3-contrib's ``MaskableActorCriticPolicy``) called as sb3's ``_setup_model`` calls it, which the
trainer then trains through its own methods (``ppo_dict.algo.networks.own_policy``).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
from gymnasium import spaces

from ppo_dict.algo.networks.own_policy import OwnMethodsPolicy, policy_object
from ppo_dict.algo.ppo import PPO as Trainer
from ppo_dict.algo.networks.recurrent_policy import build_policy
from ppo_dict.api.arguments import built_here, own_policy_class
from ppo_dict.api.sb3_policy import as_sb3_policy
from ppo_dict.api.learning import LoggerBridge
from ppo_dict.core.parse import make_schedule
from ppo_dict.run.run_plan import device_notice
from ppo_dict.vec import make_env_pool, watchdog
from ppo_dict.vec.vec_env_pool import VecEnvPool

#: an algorithm of sb3's API (``ppo_dict.api.base.Algorithm``, which imports this module)
Algorithm = Any


def setup_model(algorithm: Algorithm) -> None:
    """sb3's ``_setup_model``: the envs' pool (its processes), the seeds, then the policy and its optimizer
    (a policy that cannot be built stops the pool's processes before its error goes on)."""
    pool = make_pool(algorithm)
    try:
        algorithm.set_random_seed(algorithm.seed)
        spaces_ = (
            (algorithm.observation_space, algorithm.action_space)
            if pool is None
            else (pool.observation_space, pool.action_space)
        )
        policy, optimizer = build(algorithm, *spaces_)
    except BaseException:
        if pool is not None:
            pool.close()
        raise
    if pool is None:  # a model without envs (loaded to predict) has a policy alone
        algorithm._policy, algorithm._optimizer = policy, optimizer
        return
    start_trainer(algorithm, pool, policy, optimizer)
    notice = device_notice(algorithm.device, 'device="cpu"')
    if notice:
        print(notice, flush=True)


def build(
    algorithm: Algorithm, observation_space: spaces.Space, action_space: spaces.Space
) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    """sb3's policy construction: the networks (sb3's modules in sb3's order and initialisation; a features
    extractor class of ``policy_kwargs`` called as sb3 calls it, its ``activation_fn`` class), then
    ``optimizer_class(parameters, lr=lr_schedule(1), **optimizer_kwargs)``: Adam with ``eps=1e-5`` unless both are
    given, as sb3's. A policy class of the script's own builds both itself, as sb3's ``_setup_model`` calls it."""
    own = own_policy_class(algorithm._arguments["policy"], algorithm.spec.policy_base)
    if own is not None:
        return build_own(algorithm, own)
    given = built_here(algorithm.policy_kwargs)
    modules = {k: v for k, v in given.items() if not k.startswith("optimizer")}  # the extractor's class, an activation's
    policy = build_policy(algorithm.cfg, observation_space, action_space, **modules).to(algorithm.device)
    optimizer_class = given.get("optimizer_class") or torch.optim.Adam
    optimizer_kwargs = given.get("optimizer_kwargs")
    if optimizer_kwargs is None:  # sb3's ActorCriticPolicy: Adam's eps=1e-5 only where no optimizer_kwargs are given
        optimizer_kwargs = {"eps": 1e-5} if optimizer_class is torch.optim.Adam else {}
    policy.optimizer = optimizer_class(
        policy.parameters(), lr=make_schedule(algorithm.cfg.learning_rate)(1), **optimizer_kwargs
    )
    return as_sb3_policy(algorithm, policy), policy.optimizer


def build_own(algorithm: Algorithm, policy_class: type) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    """``policy_class(observation_space, action_space, lr_schedule, [use_sde=...,] **policy_kwargs).to(device)`` as
    sb3's ``OnPolicyAlgorithm._setup_model`` (sb3-contrib's MaskablePPO passes no ``use_sde``), on the spaces sb3's
    model holds (the training vec env's: images channel-first under its VecTransposeImage)."""
    from stable_baselines3.common.utils import FloatSchedule

    use_sde = {} if algorithm.cfg.action_masks else {"use_sde": algorithm.cfg.use_sde}
    policy = policy_class(
        algorithm.observation_space,
        algorithm.action_space,
        FloatSchedule(algorithm._arguments["learning_rate"]),
        **use_sde,
        **algorithm.policy_kwargs,
    )
    policy = policy.to(algorithm.device)
    return policy, policy.optimizer


def make_pool(algorithm: Algorithm) -> Any:
    """The pool the trainer steps: the envs' own recipe in ppo_dict's pool, or the sb3 vec env itself."""
    envs, cfg = algorithm.envs, algorithm.cfg
    if envs is None:
        return None
    if envs.facade is None:
        return VecEnvPool(algorithm.env, cfg.n_steps, masks=cfg.action_masks, label=envs.label)
    # the vec env's recipe, its envs built again in the trainer's pool: no infos unless asked, nothing from the main
    # module, episode statistics as sb3 reads them (from its Monitor's info["episode"])
    backend = dataclasses.replace(envs.backend, record_infos=False, needs_main=False, episodes_from_infos=True)
    if cfg.layout().main:  # the envs this process steps get step_timeout as the command line's do
        watchdog.start_for_library(cfg.step_timeout, backend.label)
    pool = make_env_pool(cfg, backend)
    envs.facade.attach(pool)  # the vec env the script holds steps through the trainer's pool from now on
    return pool


def start_trainer(algorithm: Algorithm, pool: Any, policy: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
    """The trainer on ``pool``, training ``policy`` with ``optimizer`` (a policy of the script's own class through its
    methods)."""
    policy = policy_object(policy)
    trained = (
        policy
        if own_policy_class(type(policy), algorithm.spec.policy_base) is None
        else OwnMethodsPolicy(policy, use_sde=algorithm.cfg.use_sde, masked=algorithm.cfg.action_masks)
    )
    trainer = algorithm.trainer = Trainer(
        algorithm.cfg, pool, LoggerBridge(algorithm), device=algorithm.device, policy=trained, optimizer=optimizer
    )
    trainer.timing_logs = False  # sb3's keys only
    policy.optimizer = trainer.optimizer  # sb3's name: policy.optimizer
    vn = algorithm.envs.vec_normalize
    if vn is not None:  # the trainer's statistics are the VecNormalize's own objects: EvalCallback and save() see them live
        norm = trainer.normalizer
        if vn.norm_obs:
            norm.obs_rms = dict(vn.obs_rms) if isinstance(vn.obs_rms, dict) else {next(iter(norm.obs_rms)): vn.obs_rms}
        norm.ret_rms = vn.ret_rms
    algorithm._predictor = None
