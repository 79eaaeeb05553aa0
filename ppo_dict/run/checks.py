"""The whole check of a run's config, before any process starts: every problem in one error.

:meth:`Config.problems` knows the values alone; here they meet what they name: the env (resolved
and probed once, so that the model can be matched to its observation and the backend can judge
the worker layout), rl-zoo files, and the paths to write or resume. :func:`validate` returns the
probed env backend, which ``ppo_dict.vec.make_env_pool`` then uses without probing again.
"""

from __future__ import annotations

import importlib
import os
import re
import sys
import warnings
from dataclasses import dataclass
from typing import Any, Optional

import torch

from ppo_dict.algo.model import resolve_device
from ppo_dict.core.config import FIELDS, RESUME_AUTO, Config, problem_setting
from ppo_dict.core.errors import ConfigError
from ppo_dict.core.files import checkpoint_bytes, output_problem
from ppo_dict.core.machine import Machine
from ppo_dict.envs import contains_image
from ppo_dict.interop.hyperparams import zoo_values
from ppo_dict.interop.trained_agent import TrainedAgent, agent_problems
from ppo_dict.run.checkpoint import Resumed
from ppo_dict.run.env_checks import env_problems
from ppo_dict.run.run_dir import run_dir_problems
from ppo_dict.run.resources import Needs, core_problems, policy_size, resource_problems, run_needs
from ppo_dict.vec import pool_backend
from ppo_dict.vec.backend import EnvBackend


def path_problems(cfg: Config, read_file: bool = True) -> list[str]:
    """What the paths the run reads name that is missing or does not read; a ``--hyperparams`` file only where
    ``read_file`` (not on a resume: its config holds what the file gave, and the file may have moved or changed)."""
    problems = []
    if cfg.resume not in (None, RESUME_AUTO) and not os.path.exists(cfg.resume):
        problems.append(f"resume={cfg.resume!r}: no such run directory or checkpoint file")
    if cfg.trained_agent is not None and not (os.path.isfile(cfg.trained_agent) and cfg.trained_agent.endswith(".zip")):
        problems.append(f"trained_agent={cfg.trained_agent!r}: no such .zip file (an sb3 PPO model saved by PPO.save)")
    if cfg.hyperparams is not None:
        problems += zoo_values(cfg.hyperparams, cfg.env, cfg.recurrent, read_file)[1]
    return problems + sb3_file_problems(cfg)


def sb3_file_problems(cfg: Config) -> list[str]:
    """The sb3-contrib files a recurrent run that no sb3-contrib class is cannot write or start from: a masked one's or a
    GRU's ``--export_sb3``, a GRU started from a ``--trained_agent`` (RecurrentPPO's zips hold LSTMs)."""
    gru, problems = cfg.recurrent and cfg.rnn_type == "gru", []
    if cfg.recurrent and (cfg.action_masks or gru) and cfg.export_sb3 is not None:
        what = (
            "a GRU model (RecurrentPPO has LSTMs only)"
            if gru
            else "a masked recurrent model (RecurrentPPO has no masks, MaskablePPO no LSTM)"
        )
        problems.append(
            f"export_sb3={cfg.export_sb3!r}: sb3-contrib cannot load {what}; drop --export_sb3 "
            "(the run's checkpoints and model files hold it for ppo_dict)"
        )
    if gru and cfg.trained_agent is not None:
        problems.append(
            f"rnn_type='gru': a RecurrentPPO zip (trained_agent={cfg.trained_agent!r}) holds LSTMs; drop --rnn_type"
        )
    return problems


def output_problems(cfg: Config, resumed: Optional[Resumed], parameters: Optional[int]) -> list[str]:
    """Where the run would write and cannot (judged without writing): its run directory (owned by one
    run: ``ppo_dict.run.run_dir``), ``--save_path``, ``--export_sb3`` and ``--tensorboard_log``; each
    with room for a checkpoint of a policy of ``parameters`` (None: not measured, room not judged)."""
    need = checkpoint_bytes(parameters)
    problems = run_dir_problems(cfg, resumed, need)
    for setting, directory, size in (("save_path", True, need), ("export_sb3", False, need), ("tensorboard_log", True, 0)):
        if getattr(cfg, setting) is not None:
            problems.append(output_problem(setting, getattr(cfg, setting), directory, size))
    return [p for p in problems if p]


def recurrent_settings(cfg: Config) -> dict[str, Any]:
    """What makes a model recurrent, and how: its model and sb3-contrib's LSTM arguments, resolved."""
    return (
        {"model": cfg.model, "rnn_type": cfg.rnn_type or "lstm", **cfg.lstm_settings}
        if cfg.recurrent
        else {"model": cfg.model}
    )


