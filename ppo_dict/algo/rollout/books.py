"""A rollout step's books: what sb3 does between ``env.step`` and ``rollout_buffer.add``, one function per rule, run
by whichever process keeps the books of the envs it stepped: the main process for every env
(``ppo_dict.algo.rollout.collect``, central and double-buffered), or each process for its own columns (the sharded
step, ``ppo_dict.algo.rollout.shard``). Each rule is written here once, so that every schedule runs the same code:

* :func:`check_finite`: a NaN/inf observation or reward named before it reaches the normaliser;
* :func:`learner_rows`: the observations, terminal observations and rewards as the learner uses them (normalised with
  the statistics the whole batch updated: ``Normalizer.observe``, the main process's);
* :func:`add_bootstrap`: the time-limit bootstrap's arithmetic, ``r += gamma * V(terminal obs)``;
* :func:`start_episodes`: the episode starts stored, the step's ends kept for the next.
"""

from __future__ import annotations

from typing import Any, Optional

import numpy as np

from ppo_dict.algo.rollout.normalize import Normalizer
from ppo_dict.core.errors import NonFiniteError
from ppo_dict.data.storage import RolloutStorage


def check_finite(storage: RolloutStorage, t: int, columns: range, label: str, steps_before: int, n_envs: int) -> None:
    """Name the env and step of a NaN/inf observation or reward of the envs ``columns`` at rollout step ``t``,
    before it reaches the normaliser (:class:`NonFiniteError`; ``steps_before``: env steps of earlier rollouts).

    Per step this is one ``isfinite().all()`` per float array (terminal observations only where an
    episode ended); the offending env is looked for only once something is not finite.
    """
    s, span = storage, slice(columns.start, columns.stop)
    checks = [("reward", s.env_rewards[t, span], None)]
    checks += [(f"observation[{key!r}]", arr[t + 1, span], None) for key, arr in s.env_obs.items() if arr.dtype.kind == "f"]
    dones = s.terminated[t, span] | s.truncated[t, span]
    if dones.any():
        rows = np.flatnonzero(dones) + columns.start
        checks += [
            (f"terminal observation[{key!r}]", arr[rows], rows)
            for key, arr in s.env_terminal_obs.items()
            if arr.dtype.kind == "f"
        ]
    for what, arr, rows in checks:
        if np.isfinite(arr).all():
            continue
        bad = np.flatnonzero(~np.isfinite(arr.reshape(len(arr), -1)).all(axis=1))[0]
        env = int(columns.start + bad if rows is None else rows[bad])
        raise NonFiniteError(
            f"non-finite {what} from env {env} ({label}) at rollout step {t} "
            f"(total steps {steps_before + (t + 1) * n_envs}); statistics were not updated with it"
        )


def learner_rows(storage: RolloutStorage, normalizer: Optional[Normalizer], t: int, rows: slice) -> None:
    """Step t's results of the envs ``rows`` as the learner uses them: the observations after it and the terminal ones
    of the envs it ended normalised (``VecNormalize`` with the statistics as they are: observed first, from the whole
    batch), the rewards normalised (or copied, without a normaliser). Elementwise: any grouping of the rows gives the
    same bits."""
    s = storage
    if normalizer is None:
        s.rewards[t, rows] = s.env_rewards[t, rows]
        return
    for key, values in normalizer.normalize_obs({key: s.env_obs[key][t + 1, rows] for key in normalizer.obs_rms}).items():
        s.obs[key][t + 1, rows] = values
    done = np.flatnonzero(s.terminated[t, rows] | s.truncated[t, rows]) + rows.start
    if len(done):
        for key, values in normalizer.normalize_obs(
            {key: s.env_terminal_obs[key][done] for key in normalizer.obs_rms}
        ).items():
            s.terminal_obs[key][done] = values
    s.rewards[t, rows] = normalizer.normalize_reward(s.env_rewards[t, rows])


def add_bootstrap(rewards: np.ndarray, idx: Any, gamma: float, value: Any) -> None:
    """The time-limit bootstrap, ``rewards[idx] += gamma * value``, for one env (an index and its critic's value: sb3's
    form, each terminal observation a batch of one) or several (index and value arrays: the batched forms of the
    double-buffered and device rollouts). sb3 multiplies a float32 tensor by a Python float in float32 and adds in
    float32; the same two roundings here on numpy float32 values."""
    rewards[idx] += np.float32(gamma) * np.float32(value)  # a float32 scalar, or a float32 array


def start_episodes(storage: RolloutStorage, t: int, rows: slice, dones: np.ndarray) -> None:
    """sb3's ``rollout_buffer.add(..., self._last_episode_starts)`` for the envs ``rows``, then
    ``self._last_episode_starts = dones``."""
    storage.episode_starts[t, rows] = storage.last_dones[rows]
    storage.last_dones[rows] = dones
