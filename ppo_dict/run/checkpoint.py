"""Checkpoints: written atomically, rotated, verified, and resumed from bit for bit.

A checkpoint is :func:`model_state` (weights, Adam, normaliser, counters, RNG
states, spaces, config) in ``RUN_DIR/checkpoints/checkpoint_<num_timesteps>.pt``, written with
:func:`~ppo_dict.core.files.atomic_write` (temp file, fsync, rename, fsync of the directory), so a
crash leaves the previous files as they were. A new checkpoint is loaded back before older ones
are deleted.

A checkpoint also holds the envs (``ppo_dict.run.env_states``): each env's state, wrappers included, and the rows
the next rollout starts from, so that a resumed run continues as the run that was never stopped. Where an env's
state cannot be taken (a Box2D world, a Godot game) or the checkpoint holds none, a resumed run resets every env,
env i with ``resume_env_seed(seed, num_timesteps) + i`` (through the normaliser's reset, as sb3's
``learn(reset_num_timesteps=False)`` on a loaded model does), and says so: everything else saved continues bit for
bit, but episodes in flight are cut.
"""

from __future__ import annotations

import copy
import glob
import json
import os
import re
import sys
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Optional, TextIO

import numpy as np
import torch

from ppo_dict.core.errors import CheckpointError
from ppo_dict.core.files import (
    MODEL_FILE,
    atomic_write,
    config_values,
    finite_tensor,
    load_model_state,
    space_mismatch,
    to_numpy,
    whole_number,
)
from ppo_dict.core.logger import STDERR
from ppo_dict.core.seeding import rng_state, rng_state_problems, set_rng_state
from ppo_dict.envs.state import StateNotRestorable
from ppo_dict.run.env_states import carry_state, checkpoint_entries, env_state_problems, read_saved, saved

if TYPE_CHECKING:
    from ppo_dict.algo.ppo import PPO
    from ppo_dict.core.config import Config

CHECKPOINT_DIR = "checkpoints"
#: the evaluation's best model in a run directory
BEST_MODEL = "best_model.pt"
_NAME = re.compile(r"^checkpoint_(\d+)\.pt$")


def model_state(ppo: "PPO", envs: bool = True) -> dict[str, Any]:
    """Everything a trained model is, so that training can resume from it bit for bit.

    Weights, Adam state, normaliser statistics, counters (``num_timesteps``, ``iteration``,
    ``n_updates``), the episode buffers behind ``rollout/*`` (``ep_r``, ``ep_l``, ...:
    ``episodes.EpisodeLog.state``), the RNG states of torch, numpy's global generator and python's
    ``random``, the spaces (to refuse a checkpoint that does not fit the env) and the config; a recurrent
    run's LSTM states that start its next rollout (``lstm_states``: ``PPO.lstm_states``, one set per
    ``--double_buffer`` half).
    With ``envs``, the envs' states and the rows the next rollout starts from (``ppo_dict.run.env_states``).
    The model's part is ``ppo.model.state()`` (``ppo_dict.algo.model.Model``: what ``Model.from_file`` reads).
    """
    lstm_states = ppo.lstm_states()
    return {
        **(checkpoint_entries(ppo) if envs else {}),
        **ppo.model.state(),
        "optimizer": ppo.optimizer.state_dict(),
        "iteration": ppo.iteration,
        "n_updates": ppo.n_updates,
        **ppo.episodes.state(),
        # recorded, not yet dumped (sb3 logs train/* at the next rollout's dump)
        "log_pending": saved(dict(getattr(ppo.logger, "current", {}))),
        "rng": rng_state(),
        **(
            {}
            if lstm_states is None
            else {"lstm_states": [{k: torch.from_numpy(v) for k, v in g.items()} for g in lstm_states]}
        ),
    }


def write_model_file(ppo: "PPO", path: str, envs: bool = True) -> str:
    """Write :func:`model_state` to ``path`` atomically (``envs``: with the envs' states); returns ``path``."""
    state = model_state(ppo, envs)
    atomic_write(path, lambda f: torch.save(state, f))
    return path


def write_config(cfg: "Config", path: str, env_id: Optional[str] = None) -> str:
    """The resolved config as JSON (lists for tuples), atomically, with ``env_id`` (the gymnasium id the env
    resolved to) after ``env`` (as typed) where given; returns ``path``."""
    values: dict[str, Any] = {}
    for name, value in config_values(cfg).items():
        values[name] = value
        if name == "env" and env_id is not None:
            values["env_id"] = env_id  # what ran, beside what was typed
    atomic_write(path, lambda f: json.dump(values, f, indent=2), mode="w")
    return path


