"""The policy where the envs are: each process computes the policy rows of the envs it steps, and keeps their books.

A central policy step is the serial part of every rollout step: while the main process evaluates the
policy for every env, no env steps. Here each process that steps envs (each worker, and the main
process for its own share) evaluates the policy for its own columns, right before it steps them, from
a copy of the parameters in shared memory, with the step's random numbers that the main process drew in
sb3's order (``LeanSampler.draw``) and handed out by rows. Its books follow where the env stepped: the
finite checks, the normalised rows, the learner's rewards with the time-limit bootstrap (the critic on
the terminal observation, a batch of one: sb3's own shape), the episode starts. The main process keeps
what needs the whole batch: ``VecNormalize``'s statistics, the order sb3 logs episodes in, GAE.

A matrix product can round a row differently by the batch it is in (``addmm`` by the row count and the
rows' position, on some CPUs), so a process does not evaluate its own rows alone: it evaluates a *window*,
its rows widened to multiples of a granule of the whole batch's rows (:func:`window`), which the start
probe (``ppo_dict.algo.rollout.shard_probe``) found to give the whole batch's rows bit for bit on this CPU, with
the run's shapes and storage rows. Elementwise operations give every element the same result wherever it
is; row-wise ones (softmax, logsumexp, a sum over dim 1) depend on the row alone.

This module is each process's side (:class:`ShardWork`, made by :class:`ShardProgram` in every process);
``ppo_dict.algo.rollout.sharded_rollout`` is the main process's.
"""

from __future__ import annotations

import math
import mmap
import os
import pickle
from dataclasses import dataclass
from typing import Iterable, Optional, Sequence

import numpy as np
import torch
from torch import nn

from ppo_dict.algo.rollout.books import add_bootstrap, check_finite, learner_rows, start_episodes
from ppo_dict.algo.rollout.normalize import Normalizer
from ppo_dict.algo.networks.policy import ActorCritic
from ppo_dict.algo.rollout.rollout_step import PolicyStep
from ppo_dict.data.storage import ALIGN, RolloutStorage, obs_to_tensor
from ppo_dict.vec.work import STEP, Header

#: The work's phase bits beside the pools' ``STEP``: sample step t's actions; normalise, then book, step ``t_settle``'s
#: results.
ACT, NORM, BOOKS = 2, 4, 8
#: The header's fields: ``(phases, t, t_settle, steps_before, slot, matrices slot, version)``.
PHASES, T, T_SETTLE, STEPS_BEFORE, SLOT, MSLOT, VERSION = range(7)
#: Granules a probe tries, smallest first (1: each process its own rows alone).
GRANULES = (1, 4, 8, 16, 32, 64)


