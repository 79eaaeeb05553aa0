"""The whole check of a run's config, before any process starts: every problem in one error.

:meth:`Config.problems` knows the values alone; here they meet what they name: the env (resolved
and probed once, so that the model can be matched to its observation and the backend can judge
the worker layout), rl-zoo files, and the paths to write or resume. :func:`validate` returns the
probed env backend, which ``ppo_dict.vec.make_env_pool`` then uses without probing again.
"""
from __future__ import annotations

import os
import sys
import warnings
from typing import Optional


from ppo_dict.core.config import MODELS, RESUME_AUTO, Config
from ppo_dict.core.errors import ConfigError
from ppo_dict.data.actions import action_space_problem, masking_space_problem
from ppo_dict.data.masking import env_mask_problem
from ppo_dict.data.storage import vector_obs_shapes
from ppo_dict.envs import contains_image, ppo_observation_problem
from ppo_dict.interop.hyperparams import load_hyperparams
from ppo_dict.interop.trained_agent import TrainedAgent, agent_problems
from ppo_dict.vec import env_spec, probe_env
from ppo_dict.vec.backend import EnvBackend


def model_problem(model: str, observation_space) -> str:
    """Why ``model`` cannot take the observation, or ``""`` when it can."""
    images, suffix = contains_image(observation_space), "_lstm" if model.endswith("_lstm") else ""
    if model.removesuffix(suffix) == "mlp" and images:
        return f"model={model!r}: the observation holds images; use --model cnn{suffix} (NatureCNN, or per-key NatureCNN for dict observations)"
    if model.removesuffix(suffix) == "cnn" and not images:
        return f"model={model!r}: the observation holds no image; use --model mlp{suffix} (or --pixel_obs_wrapper True to observe frames)"
    return ""


def path_problems(cfg: Config) -> list[str]:
    problems = []
    if cfg.save_path is not None and os.path.isfile(cfg.save_path):
        problems.append(f"save_path={cfg.save_path!r}: is a file, must be a directory")
    if cfg.resume not in (None, RESUME_AUTO) and not os.path.exists(cfg.resume):
        problems.append(f"resume={cfg.resume!r}: no such run directory or checkpoint file")
    if cfg.trained_agent is not None and not (os.path.isfile(cfg.trained_agent) and cfg.trained_agent.endswith(".zip")):
        problems.append(f"trained_agent={cfg.trained_agent!r}: no such .zip file (an sb3 PPO model saved by PPO.save)")
    if cfg.hyperparams is not None:
        problems += load_hyperparams(cfg.hyperparams, cfg.env)[1]
    return problems


def space_problems(cfg: Config, observation_space, action_space) -> list[str]:
    """What sb3's PPO refuses in the env's spaces (with sb3's reason), or in the config for them."""
    problems = [f"env={cfg.env!r}: observation space: {p}" for p in [ppo_observation_problem(observation_space)] if p]
    problems += [f"env={cfg.env!r}: action space: {p}" for p in [action_space_problem(action_space)] if p]
    if cfg.use_sde and not problems:
        problems += [f"use_sde=True: {p} ({cfg.env} acts in {action_space})" for p in [action_space_problem(action_space, use_sde=True)] if p]
    return problems


def env_problems(cfg: Config, backend: EnvBackend) -> list[str]:
    """What the config asks of the env that it cannot do: its spaces, the model, the worker layout, gymnasium-only features."""
    problems = space_problems(cfg, backend.observation_space, backend.action_space)
    if cfg.model in MODELS and not problems:
        problems.append(model_problem(cfg.model, backend.observation_space))
    n_envs, num_workers, envs_per_worker = cfg.worker_layout
    if num_workers == 0 or n_envs == num_workers * envs_per_worker:  # else the layout itself is reported
        problems += backend.layout_problems(n_envs, num_workers, envs_per_worker, cfg.step_timeout)
    if cfg.frame_stack > 1 and cfg.normalize and cfg.norm_obs and not cfg.pixel_obs_wrapper and not any(problems):
        stacked = list(vector_obs_shapes(backend.observation_space))  # every key is stacked, except beside rendered pixels
        if stacked:
            problems.append(f"frame_stack={cfg.frame_stack}: with normalize and norm_obs, sb3 and rl-zoo normalise each observation "
                            f"before VecFrameStack stacks them, but ppo_dict stacks inside the env, so the statistics of {stacked} "
                            "would be over stacks (their zero padding included) and not sb3's: use --norm_obs False, or no --frame_stack")
    if cfg.action_masks and not any(problems):
        problems += masking_problems(cfg, backend)
    if cfg.double_buffer and n_envs < 2 * backend.unit:
        problems.append(f"double_buffer=True: n_envs={n_envs} cannot make two halves of whole units of {backend.unit} envs ({backend.label})")
    if cfg.info_keywords and not backend.makes_gym_envs:
        problems.append(f"info_keywords={','.join(cfg.info_keywords)}: not supported for {backend.label} (not gymnasium envs: they send no infos)")
    if not backend.makes_gym_envs:
        asked = {"eval_freq": cfg.eval_freq > 0, "video": cfg.video, "export_sb3": cfg.export_sb3 is not None}
        problems += [f"{flag}: not supported for {backend.label} yet (it builds the env alone as a gymnasium env, "
                     "which this one is not)" for flag, on in asked.items() if on]
    return [p for p in problems if p]


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


