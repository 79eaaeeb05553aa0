"""The envs in a checkpoint: each env's state and the rows the next rollout starts from, so that a resumed run is
the run that was never stopped.

A checkpoint taken between two iterations (``--save_freq``, the end, a stop after an update) holds the envs as they
are; one written on a stop in the middle of a rollout or an update holds them as they were when that rollout began
(each runner keeps a snapshot taken at its step 0: ``GymRunner.keep_snapshots``), beside the model, Adam and the RNG
streams as the last update left them (``checkpoint.LastUpdate``). Its entries:

* ``"envs"``: one entry per env, ``{"env": its state (``envs.state``: plain data), "problem": "", "return": ...,
  "length": ...}`` (the running episode's return and length of the episode book), or ``{"env": None, "problem": why}``
  for an env whose state cannot be taken (a Box2D world, a Godot game); stored as :func:`saved` stores plain data (a
  tree, and every array's bytes in one uint8 tensor);
* ``"carry"``: what the rollout carries to the next (sb3's ``_last_obs`` and ``_last_episode_starts``): the raw and
  the normalised first rows of storage, the action masks of that row, each env's last episode end.

The normaliser's per-env running returns are in its own state (``normalizer``), kept on an exact resume; the LSTM
states in ``lstm_states``. A resume puts everything back when every env has a state (:func:`resume_envs`); else every
env restarts from a reset with a seed derived from the checkpoint's step, as before, and the run says why.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional

import numpy as np
import torch

from ppo_dict.core.errors import CheckpointError, PPODictError
from ppo_dict.core.files import config_values
from ppo_dict.envs.saved_state import from_saved, to_saved
from ppo_dict.envs.state import StateNotRestorable, first_problem

if TYPE_CHECKING:
    from ppo_dict.algo.ppo import PPO

#: seconds the workers get to send their envs' states on a stop (the checkpoint must be on disk within 5 s of the signal)
STOP_TIMEOUT = 2.0
#: the keys of a checkpoint this module writes
KEYS = ("envs", "carry")


def carry_state(ppo: "PPO") -> dict[str, Any]:
    """The rows the next rollout starts from (copies): ``env_obs`` (as the envs wrote them), ``obs`` (the normalised
    keys), ``action_masks`` and each env's last episode end (``last_dones``)."""
    s = ppo.storage
    carry: dict[str, Any] = {
        "env_obs": {key: torch.from_numpy(arr[0].copy()) for key, arr in s.env_obs.items()},
        "obs": {key: torch.from_numpy(arr[0].copy()) for key, arr in s.obs.items() if arr is not s.env_obs.get(key)},
        "last_dones": torch.from_numpy(s.last_dones.copy()),
    }
    if s.action_masks is not None:
        carry["action_masks"] = torch.from_numpy(s.action_masks[0].copy())
    return carry


def saved(value: Any) -> dict[str, Any]:
    """Plain data as a checkpoint holds it: its tree, and the bytes of its arrays in one uint8 tensor
    (``envs.state.to_saved``)."""
    tree, blob = to_saved(value)
    return {"tree": tree, "blob": torch.from_numpy(blob)}


def read_saved(entry: Any, where: str) -> Any:
    """:func:`saved`'s value back, checked as it is read (``StateNotRestorable`` for what no run wrote)."""
    blob = entry.get("blob") if isinstance(entry, dict) else None
    if not (isinstance(blob, torch.Tensor) and blob.dtype == torch.uint8 and blob.dim() == 1 and "tree" in entry):
        raise StateNotRestorable(f"{where}: not a tree with its bytes in a uint8 tensor")
    return from_saved(entry["tree"], blob.contiguous().numpy(), where)


def take_env_states(ppo: "PPO", rollout: Optional[int], timeout: Optional[float] = None) -> Optional[list[dict[str, Any]]]:
    """Every env's state from the pool: as they began ``rollout`` (the pool's ``rollouts_begun`` count of the one in
    progress), else (None) as they are; None where the pool cannot give them (the Python API's vec envs; a pool
    closed, failed or too slow: the envs restart on a resume)."""
    pool = ppo.pool
    if getattr(pool, "closed", False) or not hasattr(pool, "call"):
        return None
    try:
        states = pool.call("env_states", list(range(ppo.n_envs)), "", (rollout,), timeout=timeout)
    except (NotImplementedError, ValueError, TypeError) as exc:  # a backend without states (a Godot game's runner)
        return [{"env": None, "problem": f"{type(exc).__name__}: {exc}"} for _ in range(ppo.n_envs)]
    except PPODictError:  # a worker that failed or did not answer in time: its envs cannot be read
        return None
    return states