def save_model(ppo: "PPO", directory: str) -> str:
    """Write ``directory/model.pt`` and ``directory/config.json``; returns the model file's path."""
    write_config(ppo.cfg, os.path.join(directory, "config.json"))
    return write_model_file(ppo, os.path.join(directory, MODEL_FILE), envs=False)


def checkpoint_name(num_timesteps: int) -> str:
    return f"checkpoint_{num_timesteps:012d}.pt"  # zero-padded: names sort as steps do


def list_checkpoints(directory: str) -> list[str]:
    """Checkpoint files in ``directory``, oldest first (by the step count in the name)."""
    if not os.path.isdir(directory):
        return []
    names = [n for n in os.listdir(directory) if _NAME.match(n)]
    return [os.path.join(directory, n) for n in sorted(names, key=lambda n: int(_NAME.match(n).group(1)))]  # type: ignore[union-attr]


def model_file(run_dir: str, which: str) -> str:
    """The file ``which`` (best | last | a path) names in ``run_dir``: the best model, else the
    newest checkpoint, else ``model.pt`` (``last`` skips the best model)."""
    if which not in ("best", "last"):
        return which
    candidates = [os.path.join(run_dir, BEST_MODEL)] if which == "best" else []
    candidates += list(reversed(list_checkpoints(os.path.join(run_dir, CHECKPOINT_DIR)))) + [os.path.join(run_dir, MODEL_FILE)]
    for path in candidates:
        if os.path.isfile(path):
            return path
    raise CheckpointError(f"no {BEST_MODEL}, checkpoint or {MODEL_FILE} in {run_dir}")


def remove_stale_temp_files(directory: str, log: TextIO = STDERR) -> list[str]:
    """Delete temp files left by a write that was killed (``.checkpoint_*.pt.*.tmp``); returns them."""
    stale = [
        p
        for p in sorted(glob.glob(os.path.join(glob.escape(directory), ".checkpoint_*.tmp")))
        if not os.path.isdir(p) or os.path.islink(p)
    ]  # a folder of that name: refused by the resume's check
    for path in stale:
        os.unlink(path)
        print(f"removed {path}: a partial checkpoint from an interrupted write", file=log, flush=True)
    return stale


@dataclass(frozen=True)
class Resumed:
    """The checkpoint a run resumes from, read once (``ppo_dict.run.sources``): its ``file``, its ``state``, its
    step count, and ``home``: the run directory it belongs to (``ppo_dict.run.run_dir.checkpoint_run_dir``; None for
    a file in none, a download or a copy)."""

    file: str
    state: dict[str, Any]
    steps: int
    home: Optional[str]

    def continues_in(self, run_dir: str) -> bool:
        """Whether ``run_dir`` is the checkpoint's own run directory or a folder inside it (a branch): the run goes on
        from its own checkpoints. A sibling whose name merely starts with the home's (``runs/a2`` beside ``runs/a``) is
        not."""
        if self.home is None:
            return False
        home = os.path.realpath(self.home)
        return os.path.commonpath([os.path.realpath(run_dir), home]) == home


class Every:
    """True once each time ``num_timesteps`` crosses a multiple of ``freq`` (never for freq 0)."""

    def __init__(self, freq: int, start: int):
        self.freq, self.last = freq, start

    def __call__(self, num_timesteps: int) -> bool:
        if self.freq <= 0 or num_timesteps // self.freq <= self.last // self.freq:
            return False
        self.last = num_timesteps
        return True


class SaveDue:
    """Whether a checkpoint is due after an update: every ``freq`` env steps (:class:`Every`), or once ``minutes`` of
    wall time have passed since the last one (0: never by time). ``agree``: over ranks, makes every rank take rank 0's
    time decision (checkpoints are taken alike on every rank). Asked again at the same step, it answers the same."""

    def __init__(self, freq: int, minutes: float, start: int, agree: Optional[Callable[[bool], bool]] = None):
        self.every, self.seconds, self.agree = Every(freq, start), 60.0 * minutes, agree
        self.last = time.monotonic()
        self.answer: tuple[int, bool] = (-1, False)

    def __call__(self, num_timesteps: int) -> bool:
        if self.answer[0] == num_timesteps:
            return self.answer[1]
        due = self.every(num_timesteps)
        if self.seconds > 0:
            late = time.monotonic() - self.last >= self.seconds
            due = (self.agree(late) if self.agree is not None else late) or due
        if due:
            self.last = time.monotonic()
        self.answer = (num_timesteps, due)
        return due


