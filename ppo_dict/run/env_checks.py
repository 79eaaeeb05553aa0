"""What a run's config asks of its env, checked against the env itself (probed once by
``ppo_dict.run.checks.validate``): its spaces as sb3's PPO takes them, the model for its observation, the worker
layout in the backend's units, the action masks, the info keywords at an episode end, and what only gymnasium envs do.
"""

from __future__ import annotations

import time

from ppo_dict.core.config import MODELS, Config
from ppo_dict.core.layout import layout_problems
from ppo_dict.data.actions import action_space_problem, masking_space_problem
from ppo_dict.data.masking import env_mask_problem
from ppo_dict.data.storage import vector_obs_shapes
from ppo_dict.envs import contains_image, ppo_observation_problem
from ppo_dict.vec.backend import EnvBackend


def model_problem(model: str, observation_space) -> str:
    """Why ``model`` cannot take the observation, or ``""`` when it can."""
    images, suffix = contains_image(observation_space), "_lstm" if model.endswith("_lstm") else ""
    if model.removesuffix(suffix) == "mlp" and images:
        return (
            f"model={model!r}: the observation holds images; use --model cnn{suffix} (NatureCNN, or per-key NatureCNN for "
            f"dict observations)"
        )
    if model.removesuffix(suffix) == "cnn" and not images:
        return (
            f"model={model!r}: the observation holds no image; use --model mlp{suffix} (or --pixel_obs_wrapper True to "
            f"observe frames)"
        )
    return ""


def space_problems(cfg: Config, observation_space, action_space) -> list[str]:
    """What sb3's PPO refuses in the env's spaces (with sb3's reason), or in the config for them."""
    problems = [f"env={cfg.env!r}: observation space: {p}" for p in [ppo_observation_problem(observation_space)] if p]
    problems += [f"env={cfg.env!r}: action space: {p}" for p in [action_space_problem(action_space)] if p]
    if cfg.use_sde and not problems:
        problems += [
            f"use_sde=True: {p} ({cfg.env} acts in {action_space})"
            for p in [action_space_problem(action_space, use_sde=True)]
            if p
        ]
    return problems


def env_problems(cfg: Config, backend: EnvBackend) -> list[str]:
    """What the config asks of the env that it cannot do: its spaces, the model, the worker layout, gymnasium-only features."""
    problems = space_problems(cfg, backend.observation_space, backend.action_space)
    if cfg.model in MODELS and not problems:
        problems.append(model_problem(cfg.model, backend.observation_space))
    n_envs = cfg.num_envs
    layout = backend.layout_problems(n_envs, cfg.num_workers, cfg.envs_per_worker, cfg.step_timeout)
    problems += layout
    if backend.unit > 1 and not layout:  # in whole units of the backend's envs (Config.problems checked them one by one)
        problems += layout_problems(
            n_envs,
            cfg.num_workers,
            cfg.envs_per_worker,
            cfg.main_envs,
            cfg.main_steps_envs,
            cfg.double_buffer,
            backend.unit,
            backend.label,
        )
    if cfg.frame_stack > 1 and cfg.normalize and cfg.norm_obs and not cfg.pixel_obs_wrapper and not any(problems):
        stacked = list(vector_obs_shapes(backend.observation_space))  # every key is stacked, except beside rendered pixels
        if stacked:
            problems.append(
                f"frame_stack={cfg.frame_stack}: with normalize and norm_obs, sb3 and rl-zoo normalise each "
                f"observation before VecFrameStack stacks them, but ppo_dict stacks inside the env, so the "
                f"statistics of {stacked} would be over stacks (their zero padding included) and not sb3's: use "
                f"--norm_obs False, or no --frame_stack"
            )
    if cfg.action_masks and not any(problems):
        problems += masking_problems(cfg, backend)
    if cfg.double_buffer and n_envs < 2 * backend.unit:
        problems.append(
            f"double_buffer=True: n_envs={n_envs} cannot make two halves of whole units of {backend.unit} envs "
            f"({backend.label})"
        )
    if cfg.info_keywords and not backend.makes_gym_envs:
        problems.append(
            f"info_keywords={','.join(cfg.info_keywords)}: not supported for {backend.label} (not gymnasium envs: "
            f"they send no infos)"
        )
    elif cfg.info_keywords and not any(problems):
        problems.append(info_keyword_problem(cfg, backend))
    if not backend.makes_gym_envs:
        asked = {"eval_freq": cfg.eval_freq > 0, "video": cfg.video, "export_sb3": cfg.export_sb3 is not None}
        problems += [
            f"{flag}: not supported for {backend.label} yet (it builds the env alone as a gymnasium env, "
            "which this one is not)"
            for flag, on in asked.items()
            if on
        ]
    return [p for p in problems if p]


#: The info keyword check plays one env this many steps, or this many seconds, at most, to see an episode end.
INFO_PROBE_STEPS, INFO_PROBE_SECONDS = 5000, 5.0


def info_keyword_problem(cfg: Config, backend: EnvBackend) -> str:
    """The ``--info_keywords`` env 0's info lacks at its first episode end (``""``: none, or no end seen).

    One env is built here, reset with the run's seed and played with random actions (its action space's
    sampler, seeded) until its first episode ends, within :data:`INFO_PROBE_STEPS` steps and
    :data:`INFO_PROBE_SECONDS`: sb3's Monitor (and the run) would otherwise fail at that end. An env
    whose episodes are longer, or that fails here, is not judged: the run names a missing key at its
    first episode end, and reports a failing env with its worker and index."""
    env = backend.factory(0)
    deadline = time.monotonic() + INFO_PROBE_SECONDS
    try:
        env.reset(seed=cfg.seed)
        env.action_space.seed(cfg.seed)
        for _ in range(INFO_PROBE_STEPS):
            _, _, terminated, truncated, info = env.step(env.action_space.sample())
            if terminated or truncated:
                missing = [key for key in cfg.info_keywords if key not in info]
                return (
                    (
                        f"info_keywords={','.join(missing)}: {cfg.env}'s info at an episode end has no "
                        f"{' or '.join(map(repr, missing))} (its keys: {sorted(info)}; one env was played to its first "
                        f"episode end to check)"
                    )
                    if missing
                    else ""
                )
            if time.monotonic() > deadline:
                break
    except Exception:  # noqa: BLE001 (random actions an env refuses: the run reports its own failures)
        return ""
    finally:
        env.close()
    return ""


def masking_problems(cfg: Config, backend: EnvBackend) -> list[str]:
    """What ``--action_masks`` cannot do with this env: its backend, its action space, its ``action_masks()``
    (one env built here and reset with the run's seed, its first mask checked)."""
    if not backend.makes_gym_envs:
        return [f"action_masks=True: not supported for {backend.label} (not gymnasium envs: they have no action_masks())"]
    problem = masking_space_problem(backend.action_space)
    if problem:
        return [f"action_masks=True: {problem} ({cfg.env})"]
    problem = env_mask_problem(backend.factory, backend.action_space, cfg.seed)
    return [f"action_masks=True: {problem} ({backend.label})"] if problem else []