def recurrent_problems(cfg: Config) -> list[str]:
    """What a recurrent run cannot do yet: act with carried LSTM states outside training (evaluation,
    videos), write or read sb3-contrib files, resume with the states a checkpoint would need to hold."""
    if not cfg.recurrent:
        return []
    asked = {"eval_freq": cfg.eval_freq > 0, "video": cfg.video, "export_sb3": cfg.export_sb3 is not None,
             "trained_agent": cfg.trained_agent is not None, "resume": cfg.resume is not None}
    return [f"{flag}: not supported with a recurrent model (model={cfg.model!r}) yet: recurrent runs train, log and save "
            "checkpoints, but evaluation, sb3-contrib files and resuming need the LSTM states carried outside training"
            for flag, on in asked.items() if on]


def validate(cfg: Config, agent: Optional[TrainedAgent] = None) -> EnvBackend:
    """Raise one :class:`ConfigError` listing every invalid setting, or return the probed env backend.

    ``agent``: the ``--trained_agent`` zip read for this run, checked against the env and the flags.

    Warns where sb3 warns (a minibatch that does not divide the rollout). Uses no ``assert``
    (safe under ``python -O``).
    """
    problems = cfg.problems() + recurrent_problems(cfg) + path_problems(cfg)
    backend: Optional[EnvBackend] = None
    try:
        backend = probe_env(env_spec(cfg))
    except Exception as exc:  # gymnasium's own text carries the "Did you mean" hint
        problems.append(f"env={cfg.env!r}: {exc}")
    if backend is not None and not any(p.startswith(("n_envs=", "num_workers=", "envs_per_worker=")) for p in problems):
        problems += env_problems(cfg, backend)
        if agent is not None:
            problems += agent_problems(agent, cfg, backend.observation_space, backend.action_space)
    if problems:
        raise ConfigError(problems)
    if cfg.rollout_size % cfg.minibatch_size > 0 and not cfg.recurrent:  # RecurrentPPO does not warn: its minibatches are not a permutation
        warn_truncated_minibatch(cfg.minibatch_size, cfg.n_steps, cfg.num_envs)
    if cfg.recurrent and (cfg.n_steps == 1 or cfg.minibatch_size == 1):
        warn_single_step_sequences(cfg)
    if cfg.lstm_fast_path:
        print(FAST_PATH_NOTICE, file=sys.stderr, flush=True)
    return backend


#: the one line a run with ``--lstm_fast_path True`` prints
FAST_PATH_NOTICE = ("notice: --lstm_fast_path True trains each LSTM over whole sequences (one call per minibatch): sb3-contrib "
                    "RecurrentPPO's algorithm and losses, not its bits (gradients differ in rounding)")


def warn_single_step_sequences(cfg: Config) -> None:
    """RecurrentPPO takes these settings, but every training sequence is one step long: the LSTM is
    trained from stored states only, never through time."""
    why = f"n_steps={cfg.n_steps}: each env's rollout is one step" if cfg.n_steps == 1 else f"batch_size={cfg.minibatch_size}: each minibatch is one step"
    warnings.warn(f"model={cfg.model!r} with {why}, so every training sequence has one step and no gradient flows through time "
                  "in the LSTM; choose n_steps and batch_size of several steps", stacklevel=2)


def warn_truncated_minibatch(batch_size: int, n_steps: int, n_envs: int) -> None:
    """sb3's warning, word for word (``PPO.__init__``); training then uses the short minibatch."""
    buffer_size = n_envs * n_steps
    warnings.warn(
        f"You have specified a mini-batch size of {batch_size},"
        f" but because the `RolloutBuffer` is of size `n_steps * n_envs = {buffer_size}`,"
        f" after every {buffer_size // batch_size} untruncated mini-batches,"
        f" there will be a truncated mini-batch of size {buffer_size % batch_size}\n"
        f"We recommend using a `batch_size` that is a factor of `n_steps * n_envs`.\n"
        f"Info: (n_steps={n_steps} and n_envs={n_envs})",
        stacklevel=2,
    )
