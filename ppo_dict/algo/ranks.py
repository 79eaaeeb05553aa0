"""One PPO over several ranks (``torchrun``): the collectives, and the update equal to the single process's.

Each rank steps its contiguous share of the global envs (``ppo_dict.core.ranks``) into storage of its own;
together the ranks' storages are the single process's buffer, in sb3's env order. The update runs on every
rank at once (:func:`ranked_update`):

* one permutation per epoch from numpy's global generator, seeded alike on every rank (sb3's
  ``np.random.permutation`` of the global buffer, whose flat index is ``env * n_steps + step``); each rank takes its
  rows of every minibatch;
* the advantages normalised with the global minibatch's mean and std, computed as sb3 computes them (every rank
  holds the whole buffer's advantages, gathered once per update);
* each loss term this rank's part of the global minibatch mean (its sum over the global count): the all-reduced
  gradient is the global minibatch mean's, with unequal counts, sb3's truncated last minibatch, and a rank with
  no rows in a minibatch (which still joins);
* ``approx_kl``, the clip fraction and the logged losses reduced before ``target_kl`` is judged: every rank
  stops at the same minibatch, before backward; ``clip_grad_norm_`` and Adam on the reduced gradients, the same
  on every rank, so the parameters stay equal everywhere;
* ``explained_variance`` over the global buffer.

What is not sb3's bits: each rank's forward and backward run on its rows (a matrix product rounds by its batch),
and the sums are added across ranks; the update equals the single process's to float32 rounding (the tests
compare within ``rtol 1e-5 + atol 1e-7``).

A rank's rollout as a share of the single process's (``torchrun``): the global batch's noise, normaliser and episodes.

Each rank steps its envs ``ranks.envs`` of the global ``n_envs`` (:class:`Ranks`) and keeps
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

import contextlib
import math
from typing import Any, Iterator, Optional, Sequence

import numpy as np
import torch
import torch.distributed as dist
from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors

from ppo_dict.algo.networks.policy import ActorCritic
from ppo_dict.algo.rollout.normalize import Normalizer
from ppo_dict.algo.training.gradient_step import GradientStep
from ppo_dict.algo.training.update import Share, UpdateLog, UpdateSettings, loss_terms, prepare_update, run_epochs, update_logs
from ppo_dict.core.errors import EnvCallInterrupted, RankError, RankLostError, RolloutDropped, WorkerDiedError
from ppo_dict.core.ranks import RankInfo, env_ranges
from ppo_dict.data.episodes import EpisodeLog
from ppo_dict.data.storage import RolloutStorage
from ppo_dict.vec import watchdog


class Ranks:
    """This rank's place in a run over ``info.world`` ranks of ``n_envs`` global envs, and the collectives on the
    default process group (joined by ``ppo_dict.run.ranks``). ``envs``: the global envs this rank steps."""

    def __init__(self, info: RankInfo, n_envs: int):
        self.info, self.n_envs = info, n_envs
        self.rank, self.world = info.rank, info.world
        self.ranges = env_ranges(n_envs, info.world)
        self.envs = self.ranges[info.rank]

    @contextlib.contextmanager
    def collective(self, what: str) -> Iterator[None]:
        """A collective: an error in it (a rank gone: its connection closed, or no answer within the group's
        timeout) is a :class:`RankLostError` saying what this rank was doing."""
        try:
            yield
        except RankLostError:
            raise
        except Exception as exc:  # noqa: BLE001 (gloo's RuntimeError, torch's DistBackendError/DistNetworkError)
            cause = (str(exc).splitlines() or [""])[0].split(" This is typically caused")[0]
            raise RankLostError(f"{self.info.name} was waiting in {what} ({type(exc).__name__}: {cause})") from exc

    # ------------------------------------------------------------------ the collectives
    def gather_rows(self, arrays: Sequence[np.ndarray], per_env: int = 1, what: str = "a gather") -> list[np.ndarray]:
        """Every rank's ``arrays`` (each ``[len(envs) * per_env, ...]``), each concatenated in rank order:
        ``[n_envs * per_env, ...]`` each, dtypes kept; one collective for all of them (rows as bytes)."""
        counts = [len(r) * per_env for r in self.ranges]
        arrays = [np.ascontiguousarray(a) for a in arrays]
        widths = [a.dtype.itemsize * math.prod(a.shape[1:]) for a in arrays]
        send = torch.zeros((max(counts), sum(widths)), dtype=torch.uint8)
        at = 0
        for arr, width in zip(arrays, widths):
            if len(arr):
                send[: len(arr), at : at + width] = torch.from_numpy(arr.reshape(len(arr), -1).view(np.uint8))
            at += width
        received = [torch.empty_like(send) for _ in range(self.world)]
        with self.collective(what):
            dist.all_gather(received, send)
        rows = torch.cat([part[:count] for part, count in zip(received, counts)]).numpy()
        out, at = [], 0
        for arr, width in zip(arrays, widths):
            out.append(np.ascontiguousarray(rows[:, at : at + width]).view(arr.dtype).reshape((len(rows), *arr.shape[1:])))
            at += width
        return out

    def sum_(self, tensor: torch.Tensor, what: str = "a sum") -> torch.Tensor:
        """``tensor`` summed over the ranks, in place (every rank gets the same values)."""
        with self.collective(what):
            dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
        return tensor

    def largest(self, value: int, what: str = "an agreement") -> int:
        """The largest of every rank's ``value``."""
        tensor = torch.tensor([value], dtype=torch.int64)
        with self.collective(what):
            dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
        return int(tensor.item())

    def gather_objects(self, obj: Any, what: str = "a gather") -> list[Any]:
        """Every rank's picklable ``obj``, in rank order (the ranks' own values: trusted, they run this program)."""
        out: list[Any] = [None] * self.world
        with self.collective(what):
            dist.all_gather_object(out, obj)
        return out

    def from_first(self, obj: Any, what: str = "a broadcast") -> Any:
        """Rank 0's ``obj`` on every rank."""
        box = [obj]
        with self.collective(what):
            dist.broadcast_object_list(box, src=0)
        return box[0]


