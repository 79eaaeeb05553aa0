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
"""

from __future__ import annotations

import contextlib
import math
from typing import Any, Iterator, Sequence

import numpy as np
import torch
import torch.distributed as dist
from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors

from ppo_dict.algo.training.gradient_step import GradientStep
from ppo_dict.algo.networks.policy import ActorCritic
from ppo_dict.algo.training.update import Share, UpdateLog, UpdateSettings, loss_terms, prepare_update, run_epochs, update_logs
from ppo_dict.core.errors import RankLostError
from ppo_dict.core.ranks import RankInfo, env_ranges
from ppo_dict.data.storage import RolloutStorage


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
