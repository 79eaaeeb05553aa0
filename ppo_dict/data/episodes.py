"""Episode statistics, from an env's step to the logs: one book for every runner and for evaluation.

An episode's named statistics are sb3 ``Monitor``'s return ``r`` and length ``l``, sb3's success
flag (``info["is_success"]`` at an episode end: ``rollout/success_rate``), and rl-zoo's
``info_keywords`` (``Monitor(info_keywords=...)``: ``info[key]`` at an episode end, logged here as
``rollout/<key>``, the mean over the same window as ``ep_rew_mean``).

* :class:`EpisodeBook`, the env side (each runner, in whichever process steps its envs, and
  evaluation): each env's running return and length, Monitor's semantics, and what an episode end
  writes into the storage's episode arrays: ``episode_values: float64[n_envs, columns]`` and
  ``episode_kinds: uint8[n_envs, columns]``, one column per statistic (:data:`RETURN`,
  :data:`LENGTH`, :data:`SUCCESS`, then the info keywords), in shared memory when the envs run in
  worker processes.
* :class:`EpisodeLog`, the main side: sb3's ``ep_info_buffer`` and ``ep_success_buffer`` (the last
  100 of each), filled from the storage at each step's episode ends, and the ``rollout/*`` values
  sb3's ``dump_logs`` records.

A value crosses as a float64 beside its kind (:data:`KINDS`), the Python or numpy type it had, and
is rebuilt as that type: the main side holds what sb3's buffers hold, so the means are sb3's
(gymnasium-robotics gives ``np.float32`` successes, which ``np.mean`` averages in float32).
Integers are exact up to 2**53. Kind 0 (:data:`ABSENT`): nothing to record in that column.
"""

from __future__ import annotations

import time
from collections import deque
from typing import Any, Optional, Sequence

import numpy as np
import torch

from ppo_dict.envs.monitor import EPISODE, is_monitored

#: the columns of the episode arrays: Monitor's return and length, sb3's success flag, Monitor's own
#: episode time where its info["episode"] gave one (``t``: seconds since the Monitor was built); the info keywords follow
RETURN, LENGTH, SUCCESS, TIME = 0, 1, 2, 3
BUILT_IN = 4
#: the info key sb3's ``_update_info_buffer`` reads at an episode end
SUCCESS_KEY = "is_success"
#: sb3's ``stats_window_size``: the episodes behind ``rollout/*``
STATS_WINDOW = 100
#: kind -> the type a value is rebuilt as (0: absent): Python's bool, int, float, then numpy's scalars
KINDS: tuple = (None, bool, int, float, *dict.fromkeys(np.dtype(c).type for c in "?bhilqBHILQefd"))
KIND = {t: k for k, t in enumerate(KINDS) if t is not None}
ABSENT, INT, FLOAT = 0, KIND[int], KIND[float]


def episode_columns(info_keywords: Sequence[str]) -> int:
    """Columns of the episode arrays for these info keywords."""
    return BUILT_IN + len(info_keywords)


def encode(value: Any, what: str) -> tuple[float, int]:
    """``(value as float64, kind)`` of a bool or a number (Python's, a numpy scalar or a 0-d array)."""
    kind = KIND.get(type(value))
    if kind is None and isinstance(value, np.ndarray) and value.ndim == 0:
        kind, value = KIND.get(value.dtype.type), value[()]
    if kind is None:
        raise TypeError(
            f"{what} is {value!r} ({type(value).__name__}): ppo_dict carries booleans and numbers "
            "(Python's, numpy scalars, 0-d arrays) from the envs"
        )
    return float(value), kind


def decode(value: float, kind: int) -> Any:
    """The value :func:`encode` was given (its type and value), or None for :data:`ABSENT`."""
    return None if kind == ABSENT else KINDS[kind](value)