def keep_snapshots(ppo: "PPO") -> None:
    """Ask every runner to keep its envs' states at each rollout's step 0 (what a stop in the middle of a rollout saves)."""
    if hasattr(ppo.pool, "call") and not getattr(ppo.pool, "closed", False):
        try:
            ppo.pool.call("keep_snapshots", list(range(ppo.n_envs)), "", (getattr(ppo.pool, "rollouts_begun", 0),))
        except (NotImplementedError, ValueError, TypeError):
            pass  # a backend without states: its envs restart on a resume, as take_env_states says


#: one process's envs: their states and the rows of the next rollout (:func:`carry_state`), None where they cannot be read
Local = Optional[tuple[list[dict[str, Any]], dict[str, Any]]]


def local_entries(ppo: "PPO") -> Local:
    """This process's envs as they are now, with the rows the next rollout starts from."""
    states = take_env_states(ppo, rollout=None)
    return None if states is None else (states, carry_state(ppo))


def entries_of(parts: list[Local]) -> dict[str, Any]:
    """A checkpoint's ``envs`` and ``carry`` from the envs of every process that steps some (every rank's, in rank order;
    or this process's alone); none where one of them could not read its envs (they restart on a resume)."""
    if not parts or any(part is None for part in parts):
        return {}
    carries = [part[1] for part in parts]

    def joined(key: str) -> dict[str, torch.Tensor]:
        return {name: torch.cat([c[key][name] for c in carries]) for name in carries[0][key]}

    carry = {"env_obs": joined("env_obs"), "obs": joined("obs"), "last_dones": torch.cat([c["last_dones"] for c in carries])}
    if "action_masks" in carries[0]:
        carry["action_masks"] = torch.cat([c["action_masks"] for c in carries])
    return {"envs": saved([state for part in parts for state in part[0]]), "carry": carry}


def checkpoint_entries(ppo: "PPO") -> dict[str, Any]:
    """The entries of a checkpoint taken now: the ones a stop or the ranks' agreement left (``ppo.env_snapshot``), else
    the envs as they are (over ranks, only the ranks together can read them: ``ppo_dict.run.ranks``)."""
    if ppo.env_snapshot is not None:
        return ppo.env_snapshot
    return {} if ppo.ranks is not None else entries_of([local_entries(ppo)])


def restart_reasons(states: Any) -> list[str]:
    """Why the envs of these saved states restart on a resume (one line per distinct reason), empty when none does."""
    reasons: dict[str, list[int]] = {}
    for i, state in enumerate(states or []):
        if isinstance(state, dict) and state.get("env") is None:
            reasons.setdefault(str(state.get("problem") or "no state saved"), []).append(i)
    return [
        f"env{'s' if len(envs) > 1 else ''} {', '.join(map(str, envs[:8]))}{'...' if len(envs) > 8 else ''}: {why}"
        for why, envs in reasons.items()
    ]


def env_state_problems(state: dict[str, Any]) -> list[str]:
    """What keeps a checkpoint's ``envs`` and ``carry`` from being ones ppo_dict wrote (checked before anything is
    written: wrong types or sizes, NaN); empty for a checkpoint without them (written before they were saved)."""
    if "envs" not in state and "carry" not in state:
        return []
    try:
        envs = read_saved(state.get("envs"), "'envs'")
    except StateNotRestorable as exc:
        return [str(exc)]
    if not isinstance(envs, list) or not all(isinstance(e, dict) for e in envs):
        return ["'envs': not a list of dicts, one per env"]
    problems = []
    for i, entry in enumerate(envs):
        if entry.get("env") is None:
            if not isinstance(entry.get("problem"), str):
                problems.append(f"'envs'[{i}]: no state and no reason")
        elif not (
            isinstance(entry.get("return"), float)
            and np.isfinite(entry["return"])
            and type(entry.get("length")) is int
            and 0 <= entry["length"] < 2**62
        ):
            problems.append(f"'envs'[{i}]: its running episode is not a finite return and a whole length")
        elif first_problem(entry["env"]):
            problems.append(f"'envs'[{i}]: {first_problem(entry['env'])}")
        if len(problems) >= 3:
            break
    carry = state.get("carry")
    if not (
        isinstance(carry, dict)
        and isinstance(carry.get("env_obs"), dict)
        and isinstance(carry.get("obs"), dict)
        and isinstance(carry.get("last_dones"), torch.Tensor)
        and carry["last_dones"].dtype == torch.bool
        and tuple(carry["last_dones"].shape) == (len(envs),)
        and all(
            isinstance(t, torch.Tensor) and t.shape[:1] == (len(envs),)
            for t in [*carry["env_obs"].values(), *carry["obs"].values()]
        )
    ):
        problems.append(f"'carry': not the first rows of {len(envs)} envs' observations and their episode ends")
    return problems