def resume_problems(cfg: Config, saved: dict[str, Any], source: str) -> list[str]:
    """Why the checkpoint ``saved`` (its config) cannot continue as ``cfg``: a recurrent model resumed as another, or
    the reverse, or other LSTMs: each setting that differs, named."""
    then = Config.from_dict(saved["config"])
    if then.recurrent == cfg.recurrent and recurrent_settings(then) == recurrent_settings(cfg):
        return []
    kind = lambda c: "a recurrent model" if c.recurrent else "a model without LSTM"  # noqa: E731
    old, new = recurrent_settings(then), recurrent_settings(cfg)
    differ = ", ".join(
        f"{k}={old.get(k)!r} there, {new.get(k)!r} here" for k in dict.fromkeys([*old, *new]) if old.get(k) != new.get(k)
    )
    return [
        f"resume={source!r}: the checkpoint holds {kind(then)} and this run asks for {kind(cfg)} ({differ}): "
        "resume with the checkpoint's model settings (drop the flags that change them)"
    ]


@dataclass(frozen=True)
class RunCheck:
    """What the check of a run found, for the run (and ``--dry_run``'s plan) to use: the probed env
    ``backend``, the ``device`` the policy runs on, what the run ``needs`` of the machine, and the
    ``machine`` it was judged against."""

    backend: EnvBackend
    device: torch.device
    needs: Needs
    machine: Machine


def validate(
    cfg: Config,
    agent: Optional[TrainedAgent] = None,
    unreadable: Optional[dict[str, str]] = None,
    machine: Optional[Machine] = None,
    resumed: Optional[Resumed] = None,
) -> EnvBackend:
    """Raise one :class:`ConfigError` listing every invalid setting, or return the probed env backend
    (:func:`check_run`, which also says what the run needs of the machine)."""
    return check_run(cfg, agent, unreadable, machine, resumed).backend


def check_run(
    cfg: Config,
    agent: Optional[TrainedAgent] = None,
    unreadable: Optional[dict[str, str]] = None,
    machine: Optional[Machine] = None,
    resumed: Optional[Resumed] = None,
) -> RunCheck:
    """The whole check: raise one :class:`ConfigError` listing every problem, or return the :class:`RunCheck`.

    ``cfg``: a config from flags or keyword arguments; ``unreadable``: the values no parser could
    read (:meth:`Config.read`), listed first, in place of what ``cfg`` holds for them (their defaults).
    ``agent``: the ``--trained_agent`` zip read for this run, checked against the env and the flags.
    ``machine``: what to judge the resources against (default: this machine, probed now).
    ``resumed``: the ``--resume`` checkpoint (``Resumed``), whose model the flags must not change.

    Warns where sb3 warns (a minibatch that does not divide the rollout). Uses no ``assert``
    (safe under ``python -O``).
    """
    unreadable = dict(unreadable or {})
    machine = machine or Machine.probe()
    problems = (
        list(unreadable.values())
        + cfg.problems()
        + path_problems(cfg, read_file=resumed is None)
        + core_problems(cfg, machine)
    )
    problems += [] if resumed is None else resume_problems(cfg, resumed.state, resumed.file)
    backend = probe_backend(cfg, unreadable, problems)
    result = None
    if backend is not None and not any(p.startswith(("n_envs=", "num_workers=", "envs_per_worker=")) for p in problems):
        found = env_problems(cfg, backend)
        if agent is not None:
            found += agent_problems(agent, cfg, backend.observation_space, backend.action_space)
        if not found and not any(problem_setting(p) in MEASURED_SETTINGS for p in problems):
            policy_ok = not any(
                problem_setting(p) in FIELDS and FIELDS[problem_setting(p)].metadata["group"] in POLICY_GROUPS
                for p in problems
            )
            result, found = machine_check(cfg, backend, machine, measure_policy=policy_ok)
        problems += found
    problems += output_problems(cfg, resumed, None if result is None else result.needs.parameters)
    problems = [p for p in problems if p in unreadable.values() or problem_setting(p) not in unreadable]
    if problems or result is None:  # (no problem means the machine check ran and gave a result)
        raise ConfigError(list(dict.fromkeys(problems)))
    # RecurrentPPO does not warn: its minibatches are not a permutation
    if cfg.rollout_size % cfg.minibatch_size > 0 and not cfg.recurrent:
        warn_truncated_minibatch(cfg.minibatch_size, cfg.n_steps, cfg.num_envs)
    if cfg.recurrent and (cfg.n_steps == 1 or cfg.minibatch_size == 1):
        warn_single_step_sequences(cfg)
    if cfg.lstm_fast_path:
        print(FAST_PATH_NOTICE, file=sys.stderr, flush=True)
    return result