class EpisodeBook:
    """The env side: running return and length of env columns ``0..n-1`` of a runner, and the
    statistics an episode end writes into rows ``values[i]``, ``kinds[i]``.

    The runner adds each step's ``float(reward)`` to ``returns[j]`` and 1 to ``lengths[j]`` in its
    own loop (a method call per env step would cost more than the rest of the bookkeeping), and
    calls :meth:`end` at an episode end, before the env's reset. Monitor's semantics: the return
    summed in float64, rounded to 6 decimals (``rounded``; sb3's ``evaluate_policy`` on an env
    without a Monitor sums without rounding), or, for an env with training-only wrappers
    (:meth:`watch`), the ``EpisodeMonitor``'s beneath them (``envs.monitor``), where sb3's
    ``make_vec_env`` puts its ``Monitor``: a lost Atari life records no return or length.
    """

    def __init__(
        self,
        values: np.ndarray,
        kinds: np.ndarray,
        block: Sequence[int],
        info_keywords: Sequence[str] = (),
        rounded: bool = True,
    ):
        # memoryviews of each env's rows: writing an item through one costs a fraction of numpy's item assignment
        self.rows = [(memoryview(values[i]), memoryview(kinds[i])) for i in block]
        self._arrays = values, kinds
        self._block = list(block)
        self.keywords = tuple(enumerate(info_keywords, BUILT_IN))
        self.rounded = rounded
        self.returns: list[float] = [0.0] * len(block)
        self.lengths: list[int] = [0] * len(block)
        self.monitored = [False] * len(block)

    @classmethod
    def for_storage(cls, storage: Any, block: Sequence[int]) -> "EpisodeBook":
        """The book of a runner's columns ``block`` of a :class:`~ppo_dict.data.storage.RolloutStorage`."""
        return cls(storage.episode_values, storage.episode_kinds, block, storage.info_keywords)

    @classmethod
    def alone(cls, info_keywords: Sequence[str] = (), rounded: bool = True) -> "EpisodeBook":
        """The book of one env with rows of its own (evaluation); :meth:`read` gives what an end wrote."""
        columns = episode_columns(info_keywords)
        return cls(np.zeros((1, columns)), np.zeros((1, columns), np.uint8), [0], info_keywords, rounded)

    def watch(self, j: int, env: Any) -> None:
        """Env ``j`` is a gymnasium env: its statistics come from its EpisodeMonitor if it has one."""
        self.monitored[j] = is_monitored(env)

    def start(self, j: int) -> None:
        """Env ``j`` starts an episode (its first reset)."""
        self.returns[j], self.lengths[j] = 0.0, 0

    def end(self, j: int, info: Optional[dict[str, Any]]) -> None:
        """Env ``j`` ended an episode at this step, whose info (before the reset) is ``info``
        (None: a backend without infos). sb3 records the success flag at every episode end, a lost
        life's included; Monitor records return, length and the info keywords at the ends it sees."""
        values, kinds = self.rows[j]
        kinds[TIME] = ABSENT
        if not self.monitored[j]:
            ended = True
            values[RETURN] = round(self.returns[j], 6) if self.rounded else self.returns[j]
            values[LENGTH] = float(self.lengths[j])
        else:
            episode = info.get(EPISODE)
            ended = episode is not None
            if ended:  # in the types the info gave them (VecMonitor's float32 return and int32 length), as sb3 keeps them
                values[RETURN], kinds[RETURN] = encode(episode["r"], "info['episode']['r']")
                values[LENGTH], kinds[LENGTH] = encode(episode["l"], "info['episode']['l']")
                if "t" in episode:
                    values[TIME], kinds[TIME] = encode(episode["t"], "info['episode']['t']")
        if not ended or not self.monitored[j]:
            kinds[RETURN], kinds[LENGTH] = (FLOAT, INT) if ended else (ABSENT, ABSENT)
        success = None if info is None else info.get(SUCCESS_KEY)
        if success is None:
            kinds[SUCCESS] = ABSENT
        else:
            values[SUCCESS], kinds[SUCCESS] = encode(success, f"info[{SUCCESS_KEY!r}]")
        for column, key in self.keywords:
            if not ended:
                kinds[column] = ABSENT
            elif info is None or key not in info:  # sb3's Monitor fails here too (a KeyError)
                raise KeyError(
                    f"info_keywords: the env's info at an episode end has no {key!r} (its keys: {sorted(info or {})})"
                )
            else:
                values[column], kinds[column] = encode(info[key], f"info[{key!r}]")
        self.returns[j], self.lengths[j] = 0.0, 0

    def read(self, j: int = 0) -> tuple[Optional[dict[str, Any]], Any]:
        """``(episode, success)`` of the last end of env ``j``: see :func:`read_row`."""
        i = self._block[j]
        return read_row(self._arrays[0][i], self._arrays[1][i], [key for _, key in self.keywords])


