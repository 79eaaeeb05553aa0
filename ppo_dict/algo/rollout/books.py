"""A rollout step's books: what sb3 does between ``env.step`` and ``rollout_buffer.add``, one function per rule, run
by whichever process keeps the books of the envs it stepped: the main process for every env
(``ppo_dict.algo.rollout.collect``, central and double-buffered), or each process for its own columns (the sharded
step, ``ppo_dict.algo.rollout.shard``). Each rule is written here once, so that every schedule runs the same code:

* :func:`check_finite`: a NaN/inf observation or reward named before it reaches the normaliser;
* :func:`learner_rows`: the observations, terminal observations and rewards as the learner uses them (normalised with
  the statistics the whole batch updated: ``Normalizer.observe``, the main process's);
* :func:`add_bootstrap`: the time-limit bootstrap's arithmetic, ``r += gamma * V(terminal obs)``, which every form of
  it runs: sb3's, each cut episode's terminal observation a batch of one (the CPU's exact rollouts, central and sharded),
  and one batch of a step's cut episodes (double-buffered rollouts; on an accelerator :func:`batched_bootstrap`, with
  no wait of its own);
* :func:`start_episodes`: the episode starts stored, the step's ends kept for the next.


On an accelerator, sb3's form costs one synchronisation per cut episode (its ``.item()``; Reacher cuts all 64 envs at
once every 50 steps: 64 waits in one step). :func:`batched_bootstrap` sends the terminal observations over in one
pinned, non-blocking copy, runs the critic once on the batch and copies its values back without blocking; the addition
to the rewards is handed back as a unit of owed work (:class:`~ppo_dict.algo.rollout.collect.OwedWork`), done once the
next step's synchronisation has already waited for the copy (or, at the rollout's end, after one wait). Not sb3's bits
(a batch rounds by its size, 1.2e-7); the CPU keeps sb3's per-env order (``Collector._bootstrap_truncated``).
"""

from __future__ import annotations

from typing import Any, Callable, Optional

import numpy as np
import torch

from ppo_dict.algo.rollout.normalize import Normalizer
from ppo_dict.algo.rollout.rollout_step import PolicyStep
from ppo_dict.core.errors import NonFiniteError
from ppo_dict.data.storage import OBS_KEY, RolloutStorage, TensorObs, channel_first


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


def host_buffer(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """An empty host tensor for copies to or from ``device``: page-locked for CUDA (a non-blocking copy
    needs it; torch's caching host allocator reuses the block only once the copies that used it are
    done), plain memory otherwise."""
    return torch.empty(shape, dtype=dtype, pin_memory=device.type == "cuda")


def terminal_batch(storage: RolloutStorage, envs: np.ndarray, device: torch.device) -> TensorObs:
    """Envs ``envs``' terminal observations as one policy batch ``[len(envs), ...]`` on ``device``.

    One gather per key into a host buffer (:func:`host_buffer`) and one non-blocking copy to the
    device: no wait. uint8 images travel as uint8 (the policy scales them on the device); channel-last
    images are seen as ``[C, H, W]`` views, as :class:`StepObsToDevice` shows a step's.
    """
    index = torch.from_numpy(np.ascontiguousarray(envs, dtype=np.int64))
    batch = {}
    for key, arr in storage.terminal_obs.items():
        source = torch.from_numpy(arr)  # [n_envs, *shape], each env's row aligned (step_major)
        gathered = torch.index_select(source, 0, index, out=host_buffer((len(envs), *source.shape[1:]), source.dtype, device))
        on_device = gathered.to(device, non_blocking=True)
        batch[key] = channel_first(on_device) if key in storage.channel_last_keys else on_device
    return batch if storage.is_dict_obs else batch[OBS_KEY]


def device_values(step: PolicyStep, obs: TensorObs) -> tuple[torch.Tensor, Optional["torch.cuda.Event"]]:
    """``(values, done)``: the critic's values of a batch, float32 ``[B]``, in a host tensor, and on CUDA
    the event after which they are there (the copy back is non-blocking: nothing waits here); None
    where they are there already."""
    with torch.inference_mode():
        values = step.critic(obs).reshape(-1)
    host = host_buffer(tuple(values.shape), values.dtype, values.device)
    host.copy_(values, non_blocking=values.device.type == "cuda")
    if values.device.type != "cuda":
        return host, None
    done = torch.cuda.Event()
    done.record(torch.cuda.current_stream(values.device))
    return host, done


def batched_bootstrap(
    step: PolicyStep,
    storage: RolloutStorage,
    rewards: np.ndarray,
    rows: np.ndarray,
    envs: np.ndarray,
    device: torch.device,
    gamma: float,
) -> Callable[[], None]:
    """Start valuing envs ``envs``' terminal observations on ``device`` (nothing waits); returns the unit that
    adds ``gamma * value`` to ``rewards[rows]`` (float32, as sb3's addition), waiting for the values if need be.
    rows: indices into ``rewards`` (one step's row of the envs stepped); envs: those envs' indices."""
    values, done = device_values(step, terminal_batch(storage, envs, device))

    def add() -> None:
        if done is not None:
            done.synchronize()  # already passed once the next step has synchronised
        add_bootstrap(rewards, rows, gamma, values.numpy())

    return add