class CheckpointManager:
    """Writes ``checkpoint_<steps>.pt`` into ``directory`` and keeps the newest ``keep``."""

    def __init__(self, directory: str, keep: int, log: TextIO = STDERR):
        self.directory, self.keep, self.log = directory, keep, log
        os.makedirs(directory, exist_ok=True)
        remove_stale_temp_files(directory, log)
        self.last_saved_step: Optional[int] = None

    def save(self, ppo: "PPO") -> str:
        """Write, verify, then rotate; returns the new file. Saving twice at one step writes once."""
        path = os.path.join(self.directory, checkpoint_name(ppo.num_timesteps))
        if self.last_saved_step == ppo.num_timesteps and os.path.exists(path):
            return path
        write_model_file(ppo, path)
        saved = load_model_state(path)  # raises CheckpointError: then nothing older is deleted
        if saved["num_timesteps"] != ppo.num_timesteps:
            raise CheckpointError(f"{path}: read back num_timesteps={saved['num_timesteps']}, wrote {ppo.num_timesteps}")
        self.last_saved_step = ppo.num_timesteps
        for old in list_checkpoints(self.directory)[: -self.keep]:
            os.unlink(old)
        return path


class LastUpdate:
    """The model's state after its last update (or as it started), kept in memory: a run stopped in
    the middle of a rollout puts it back (:meth:`restore`) and saves it, so that every checkpoint
    holds a state the run had between two iterations, exactly as a periodic save would.

    A copy of :func:`model_state` (weights, Adam, normaliser, counters, RNG states) and of the rows the next rollout
    starts from (``carry``): about a millisecond per iteration for an MLP, a few for a NatureCNN. The envs' states of
    that moment are the runners' snapshots (``ppo_dict.run.env_states``).
    """

    def __init__(self, ppo: "PPO"):
        self.take(ppo)

    def take(self, ppo: "PPO") -> None:
        self.state = copy.deepcopy(model_state(ppo, envs=False))
        self.carry = carry_state(ppo)

    def restore(self, ppo: "PPO") -> None:
        restore(ppo, self.state, "the state after the last update")


def resumable(source: str, state: dict[str, Any]) -> dict[str, Any]:
    """``state`` if training can resume from it, checked whole (:func:`training_state_problems`): a model file
    without the training state, or a checkpoint whose state is not what ppo_dict writes, is refused here,
    before the run builds anything (the shapes are checked against the policy when it is built: ``restore``)."""
    if "optimizer" not in state:
        raise CheckpointError(
            f"{source}: a model without its training state (written by Model.save): it loads for prediction "
            "(Model.from_file), but training cannot resume from it; resume from a checkpoint"
        )
    problems = training_state_problems(state)
    if problems:
        raise CheckpointError(f"{source}: not a checkpoint ppo_dict wrote: {'; '.join(problems)}")
    return state


def training_state_problems(state: dict[str, Any]) -> list[str]:
    """What keeps a checkpoint's training state from being one ppo_dict wrote: Adam's state, the counters,
    the episode buffers (1-d tensors of one length per buffer) and the RNG states (:func:`rng_state_problems`)."""
    problems = [f"no {key!r}" for key in ("optimizer", "iteration", "n_updates", "ep_r", "ep_l", "rng") if key not in state]
    optimizer = state.get("optimizer", {})
    if not (
        isinstance(optimizer, dict)
        and isinstance(optimizer.get("state"), dict)
        and isinstance(optimizer.get("param_groups"), list)
        and all(
            isinstance(s, dict) and all(finite_tensor(v) or isinstance(v, (int, float)) for v in s.values())
            for s in optimizer["state"].values()
        )
    ):
        problems.append("'optimizer': not an optimizer's state of finite tensors")
    problems += [
        f"{key!r}={str(state[key])[:40]}: not a whole number in [0, 2**63)"
        for key in ("iteration", "n_updates")
        if key in state and not whole_number(state[key])
    ]
    for main, extra in (("ep_r", ("ep_l",)), ("ep_success", ("ep_success_kinds",))):
        buffers = [state.get(main), *(state.get(key) for key in extra)]
        if (main in state or extra[0] in state) and not (
            all(finite_tensor(b, 1) for b in buffers) and len({len(b) for b in buffers}) == 1
        ):
            problems.append(f"{main!r}, {', '.join(map(repr, extra))}: not finite 1-d tensors of one length")
    info, kinds = state.get("ep_info", {}), state.get("ep_info_kinds", {})
    n = len(state["ep_r"]) if finite_tensor(state.get("ep_r"), 1) else -1
    if not (
        isinstance(info, dict)
        and isinstance(kinds, dict)
        and set(info) == set(kinds)
        and all(finite_tensor(t, 1) and len(t) == n for t in [*info.values(), *kinds.values()])
    ):
        problems.append("'ep_info', 'ep_info_kinds': not finite 1-d tensors, one per info keyword, as long as 'ep_r'")
    lstm = state.get("lstm_states", [])
    if not (isinstance(lstm, list) and all(isinstance(g, dict) and all(finite_tensor(t) for t in g.values()) for g in lstm)):
        problems.append("'lstm_states': not a list of dicts of finite tensors")
    try:
        pending = read_saved(state["log_pending"], "'log_pending'") if "log_pending" in state else {}
        if not (
            isinstance(pending, dict)
            and all(isinstance(k, str) and isinstance(v, (str, int, float, np.generic)) for k, v in pending.items())
        ):
            problems.append("'log_pending': not a dict of logged numbers and strings")
    except StateNotRestorable as exc:
        problems.append(str(exc))
    return problems + rng_state_problems(state.get("rng")) + env_state_problems(state)