def read_row(values: np.ndarray, kinds: np.ndarray, info_keywords: Sequence[str]) -> tuple[Optional[dict[str, Any]], Any]:
    """``(episode, success)`` from one env's row: sb3's ``info["episode"]`` as Monitor makes it
    (``{"r": float, "l": int, "t": float, key: value...}``, each in the type the env's monitor gave it: a
    ``VecMonitor``'s float32 return and int32 length; ``t`` where the env's Monitor gave it;
    None where no return was recorded) and its
    ``info["is_success"]`` (None where the info had none)."""
    values, kinds = values.tolist(), kinds.tolist()
    episode = None
    if kinds[RETURN]:
        episode = {"r": decode(values[RETURN], kinds[RETURN]), "l": decode(values[LENGTH], kinds[LENGTH])}
        if kinds[TIME]:
            episode["t"] = decode(values[TIME], kinds[TIME])
        for column, key in enumerate(info_keywords, BUILT_IN):
            episode[key] = decode(values[column], kinds[column])
    return episode, decode(values[SUCCESS], kinds[SUCCESS])


def safe_mean(values: Any) -> float:
    """sb3's ``safe_mean``: ``np.nan`` for no value, else ``float(np.mean(values))``."""
    return np.nan if len(values) == 0 else float(np.mean(values))