def window(own: range, granule: int, n_envs: int) -> range:
    """The rows a process evaluates for its rows ``own``: widened to multiples of ``granule`` (the last ends at ``n_envs``)."""
    return range(own.start // granule * granule, min(n_envs, -(-own.stop // granule) * granule))


# ---------------------------------------------------------------------------------------------- shared memory
@dataclass(frozen=True)
class BlockLayout:
    """Named tensors in one shared block: ``(name, byte offset, shape, dtype name)`` each, every offset a
    multiple of :data:`~ppo_dict.data.storage.ALIGN` (laid out as fresh allocations are); ``nbytes`` in all."""

    entries: tuple[tuple[str, int, tuple[int, ...], str], ...]
    nbytes: int


def block_layout(named: Iterable[tuple[str, Sequence[int], torch.dtype]]) -> BlockLayout:
    entries, offset = [], 0
    for name, shape, dtype in named:
        entries.append((name, offset, tuple(shape), str(dtype).removeprefix("torch.")))
        offset += -(-math.prod(shape) * torch.empty((), dtype=dtype).element_size() // ALIGN) * ALIGN
    return BlockLayout(tuple(entries), max(offset, ALIGN))


class SharedBlock:
    """:class:`BlockLayout`'s tensors in a ``memfd`` mapping (anonymous: nothing to leak, no /dev/shm entry).
    ``fd``: a descriptor of a block made elsewhere (a worker's copy of the main process's); None: a new block,
    whose descriptor :attr:`fd` is kept for sending until :meth:`release_fd`."""

    def __init__(self, layout: BlockLayout, fd: Optional[int] = None):
        self.layout = layout
        self.fd: Optional[int] = None
        if fd is None:
            fd = self.fd = os.memfd_create("ppo_dict-policy", os.MFD_CLOEXEC)
            os.ftruncate(fd, layout.nbytes)
        self.memory = mmap.mmap(fd, layout.nbytes)
        self.tensors = {
            name: torch.frombuffer(self.memory, dtype=getattr(torch, dtype), count=math.prod(shape), offset=offset).view(shape)
            for name, offset, shape, dtype in layout.entries
        }

    def release_fd(self) -> None:
        """Close the kept descriptor (the mapping stays)."""
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def shared_tensors(module: nn.Module) -> list[tuple[str, torch.Tensor]]:
    """The module's parameters and buffers, by block name."""
    return [
        *((f"param/{n}", p) for n, p in module.named_parameters()),
        *((f"buffer/{n}", b) for n, b in module.named_buffers()),
    ]


def bind(module: nn.Module, block: SharedBlock) -> None:
    """Point the module's parameters and buffers at the block's tensors (their values are the block's from now on)."""
    with torch.no_grad():
        for name, tensor in shared_tensors(module):
            tensor.data = block.tensors[name]


# ---------------------------------------------------------------------------------------------- the program
# The normaliser's settings a script may change between learn calls (ppo_dict.api.learning), carried in the block.
NORM_SETTINGS = ("norm_reward", "clip_obs", "clip_reward", "epsilon")


@dataclass(frozen=True)
class NormSettings:
    """What the books need of the main process's normaliser (its statistics come through the block)."""

    keys: tuple[str, ...]
    shapes: tuple[tuple[int, ...], ...]
    norm_obs: bool
    norm_reward: bool
    clip_obs: float
    clip_reward: float
    epsilon: float


@dataclass(frozen=True)
class ShardProgram:
    """Every process's recipe of its :class:`ShardWork` (``ppo_dict.vec.work.WorkProgram``): the policy pickled,
    the block's layout (its descriptor is sent beside), the granule, and the settings the books need."""

    policy: bytes
    layout: BlockLayout
    n_envs: int
    granule: int
    gamma: float
    label: str
    draws: tuple[int, ...]  # how many draw tensors a step has (per slot)
    norm: Optional[NormSettings]

    def open(self, storage: RolloutStorage, columns: Sequence[int], handles: Sequence[int]) -> "ShardWork":
        block = SharedBlock(self.layout, handles[0])
        policy = pickle.loads(self.policy)
        bind(policy, block)
        return ShardWork(self, policy, block, storage, range(columns[0], columns[-1] + 1) if len(columns) else range(0))


class ShardWork:
    """One process's policy rows and books for its columns ``own`` (``ppo_dict.vec.work.StepWork``)."""

    def __init__(self, program: ShardProgram, policy: ActorCritic, block: SharedBlock, storage: RolloutStorage, own: range):
        self.program, self.policy, self.block, self.storage, self.own = program, policy, block, storage, own
        n = program.n_envs
        self.window = window(own, program.granule, n) if len(own) else own
        self.span = slice(self.window.start, self.window.stop)
        self.mine = slice(own.start - self.window.start, own.stop - self.window.start)  # own rows within the window
        self.rows = slice(own.start, own.stop)
        policy.eval()
        self.step = PolicyStep(policy, n)  # whole-batch shapes: what refresh() computes is the central step's
        self.version = -1
        tensors = block.tensors
        self.draws = [[tensors[f"draw/{slot}/{i}"] for i in range(len(program.draws))] for slot in (0, 1)]
        self.matrices = [tensors.get(f"matrices/{slot}") for slot in (0, 1)]
        s = storage
        self.views = s.obs_views()
        self.masks = None if s.action_masks is None else torch.from_numpy(s.action_masks)
        self.masking = True  # the main process's (sb3-contrib's use_masking), from the block at each new version
        self.to_env = policy.action_spec.to_env
        self.env_actions = s.env_actions.reshape(n, s.action_dim)
        self.gamma = np.float32(program.gamma)  # until the block's, at the first hand-over
        self.norm = None
        if program.norm is not None:
            settings = program.norm
            self.norm = Normalizer(
                dict(zip(settings.keys, settings.shapes)),
                n,
                settings.norm_obs,
                settings.norm_reward,
                settings.clip_obs,
                settings.clip_reward,
                epsilon=settings.epsilon,
            )
            for key, rms in self.norm.obs_rms.items():  # the main process's statistics, as it last wrote them
                rms.mean, rms.var = tensors[f"stats/{key}/mean"].numpy(), tensors[f"stats/{key}/var"].numpy()
            self.norm.ret_rms.var = tensors["stats/ret_var"].numpy()

    # ------------------------------------------------------------------ a hand-over
    def before(self, header: Header) -> None:
        phases = header[PHASES]
        if header[VERSION] != self.version:
            self.step.refresh()  # the parameters changed (an update): what depends on them alone, for the whole batch
            # sb3's float32 bootstrap, as the central path
            self.gamma = np.float32(float(self.block.tensors["settings/gamma"]))
            if self.masks is not None:
                self.masking = bool(self.block.tensors["settings/masking"])
            if self.norm is not None:  # settings assigned between learn calls, as the main process's normaliser took them
                values = self.block.tensors["settings/norm"].tolist()
                for name, value in zip(NORM_SETTINGS, values):
                    setattr(self.norm, name, bool(value) if name == "norm_reward" else value)
            self.version = header[VERSION]
        if not len(self.own):
            return
        if phases & NORM:
            # with the main process's whole-batch statistics
            learner_rows(self.storage, self.norm, header[T_SETTLE], self.rows)
        if phases & BOOKS:
            self.books(header[T_SETTLE])
        if phases & ACT:
            self.act(header[T], header[SLOT], header[MSLOT])

    def after(self, header: Header) -> None:
        if header[PHASES] & STEP and len(self.own):
            check_finite(self.storage, header[T], self.own, self.program.label, header[STEPS_BEFORE], self.program.n_envs)

    def close(self) -> None:
        """Nothing to release: the block's mapping goes with this object."""

    # ------------------------------------------------------------------ the policy's rows
    def act(self, t: int, slot: int, mslot: int) -> None:
        """Step t's actions (unclipped into ``actions[t]``, clipped into ``env_actions``), values and log-probs of
        the own rows, from the window's rows of the observations and of the step's draws."""
        s, span, mine = self.storage, self.span, self.mine
        obs = {key: view[t, span] for key, view in self.views.items()}
        obs = obs if s.is_dict_obs else next(iter(obs.values()))
        masks = None if self.masks is None or not self.masking else self.masks[t, span]
        matrices = None if self.matrices[mslot] is None else self.matrices[mslot][span]
        # the central step's own call on the window's rows, with the main process's draws of them
        actions, values, log_probs = self.step(
            obs, rows=span, masks=masks, draws=[d[span] for d in self.draws[slot]], matrices=matrices
        )
        rows = self.rows
        s.actions[t, rows] = actions[mine].reshape(len(self.own), -1).numpy()
        s.values[t, rows] = values[mine, 0].numpy()
        s.log_probs[t, rows] = log_probs[mine].numpy()
        self.to_env(s.actions[t, rows], out=self.env_actions[rows])  # Box: clipped to the bounds, as sb3

    # ------------------------------------------------------------------ the books
    def books(self, t: int) -> None:
        """The time-limit bootstrap of the own envs cut at step t (the critic on a batch of one, as the central path),
        then their episode starts."""
        s, rows = self.storage, self.rows
        terminated, truncated = s.terminated[t, rows], s.truncated[t, rows]
        for idx in np.flatnonzero(truncated & ~terminated) + self.own.start:
            with torch.inference_mode():
                value = self.step.critic(obs_to_tensor(s.terminal_input(idx), torch.device("cpu"))).item()
            add_bootstrap(s.rewards[t], idx, self.gamma, value)
        start_episodes(s, t, rows, terminated | truncated)