def load_for_resume(path: str, log: Optional[TextIO] = None) -> tuple[str, dict[str, Any]]:
    """``(file, state)`` to resume from: a checkpoint file, or a run directory's newest valid one.

    A file named by the user must load, or :class:`CheckpointError` says why. In a run directory
    an unreadable newest checkpoint is skipped for the next older one, with a warning (the run, once
    it owns the directory, renames it ``*.corrupt``: ``ppo_dict.run.run_dir.claim``); if none loads,
    the error lists each file with its reason. Nothing is written here (a run refused later leaves
    the directory as it was), and there is no silent fresh start.
    """
    log = log or sys.stderr  # the stream of now (a caller may have redirected it), not of when this module was imported
    if os.path.isfile(path):
        return path, resumable(path, load_model_state(path))
    directory = os.path.join(path, CHECKPOINT_DIR) if os.path.isdir(os.path.join(path, CHECKPOINT_DIR)) else path
    candidates = list_checkpoints(directory)
    if not candidates:
        raise CheckpointError(f"no checkpoint_*.pt in {directory} to resume from")
    failures: list[str] = []
    for candidate in reversed(candidates):
        try:
            state = load_model_state(candidate)
        except CheckpointError as exc:
            failures.append(str(exc))
            print(f"warning: {exc}; trying the previous checkpoint", file=log, flush=True)
            continue
        return candidate, resumable(candidate, state)
    # one line: the caller lists its problems a line each, and a line of its own would read as another problem
    raise CheckpointError(f"no loadable checkpoint in {directory} (" + "; ".join(failures) + ")")


def resume_env_seed(seed: Optional[int], num_timesteps: int) -> Optional[int]:
    """The env seed of a run resumed at ``num_timesteps``: fixed by both, drawn from no global RNG."""
    if seed is None:
        return None
    return int(np.random.SeedSequence([seed, num_timesteps]).generate_state(1)[0] >> 1)  # < 2**31: seed + i stays valid


def restore(ppo: "PPO", state: dict[str, Any], source: str) -> None:
    """Load ``state`` into a freshly built ``ppo``; every mismatch is a :class:`CheckpointError`.

    After this, ``model_state(ppo)`` equals ``state`` exactly (the test checks every tensor).
    """
    mismatch = space_mismatch(state, ppo.pool.observation_space, ppo.pool.action_space)
    if mismatch:
        raise CheckpointError(f"{source}: {mismatch} (env {ppo.cfg.env})")
    if (state["normalizer"] is None) != (ppo.normalizer is None):
        raise CheckpointError(
            f"{source}: saved with normalize={state['normalizer'] is not None}, "
            f"but this run has normalize={ppo.normalizer is not None}"
        )
    ppo.model.load(state["policy"], to_numpy(state["normalizer"]), source)
    ppo.load_optimizer(state["optimizer"], source)
    ppo.num_timesteps, ppo.iteration, ppo.n_updates = state["num_timesteps"], state["iteration"], state["n_updates"]
    ppo.episodes.load_state(state)
    pending = getattr(ppo.logger, "current", None)  # the command line's logger (sb3's API logs through its own)
    if pending is not None:
        pending.clear()
        pending.update(read_saved(state["log_pending"], "log_pending") if "log_pending" in state else {})
    if ("lstm_states" in state) != ppo.cfg.recurrent or len(state.get("lstm_states", ())) != len(ppo.lstm_states() or ()):
        raise CheckpointError(
            f"{source}: {'holds' if 'lstm_states' in state else 'has no'} recurrent LSTM states "
            f"({len(state.get('lstm_states', ()))} sets), but this run has model={ppo.cfg.model!r}, "
            f"double_buffer={ppo.cfg.double_buffer}"
        )
    if "lstm_states" in state:
        ppo.load_lstm_states([{k: v.numpy() for k, v in group.items()} for group in state["lstm_states"]])
    set_rng_state(state["rng"])
    ppo.env_seed = resume_env_seed(ppo.cfg.seed, ppo.num_timesteps)
