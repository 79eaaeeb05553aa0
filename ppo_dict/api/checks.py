"""The config of an sb3-style construction, built through the command line's one path and refused by
its one check: every problem (sb3 arguments ppo_dict does not implement, values out of range,
what the env cannot do) in one :class:`~ppo_dict.core.errors.ConfigError`, before any process starts.
"""

from __future__ import annotations

from typing import Any, Optional

from ppo_dict.api.arguments import (
    built_here,
    config_values,
    model_of,
    own_policy_class,
    policy_problems,
    policy_values,
    sb3_policy_alias,
    unsupported,
)
from ppo_dict.api.envs import TrainingEnvs
from ppo_dict.core.config import Config
from ppo_dict.core.errors import ConfigError
from ppo_dict.data.actions import masking_space_problem
from ppo_dict.data.masking import METHOD
from ppo_dict.core.machine import Machine
from ppo_dict.core.ranks import RankInfo
from ppo_dict.envs import is_image_space
from ppo_dict.run.checks import machine_check
from ppo_dict.run.env_checks import env_problems, model_problem, space_problems
from ppo_dict.run.cli import read_config


def env_values(envs: Optional[TrainingEnvs], extras: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """``(config values, problems)`` the envs decide: their count, the layout their vec env asked
    for (where the keyword arguments do not), the ``VecNormalize`` ppo_dict reproduces."""
    if envs is None:
        return {"env": "none"}, []
    values: dict[str, Any] = {"env": envs.label, "n_envs": envs.vec_env.num_envs}
    problems = []
    if extras.get("n_envs") is not None and extras["n_envs"] != envs.vec_env.num_envs:
        problems.append(
            f"n_envs={extras['n_envs']}: the env given has {envs.vec_env.num_envs} envs (n_envs is for an env id or factory)"
        )
    values.update({k: v for k, v in envs.asked.items() if extras.get(k) is None})  # the keyword arguments win
    if envs.asked.get("num_workers") == 0 and extras.get("num_workers"):
        problems.append(
            f"num_workers={extras['num_workers']}: an env instance steps in this process (pass a factory, "
            "lambda: gym.make(...), to run it in workers)"
        )
    if envs.facade is None:
        values["num_workers"] = 0  # stepped by the vec env itself, in this process
        problems += [
            f"{name}={extras[name]!r}: the env is an sb3 vec env, stepped as sb3 steps it; ppo_dict's workers take "
            f"an env id, env factories or ppo_dict.make_vec_env"
            for name in ("num_workers", "envs_per_worker", "main_envs", "double_buffer")
            if extras.get(name)
        ]
    vn = envs.vec_normalize
    if vn is not None:
        values.update(
            normalize=True,
            norm_obs=vn.norm_obs,
            norm_reward=vn.norm_reward,
            clip_obs=vn.clip_obs,
            clip_reward=vn.clip_reward,
            norm_gamma=vn.gamma,
            norm_epsilon=vn.epsilon,
        )
    return values, problems


def vec_env_problems(cfg: Config, envs: TrainingEnvs) -> list[str]:
    """What the config asks of an sb3 vec env stepped as sb3 steps it: sb3's spaces, the model, masks."""
    venv = envs.vec_env
    problems = space_problems(cfg, venv.observation_space, venv.action_space)
    if not problems:
        problems += [p for p in [model_problem(cfg.model, venv.observation_space)] if p]
    if cfg.action_masks and not problems:
        problem = masking_space_problem(venv.action_space)
        if problem:
            problems.append(f"action_masks: {problem} ({envs.label})")
        elif not venv.has_attr(METHOD):  # sb3-contrib's is_masking_supported, and its words
            problems.append("env: Environment does not support action masking. Consider using ActionMasker wrapper")
    return problems


def build_config(spec: Any, arguments: dict[str, Any], extras: dict[str, Any], envs: Optional[TrainingEnvs]) -> Config:
    """The run's :class:`Config` (``spec``: the algorithm's table entry); raises one ConfigError listing every problem."""
    alias = sb3_policy_alias(arguments["policy"], spec.policy_classes)
    problems = unsupported(arguments, alias, tuple(spec.policies), spec.policy_base)
    own = own_policy_class(arguments["policy"], spec.policy_base) if alias is None else None
    values, env_problem_list = env_values(envs, extras)
    problems += env_problem_list
    observation_space = None if envs is None else envs.vec_env.observation_space
    if alias is not None and alias not in spec.policies:
        problems.append(f"policy={alias!r}: Policy {alias} unknown ({', '.join(spec.policies)})")
    model = None
    if alias in spec.policies:
        model = (
            spec.policies[alias]
            if observation_space is None
            else model_of(spec.policies[alias], observation_space, spec.model_suffix)
        )
        problems += [] if observation_space is None else policy_problems(alias, observation_space, spec.multi_input)
    elif own is not None and observation_space is not None:
        # the class builds its networks: the model only names the observation's kind
        model = model_of(None, observation_space)
    policy, policy_kwargs_problems = (
        ({}, []) if own is not None else policy_values(arguments.get("policy_kwargs"), alias, spec.policy_kwargs, spec.name)
    )
    problems += policy_kwargs_problems
    extractor = built_here(arguments.get("policy_kwargs")).get("features_extractor_class")
    if (
        getattr(extractor, "__name__", None) == "NatureCNN"
        and observation_space is not None
        and not is_image_space(observation_space)
    ):
        problems.append(
            f"policy_kwargs features_extractor_class=NatureCNN: You should use NatureCNN only with images not "
            f"with {observation_space} (sb3's words)"
        )
    values.update(config_values(arguments, extras, spec.fixed), **policy, **({} if model is None else {"model": model}))
    # a value no parser reads is listed with every other problem (the rest checked on its default)
    cfg, unreadable = read_config(values)
    problems += list(unreadable.values()) + cfg.problems()
    if envs is not None and not problems:
        found = env_problems(cfg, envs.backend) if envs.facade is not None else vec_env_problems(cfg, envs)
        if envs.facade is not None and not found:  # the pool to start: the machine's resources, judged as the command line's
            found = machine_check(cfg, envs.backend, Machine.probe(), measure_policy=True)[1]
        problems += [in_sb3_words(p, alias, spec) for p in found]
    if envs is not None and torchrun_world() > 1:
        problems.append(
            f"torchrun started this script ({torchrun_world()} ranks): sb3's Python API trains in one process; "
            "train over ranks with the command line (torchrun ... -m ppo_dict.main_ppo ...), or start the script "
            "with python"
        )
    if problems:
        raise ConfigError(problems)
    return cfg


def torchrun_world() -> int:
    """The ranks torchrun started (1: a plain run)."""
    try:
        info = RankInfo.from_env()
    except ValueError:
        return 1
    return 1 if info is None else info.world


def in_sb3_words(problem: str, alias: Optional[str], spec: Any) -> str:
    """A problem of the config's ``model`` (the command line's ``--model``) said of sb3's ``policy``."""
    mlp, cnn = (f"{kind}{spec.model_suffix}" for kind in ("mlp", "cnn"))
    by_model = {model: name for name, model in spec.policies.items() if model is not None}
    if problem.startswith(f"model={mlp!r}: the observation holds images"):
        return (
            f"policy={alias!r}: the observation holds images; use {by_model[cnn]} (ppo_dict does not flatten images into "
            f"an MLP)"
        )
    if problem.startswith(f"model={cnn!r}: the observation holds no image"):
        return f"policy={alias!r}: the observation holds no image; use {by_model[mlp]}"
    return problem