class EpisodeLog:
    """The main side: sb3's ``ep_info_buffer`` (``info_buffer``: Monitor's episode dicts) and
    ``ep_success_buffer`` (``success_buffer``), each holding the last :data:`STATS_WINDOW`."""

    def __init__(self, info_keywords: Sequence[str] = (), window: int = STATS_WINDOW):
        self.keywords = tuple(info_keywords)
        self.info_buffer: deque[dict[str, Any]] = deque(maxlen=window)
        self.success_buffer: deque[Any] = deque(maxlen=window)
        #: episodes recorded since the run began (a resumed run's count goes on from its checkpoint's; None: a
        #: checkpoint written before it was kept), and where set, every recorded one with the time it was read
        #: (``time.time()``): what a run's ``monitor.csv`` writes (``ppo_dict.run.monitor_csv``)
        self.total: Optional[int] = 0
        self.ended: Optional[list[tuple[dict[str, Any], float]]] = None

    def read(self, storage: Any, rows: Sequence[int]) -> None:
        """sb3's ``_update_info_buffer`` for the envs ``rows`` (in env order) whose episode ended at this step."""
        self.read_rows(storage.episode_values[rows], storage.episode_kinds[rows], storage.info_keywords)

    def read_rows(self, values: np.ndarray, kinds: np.ndarray, info_keywords: Sequence[str]) -> None:
        """:meth:`read` of the envs' rows of the storage's ``episode_values`` and ``episode_kinds`` (copies), in env order."""
        for row_values, row_kinds in zip(values, kinds):
            episode, success = read_row(row_values, row_kinds, info_keywords)
            if episode is not None:
                self.info_buffer.append(episode)
                self.total = None if self.total is None else self.total + 1
                if self.ended is not None:
                    self.ended.append((episode, time.time()))
            if success is not None:
                self.success_buffer.append(success)

    def logs(self) -> dict[str, float]:
        """What sb3's ``dump_logs`` records from the buffers: ``rollout/ep_rew_mean`` and ``ep_len_mean``
        once an episode ended, ``rollout/success_rate`` once a success flag came; and ``rollout/<key>``
        for each info keyword."""
        out: dict[str, float] = {}
        if self.info_buffer:
            out["rollout/ep_rew_mean"] = safe_mean([e["r"] for e in self.info_buffer])
            out["rollout/ep_len_mean"] = safe_mean([e["l"] for e in self.info_buffer])
            for key in self.keywords:
                values = [e[key] for e in self.info_buffer if key in e]  # a resumed buffer may predate the keyword
                if values:
                    out[f"rollout/{key}"] = safe_mean(values)
        if self.success_buffer:
            out["rollout/success_rate"] = safe_mean(self.success_buffer)
        return out

    def mean(self, key: str = "r") -> float:
        """The mean of one statistic over the episodes in the window (nan before any)."""
        return safe_mean([e[key] for e in self.info_buffer if key in e])

    # ------------------------------------------------------------------ checkpoints
    def state(self) -> dict[str, Any]:
        """The buffers as tensors (a ``weights_only`` file holds them): ``ep_r: float64[k]``,
        ``ep_l: int64[k]``, ``ep_info: {key: float64[k]}`` and ``ep_info_kinds: {key: uint8[k]}``,
        ``ep_success: float64[m]`` and ``ep_success_kinds: uint8[m]``, ``ep_total: int64[]`` (:attr:`total`)."""
        info = {key: [encode(e[key], key) if key in e else (0.0, ABSENT) for e in self.info_buffer] for key in self.keywords}
        success = [encode(s, SUCCESS_KEY) for s in self.success_buffer]
        return {
            "ep_r": torch.tensor([e["r"] for e in self.info_buffer], dtype=torch.float64),
            "ep_l": torch.tensor([e["l"] for e in self.info_buffer], dtype=torch.int64),
            "ep_info": {key: torch.tensor([v for v, _ in pairs], dtype=torch.float64) for key, pairs in info.items()},
            "ep_info_kinds": {key: torch.tensor([k for _, k in pairs], dtype=torch.uint8) for key, pairs in info.items()},
            "ep_success": torch.tensor([v for v, _ in success], dtype=torch.float64),
            "ep_success_kinds": torch.tensor([k for _, k in success], dtype=torch.uint8),
            **({} if self.total is None else {"ep_total": torch.tensor(self.total, dtype=torch.int64)}),
        }

    def load_state(self, state: dict[str, Any]) -> None:
        """The buffers from :meth:`state`'s tensors (a checkpoint written before successes and info
        keywords were kept has only ``ep_r`` and ``ep_l``)."""
        self.info_buffer.clear()
        info, kinds = state.get("ep_info", {}), state.get("ep_info_kinds", {})
        for n, (r, length) in enumerate(zip(state["ep_r"].tolist(), state["ep_l"].tolist())):
            episode = {"r": float(r), "l": int(length)}
            for key in self.keywords:
                if key in info and kinds[key][n]:
                    episode[key] = decode(float(info[key][n]), int(kinds[key][n]))
            self.info_buffer.append(episode)
        total = state.get("ep_total")
        counted = isinstance(total, torch.Tensor) and total.ndim == 0 and not total.is_floating_point() and int(total) >= 0
        self.total = int(total) if counted else None  # absent (an older checkpoint) or not a count: not known
        self.success_buffer.clear()
        self.success_buffer.extend(
            decode(v, k)
            for v, k in zip(
                state.get("ep_success", torch.zeros(0)).tolist(), state.get("ep_success_kinds", torch.zeros(0)).tolist()
            )
        )