def _put_carry(ppo: "PPO", carry: dict[str, Any], source: str) -> None:
    s = ppo.storage
    rows = [(s.env_obs, carry["env_obs"]), (s.obs, carry["obs"])]
    for arrays, saved in rows:
        for key, value in saved.items():
            if key not in arrays or tuple(value.shape) != arrays[key].shape[1:] or value.numpy().dtype != arrays[key].dtype:
                raise CheckpointError(f"{source}: the saved first row of observation {key!r} does not fit this run's storage")
            arrays[key][0] = value.numpy()
    if (s.action_masks is None) != ("action_masks" not in carry):
        raise CheckpointError(
            f"{source}: saved {'with' if 'action_masks' in carry else 'without'} action masks, this run "
            f"{'has' if s.action_masks is not None else 'has none'}"
        )
    if s.action_masks is not None:
        if tuple(carry["action_masks"].shape) != s.action_masks.shape[1:]:
            raise CheckpointError(f"{source}: the saved action masks do not fit this run's")
        s.action_masks[0] = carry["action_masks"].numpy()
    s.last_dones[...] = carry["last_dones"].numpy()


#: the settings that make the envs: a resume with other values builds other envs, which the saved states do not fit
ENV_SETTINGS = (
    "env",
    "env_kwargs",
    "gym_packages",
    "pixel_obs_wrapper",
    "image_size",
    "grayscale",
    "pixel_keep_state",
    "frame_stack",
    "atari_wrapper",
    "atari_noop_max",
    "atari_frame_skip",
    "atari_terminal_on_life_loss",
    "atari_clip_reward",
    "atari_action_repeat_probability",
    "action_masks",
    "info_keywords",
)


def env_settings_changed(saved_config: Any, current: dict[str, Any]) -> list[str]:
    """The env settings whose values differ between a checkpoint's config and this run's (``--env_kwargs`` given anew)."""
    if not isinstance(saved_config, dict):
        return []
    return [name for name in ENV_SETTINGS if name in saved_config and name in current and saved_config[name] != current[name]]


def resume_envs(ppo: "PPO", state: dict[str, Any], source: str, trusted: bool) -> str:
    """Put the checkpoint's envs back into ``ppo``'s freshly built pool, where every env has a state; returns what was
    done, in a line. ``trusted``: the checkpoint is the run directory's own (only then are bytes that a C++ library
    parses, ALE's, given to it). Else the envs restart at the first rollout (``PPO.start_envs``), and the line says why."""
    if state.get("envs") is None:
        return f"envs reset with seed {ppo.env_seed} (the checkpoint holds no env states)"
    states = read_saved(state["envs"], "'envs'")  # checked whole before the run started (env_state_problems)
    reasons = restart_reasons(states)
    changed = env_settings_changed(state.get("config", {}), config_values(ppo.cfg))
    mine = range(ppo.n_envs) if ppo.ranks is None else ppo.ranks.envs  # over ranks, each rank's envs of the global ones
    n_envs = ppo.n_envs if ppo.ranks is None else ppo.ranks.n_envs
    if changed:  # the saved states are of other envs (an env's constructor arguments are among its attributes)
        reasons = [f"the env's settings differ from the checkpoint's ({', '.join(changed)})"]
    elif len(states) != n_envs:
        reasons = [f"the checkpoint holds {len(states)} envs, this run has {n_envs}"]
    states = states[mine.start : mine.stop]
    carry = {
        key: (
            {k: v[mine.start : mine.stop] for k, v in value.items()}
            if isinstance(value, dict)
            else value[mine.start : mine.stop]
        )
        for key, value in state["carry"].items()
    }
    if not trusted and not reasons and any("ale" in layer for entry in states for layer in entry["env"]):
        reasons = [
            "ALE's saved emulator bytes are restored only from the run directory's own checkpoints (this one is from "
            "elsewhere)"
        ]
    if reasons:
        return f"envs reset with seed {ppo.env_seed}, not restored: " + "; ".join(reasons)

    def put_back() -> None:
        try:
            ppo.pool.call("load_env_states", list(range(ppo.n_envs)), "", (trusted,), per_env=states)
        except StateNotRestorable as exc:
            raise CheckpointError(f"{source}: a saved env state does not fit this run's envs: {exc}") from exc
        _put_carry(ppo, carry, source)

    try:
        ppo.start_envs_as_saved(put_back)
    except StateNotRestorable as exc:
        raise CheckpointError(f"{source}: a saved env state does not fit this run's envs: {exc}") from exc
    whose = "" if ppo.ranks is None else f" of {n_envs} (this rank's)"
    return f"{len(states)} envs{whose} restored as they were at step {ppo.num_timesteps}"