class ReducedGradientStep(GradientStep):
    """:class:`GradientStep` whose gradients are first summed over the ranks (one collective for all of them):
    ``clip_grad_norm_`` and Adam then see the global minibatch's gradient, the same on every rank."""

    def __init__(self, policy: torch.nn.Module, optimizer: torch.optim.Optimizer, ranks: Ranks):
        super().__init__(policy, optimizer)
        self.ranks = ranks

    def clip_grad_norm(self, max_norm: float) -> torch.Tensor:
        # a parameter outside the graph has no gradient on any rank (the graph is the same on every rank): zeros sent,
        # None kept
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in self.params]
        flat = self.ranks.sum_(_flatten_dense_tensors(grads), "the update's gradient sum")
        for grad, summed in zip(grads, _unflatten_dense_tensors(flat, grads)):
            grad.copy_(summed)
        return super().clip_grad_norm(max_norm)


#: The figures a minibatch reduces, in :class:`~ppo_dict.algo.training.update.LossTerms`' names.
FIGURES = ("policy_loss", "value_loss", "entropy_loss", "clip_fraction", "approx_kl", "loss")


def rank_rows(indices: torch.Tensor, first: int, count: int) -> torch.Tensor:
    """The rows of the global flat ``indices`` (int64 ``[B]``) in ``[first, first + count)``, in their order, as this
    rank's flat rows (``index - first``)."""
    mine = indices[(indices >= first) & (indices < first + count)]
    return mine - first


def ranked_update(
    policy: ActorCritic,
    optimizer: torch.optim.Optimizer,
    storage: RolloutStorage,
    settings: UpdateSettings,
    n_updates: int,
    device: torch.device,
    ranks: Ranks,
) -> tuple[dict[str, float], int]:
    """sb3 ``PPO.train`` on the global buffer, this rank holding ``storage`` (its envs' columns): see the module doc.
    Returns the ``train/*`` logs (global figures, the same on every rank) and the epoch counter."""
    data, rollout, evaluate = prepare_update(policy, optimizer, storage, settings, device)
    n_steps = storage.n_steps
    flat = [data[name].reshape(-1) for name in ("advantages", "values", "returns")]
    advantages, values, returns = ranks.gather_rows(flat, per_env=n_steps, what="the update's gather of the buffer")
    every = {"values": values, "returns": returns}
    all_advantages = torch.from_numpy(advantages).to(device)
    first, count = ranks.envs.start * n_steps, len(ranks.envs) * n_steps
    buffer_size, log = ranks.n_envs * n_steps, UpdateLog()

    def loss_of(indices: torch.Tensor) -> tuple[torch.Tensor, np.ndarray]:
        stats = None
        if settings.normalize_advantage and len(indices) > 1:  # sb3's per-minibatch mean and (unbiased) std
            chosen = all_advantages[indices]
            stats = (chosen.mean(), chosen.std())
        terms = loss_terms(
            policy, rollout.take(rank_rows(indices, first, count)), settings, evaluate, Share(len(indices), stats)
        )
        figures = torch.stack([getattr(terms, name).detach() for name in FIGURES]).to("cpu", torch.float64)
        figures = ranks.sum_(figures, "the update's minibatch figures").tolist()
        log.pg_losses.append(figures[0])
        log.value_losses.append(figures[1])
        log.entropy_losses.append(figures[2])
        log.clip_fractions.append(figures[3])
        log.loss = torch.tensor(figures[5])
        return terms.loss, np.float64(figures[4])  # the global approx_kl: every rank judges target_kl alike

    n_updates = run_epochs(
        ReducedGradientStep(policy, optimizer, ranks),
        settings,
        buffer_size,
        n_updates,
        log,
        lambda epoch: torch.from_numpy(np.random.permutation(buffer_size)).to(device),
        loss_of,
    )
    return update_logs(policy, log, every, settings, n_updates), n_updates


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
