"""A rank's rollout as a share of the single process's (``torchrun``): the global batch's noise, normaliser and episodes.

Each rank steps its envs ``ranks.envs`` of the global ``n_envs`` (``ppo_dict.algo.ranks.distributed.Ranks``) and keeps
what needs the whole batch as the single process keeps it:

* ``GlobalDraws`` (``ppo_dict.algo.rollout.rollout_step``, each policy step built with it where the run's plan is over
  ranks): every rank draws the *global* batch's random numbers (``[n_envs, ...]``, with the calls
  and in the order of the single process: ``normal_``, one ``exponential_`` per categorical split, ``uniform_``;
  the generators seeded alike on every rank, so every rank's stream is the single process's) and samples its
  rows with them (``ppo_dict.data.lean_sampling``'s ``sample``), with the central step or the sharded step
  inside the rank. The actions are the single process's where the policy's rows are: a matrix product can
  round a row by the batch it is in, and a rank's batch is its own rows.
* :class:`RankNormalizer`: ``VecNormalize``'s statistics from the gathered raw batch (every rank's rows, in env
  order), with sb3's arithmetic on every rank: the single process's bits; each rank normalises its own rows.
* :class:`RankEpisodes`: the episodes every rank ended, merged at the rollout's end in sb3's order (by step, then
  env), so ``rollout/*`` and the episode buffers are the single process's on every rank.
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

import numpy as np

from ppo_dict.algo.ranks.distributed import Ranks
from ppo_dict.algo.rollout.normalize import Normalizer
from ppo_dict.core.errors import EnvCallInterrupted, RankError, RolloutDropped, WorkerDiedError
from ppo_dict.data.episodes import EpisodeLog
from ppo_dict.vec import watchdog


class RankNormalizer:
    """``base`` (the run's normaliser, held, not copied) over the global batch: :meth:`reset` and :meth:`observe` take this
    rank's rows and fold in every rank's (gathered: one collective per step) with ``base``'s own arithmetic, its discounted
    returns kept for every env. Everything else (the statistics, the settings a script assigns, normalising, saving) is
    ``base``'s: read from it and written to it."""

    #: This object's own attributes; every other one is ``base``'s.
    OWN = ("base", "ranks", "observed")
    #: ``Normalizer.step`` (sb3's order) with this object's :meth:`observe`.
    step = Normalizer.step

    def __init__(self, base: Normalizer, ranks: Ranks):
        object.__setattr__(self, "base", base)
        self.ranks = ranks
        base.returns = np.zeros(ranks.n_envs)
        self.observed = 0  # steps of the rollout in progress folded in (a dropped rollout's rank joins the others' rest)

    def __getattr__(self, name: str) -> Any:  # asked only for what this object has not: ``base``'s
        if name == "base":  # an object being copied or unpickled, before its base is set
            raise AttributeError(name)
        return getattr(self.base, name)

    def __setattr__(self, name: str, value: Any) -> None:
        if name in self.OWN:
            object.__setattr__(self, name, value)
        else:
            setattr(self.base, name, value)

    def reset(self, obs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        base = self.base
        base.returns = np.zeros(self.ranks.n_envs)  # every env's, whatever size a resumed or set value had
        if base.training and base.norm_obs:
            keys = list(base.obs_rms)
            for key, whole in zip(keys, self.ranks.gather_rows([obs[key] for key in keys], what="the normaliser's reset")):
                base.obs_rms[key].update(whole)
        return base.normalize_obs(obs)

    def observe(self, obs: dict[str, np.ndarray], rewards: np.ndarray, dones: np.ndarray, rows: slice = slice(None)) -> None:
        """This rank's rows (all of them: ``rows`` covers the rank's batch) into the global batch's statistics."""
        base = self.base
        keys = list(base.obs_rms) if base.training and base.norm_obs else []
        *whole, whole_rewards, whole_dones = self.ranks.gather_rows(
            [*(obs[key] for key in keys), rewards, dones], what="the normaliser's step"
        )
        base.observe(dict(zip(keys, whole)), whole_rewards, whole_dones)
        self.observed += 1

    def catch_up(self, storage: Any) -> None:
        """The rest of a rollout this rank dropped: its part (zeros) of each step the other ranks still gather. Every rank
        then goes back to the state after the last update, these statistics with it."""
        keys = list(self.obs_rms) if self.training and self.norm_obs else []
        blank = [np.zeros_like(storage.env_obs[key][0]) for key in keys]
        blank += [np.zeros_like(storage.env_rewards[0]), np.zeros(storage.n_envs, dtype=bool)]
        for _ in range(self.observed, storage.n_steps):
            self.ranks.gather_rows(blank, what="the normaliser's step (a dropped rollout)")


class RankEpisodes(EpisodeLog):
    """sb3's episode buffers over every rank's envs: a rollout's episodes are kept, then merged at its end
    (:meth:`merge`) in sb3's order, the same on every rank."""

    def __init__(self, base: EpisodeLog, ranks: Ranks):
        super().__init__(base.keywords, base.info_buffer.maxlen or 100)
        self.ranks = ranks
        self.pending: list[tuple[np.ndarray, np.ndarray, Sequence[str]]] = []

    def read_rows(self, values: np.ndarray, kinds: np.ndarray, info_keywords: Sequence[str]) -> None:
        """One step's ended envs of this rank (copies, in env order): kept until the rollout's end."""
        self.pending.append((values, kinds, info_keywords))

    def merge(self, dones: np.ndarray, dropped: Optional[tuple[str, int]] = None) -> None:
        """Every rank's episodes of the rollout into the buffers, by step then env. ``dones``: bool ``[steps, n_local]``,
        this rank's episode ends of the rollout (each step with one is one :meth:`read_rows` call, in order).
        ``dropped``: ``(why, signal)`` where a stop ended this rank's rollout. Where any rank's was, every rank raises
        :class:`RolloutDropped` (the rollout is dropped everywhere) instead."""
        ended_at = np.flatnonzero(dones.any(axis=1)) if dones.size else np.zeros(0, dtype=np.int64)
        if dropped is None and len(ended_at) != len(self.pending):
            raise RankError(
                f"{self.ranks.info.name}: {len(self.pending)} steps of ended episodes were read, but the rollout "
                f"has {len(ended_at)} steps with an episode end"
            )
        mine = [] if dropped is not None else [(int(t), v, k, keywords) for t, (v, k, keywords) in zip(ended_at, self.pending)]
        self.pending = []
        everyone = self.ranks.gather_objects((dropped, mine), what="the rollout's episodes")
        for rank, (why, _) in enumerate(everyone):
            if why is not None:
                raise RolloutDropped(f"rank {rank}: {why[0]}", why[1])
        merged = sorted(
            ((item, rank) for rank, (_, items) in enumerate(everyone) for item in items),
            key=lambda pair: (pair[0][0], pair[1]),
        )
        for (_, values, kinds, keywords), _ in merged:
            super().read_rows(values, kinds, keywords)


def stop_signal(exc: BaseException) -> Optional[int]:
    """The stop signal behind a rollout's error (an env call it interrupted, workers it ended), None for a fault."""
    signals = watchdog.WATCHDOG.signals
    if isinstance(exc, EnvCallInterrupted):
        return getattr(exc, "signum", None) or (signals[0] if signals else 2)
    return signals[0] if isinstance(exc, WorkerDiedError) and signals else None


def rank_collect(collector: Any, ranks: Ranks, steps_before: int) -> int:
    """A rollout of this rank's envs (``collector``'s), then every rank's episodes in sb3's order; returns the global
    batch's env steps. A stop that ends this rank's rollout ends every rank's (:class:`RolloutDropped`, raised on all)."""
    storage, normalizer, episodes = collector.storage, collector.normalizer, collector.episodes
    if normalizer is not None:
        normalizer.observed = 0
    try:
        steps = collector.collect(steps_before) // storage.n_envs
    except BaseException as exc:
        signum = stop_signal(exc)
        if signum is None:  # a fault: this rank ends, and the others with it (ppo_dict.run.ranks)
            raise
        if normalizer is not None:
            normalizer.catch_up(storage)
        episodes.merge(np.zeros((0, storage.n_envs), dtype=bool), dropped=(f"{type(exc).__name__}: {exc}", signum))
        raise
    episodes.merge(storage.terminated[:steps] | storage.truncated[:steps])
    return steps * ranks.n_envs
