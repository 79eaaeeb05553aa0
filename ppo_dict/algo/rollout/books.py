"""Checks of what the envs gave, made by whichever process stepped them (``ppo_dict.algo.rollout.collect``, ``ppo_dict.algo.rollout.shard``)."""
from __future__ import annotations

import numpy as np

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
        checks += [(f"terminal observation[{key!r}]", arr[rows], rows) for key, arr in s.env_terminal_obs.items() if arr.dtype.kind == "f"]
    for what, arr, rows in checks:
        if np.isfinite(arr).all():
            continue
        bad = np.flatnonzero(~np.isfinite(arr.reshape(len(arr), -1)).all(axis=1))[0]
        env = int(columns.start + bad if rows is None else rows[bad])
        raise NonFiniteError(
            f"non-finite {what} from env {env} ({label}) at rollout step {t} "
            f"(total steps {steps_before + (t + 1) * n_envs}); statistics were not updated with it"
        )