#: Settings that size the rollout storage or place the policy: while one is refused, the run is not measured.
MEASURED_SETTINGS = (
    "n_envs",
    "num_workers",
    "envs_per_worker",
    "n_steps",
    "batch_size",
    "num_batches",
    "main_envs",
    "info_keywords",
    "device",
)
#: Field groups that shape the policy: while one of their settings is refused, the policy is not built to be measured.
POLICY_GROUPS = ("policy", "recurrent")
#: Field groups that shape the env, and the settings that size what a probe builds (see probe_backend).
ENV_GROUPS, ENV_SIZES = ("env", "pixels", "atari"), ("frame_stack", "image_size")


def probe_backend(cfg: Config, unreadable: dict[str, str], problems: list[str]) -> Optional[EnvBackend]:
    """The env's backend, probed once (one env built here), or None after adding why it cannot be.
    Not probed while a setting that shapes the env is unreadable (it would be another env), nor while
    one that sizes it is above its range (``frame_stack=1000000`` would stack a million observations)."""
    if any(name in FIELDS and FIELDS[name].metadata["group"] in ENV_GROUPS for name in unreadable):
        return None
    if any(getattr(cfg, name) > FIELDS[name].metadata["range"][1] for name in ENV_SIZES):
        return None
    for module in cfg.gym_packages:
        try:
            importlib.import_module(module)
        except Exception as exc:  # noqa: BLE001 (a module that fails to import, whatever it raises)
            problems.append(f"gym_packages={module}: cannot be imported: {type(exc).__name__}: {exc}")
    if any(p.startswith("gym_packages=") for p in problems):
        return None
    try:
        return pool_backend(cfg)
    except Exception as exc:  # noqa: BLE001 (gymnasium's own text carries the "Did you mean" hint)
        problems.append(f"env={cfg.env!r}: {exc}")
    return None


def machine_check(
    cfg: Config, backend: EnvBackend, machine: Machine, measure_policy: bool
) -> tuple[Optional[RunCheck], list[str]]:
    """``(check, problems)``: the device, the policy (measured on the meta device when
    ``measure_policy``: no other problem, so it can be built), what the run needs, and where that
    does not fit the machine."""
    problems = device_problems(cfg.device)
    if problems:
        return None, problems
    device = resolve_device(cfg.device, contains_image(backend.observation_space))
    parameters, floats = None, 0
    if measure_policy:
        try:
            parameters, floats = policy_size(cfg, backend.observation_space, backend.action_space)
        except Exception as exc:  # noqa: BLE001 (what building the policy for real would raise)
            return None, [
                f"model={cfg.model!r}: the policy cannot be built for {backend.label}'s observations "
                f"({backend.observation_space}): {type(exc).__name__}: {exc}"
            ]
    try:
        needs = run_needs(cfg, backend, device, parameters, floats)
    except (ValueError, OverflowError, MemoryError) as exc:
        return None, [f"n_steps x n_envs = {cfg.n_steps} x {cfg.num_envs}: the rollout storage cannot be laid out ({exc})"]
    return RunCheck(backend, device, needs, machine), resource_problems(cfg, needs, machine)


def device_problems(device: str) -> list[str]:
    """A CUDA device this machine does not have."""
    if not re.fullmatch(r"cuda(:[0-9]+)?", device):
        return []  # cpu, auto, or a spelling Config.problems refuses
    if not torch.cuda.is_available():
        return [f"device={device!r}: no CUDA device is available here (torch {torch.__version__}); use --device cpu or auto"]
    index = int(device.partition(":")[2] or 0)
    if index >= torch.cuda.device_count():
        return [
            f"device={device!r}: this machine has {torch.cuda.device_count()} CUDA device(s), cuda:0 to "
            f"cuda:{torch.cuda.device_count() - 1}"
        ]
    return []


#: the one line a run with ``--lstm_fast_path True`` prints
FAST_PATH_NOTICE = (
    "notice: --lstm_fast_path True trains each LSTM over whole sequences (one call per minibatch): "
    "sb3-contrib RecurrentPPO's algorithm and losses, not its bits (gradients differ in rounding)"
)


def warn_single_step_sequences(cfg: Config) -> None:
    """RecurrentPPO takes these settings, but every training sequence is one step long: the LSTM is
    trained from stored states only, never through time."""
    why = (
        f"n_steps={cfg.n_steps}: each env's rollout is one step"
        if cfg.n_steps == 1
        else f"batch_size={cfg.minibatch_size}: each minibatch is one step"
    )
    warnings.warn(
        f"model={cfg.model!r} with {why}, so every training sequence has one step and no gradient flows through "
        f"time in the LSTM; choose n_steps and batch_size of several steps",
        stacklevel=2,
    )


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
