"""The main process's side of the policy where the envs are (``ppo_dict.algo.rollout.shard``): draws, hand-overs,
whole-batch books.

Per rollout step the main process draws the step's random numbers in sb3's order (gSDE's exploration
matrices at sb3's cadence, then the step's draws) into the shared block, and starts the step with one
hand-over; every process (the workers, and this one for its own envs) then settles the last step's rows
(normalised observations and rewards, the time-limit bootstrap, episode starts), samples this step's
actions for its rows, steps its envs and checks what they gave. Once all are done, this process keeps
what needs the whole batch: ``VecNormalize``'s statistics (sb3's arithmetic on the whole batch, then
handed out through the block), the episodes in sb3's order. The next step's draws are made while the
workers step (no callback can draw between them then); with sb3's callbacks, a second hand-over
normalises the step's rows before the callback sees them, and the draws wait for the callback.

``time/serial_us`` is this process's time per step when no process has work: from the last worker's
answer to the next hand-over.
"""

from __future__ import annotations

import dataclasses
import os
import time
from typing import Any, Callable, Optional, Protocol, Sequence

import cloudpickle
import numpy as np
import torch

from ppo_dict.algo.rollout.normalize import Normalizer
from ppo_dict.algo.networks.policy import ActorCritic
from ppo_dict.algo.rollout.rollout_step import PolicyStep
from ppo_dict.algo.rollout.shard import (
    ACT,
    BOOKS,
    NORM,
    NORM_SETTINGS,
    NormSettings,
    ShardProgram,
    SharedBlock,
    block_layout,
    shared_tensors,
)
from ppo_dict.algo.rollout.shard_probe import probe
from ppo_dict.algo.rollout.timing import Timing
from ppo_dict.core.config import Config
from ppo_dict.data.storage import RolloutStorage
from ppo_dict.vec.work import STEP


class Rollout(Protocol):
    """What a rollout loop reads of its collector (``ppo_dict.algo.rollout.collect.Collector``): the settings, the pool,
    the timing, sb3's callbacks' hooks (None: none), the env steps of earlier rollouts, the episodes."""

    cfg: Config
    pool: Any
    timing: Timing
    hooks: Any
    steps_before: int
    episodes: Any


def sharding_problem(
    cfg: Config, storage: RolloutStorage, policy: ActorCritic, normalizer: Optional[Normalizer], device: torch.device
) -> str:
    """Why this run's policy step stays in the main process ("": it may go where the envs are, probe permitting)."""
    if not cfg.shard_policy:
        return "as asked (--shard_policy False)"
    if device.type != "cpu":
        return f"the policy runs on {device}"
    if cfg.double_buffer:
        return "--double_buffer samples one half's actions here while the workers step the other"
    if getattr(policy, "own_forward", False):
        return f"a policy class of the script's own ({type(policy.module).__name__}) runs its own forward here"
    # the API's sb3 class (ppo_dict.api.sb3_policy): the same passes
    if getattr(type(policy), "surface_of", type(policy)) is not ActorCritic:
        return (
            f"{type(policy).__name__} keeps its LSTM states here"
            if hasattr(policy, "lstm_actor")
            else f"{type(policy).__name__} runs here"
        )
    if PolicyStep(policy, 1).sampler is None:
        return f"{policy.action_space} samples through the policy's forward"
    if normalizer is not None and not set(normalizer.normalized_keys) <= set(storage.stage_keys):
        return "its normalised observations are not in shared memory"
    if not hasattr(os, "memfd_create"):
        return "this platform has no memfd for the shared parameters"
    return ""


def processes_of(main_envs: int, blocks: Sequence[Sequence[int]]) -> list[tuple[range, bool]]:
    """Each process's columns and whether it is a worker: this process's share (``main_envs``) first, then the workers'
    ``blocks``."""
    processes = [(range(main_envs), False)] if main_envs else []
    return processes + [(range(block[0], block[-1] + 1), True) for block in blocks]


class ShardedRollout:
    """The main process's half of the sharded step on ``storage`` (a worker pool's, or one laid out as it) for ``policy``;
    ``central``: the whole batch's step, whose sampler makes the step's draws; ``payload``: ``policy`` pickled (pickled
    here when not given)."""

    def __init__(
        self,
        cfg: Config,
        storage: RolloutStorage,
        label: str,
        policy: ActorCritic,
        normalizer: Optional[Normalizer],
        central: PolicyStep,
        payload: Optional[bytes] = None,
    ):
        self.storage, self.policy, self.normalizer, self.central = storage, policy, normalizer, central
        n = self.n_envs = storage.n_envs
        self.draw_shapes = central.sampler.draw_shapes(n)
        gsde = policy.action_spec.gsde
        named = [(name, tensor.shape, tensor.dtype) for name, tensor in shared_tensors(policy)] + [
            ("settings/gamma", (), torch.float64)
        ]
        named += [("settings/masking", (), torch.float64)] if storage.action_masks is not None else []
        named += [(f"draw/{slot}/{i}", shape, torch.float32) for slot in (0, 1) for i, shape in enumerate(self.draw_shapes)]
        if gsde is not None:
            named += [(f"matrices/{slot}", (n, gsde.latent_dim, gsde.action_dim), torch.float32) for slot in (0, 1)]
        norm = None
        if normalizer is not None:
            keys = tuple(normalizer.obs_rms)
            shapes = tuple(tuple(normalizer.obs_rms[k].mean.shape) for k in keys)
            named += [
                (f"stats/{k}/{part}", shape, torch.float64) for k, shape in zip(keys, shapes) for part in ("mean", "var")
            ]
            named += [("stats/ret_var", (), torch.float64), ("settings/norm", (len(NORM_SETTINGS),), torch.float64)]
            norm = NormSettings(
                keys,
                shapes,
                normalizer.norm_obs,
                normalizer.norm_reward,
                normalizer.clip_obs,
                normalizer.clip_reward,
                normalizer.epsilon,
            )
        self.block = SharedBlock(block_layout(named))
        payload = cloudpickle.dumps(policy) if payload is None else payload  # the policy pickled for the other processes
        self.program = ShardProgram(
            payload, self.block.layout, n, 1, cfg.gamma, label, tuple(range(len(self.draw_shapes))), norm
        )
        self.version, self.mslot, self._matrices = 0, 0, None
        self.masking = True  # the collector's (sb3-contrib's use_masking)
        self.refresh(cfg.gamma)

    # ------------------------------------------------------------------ what this process writes
    def refresh(self, gamma: float) -> None:
        """The policy's parameters, the bootstrap's gamma, whether masks apply and the normaliser's settings into the
        block (once per rollout: after an update, after a setting assigned between ``learn`` calls), a new version."""
        with torch.no_grad():
            for name, tensor in shared_tensors(self.policy):
                self.block.tensors[name].copy_(tensor)
        self.block.tensors["settings/gamma"].fill_(gamma)
        if "settings/masking" in self.block.tensors:
            self.block.tensors["settings/masking"].fill_(float(self.masking))
        if self.normalizer is not None:  # what a script may assign to sb3's VecNormalize between learn calls
            self.block.tensors["settings/norm"].copy_(
                torch.tensor([float(getattr(self.normalizer, name)) for name in NORM_SETTINGS])
            )
        self.version += 1

    def sync_matrices(self, slot: Optional[int] = None) -> None:
        """gSDE's exploration matrices into the block where the policy drew new ones (into the slot not being read)."""
        gsde = self.policy.action_spec.gsde
        if gsde is None or (slot is None and gsde.exploration_matrices is self._matrices):
            return
        self.mslot = 1 - self.mslot if slot is None else slot
        self.block.tensors[f"matrices/{self.mslot}"].copy_(gsde.exploration_matrices)
        self._matrices = gsde.exploration_matrices

    def draw(self, t: int, sde_sample_freq: int) -> None:
        """Step t's randomness in sb3's order: the exploration matrices where due, then the step's draws (slot t % 2)."""
        self.policy.explore(self.n_envs, t, sde_sample_freq)
        self.sync_matrices()
        self.central.sampler.draw([self.block.tensors[f"draw/{t % 2}/{i}"] for i in range(len(self.draw_shapes))])

    def publish_stats(self) -> None:
        """The normaliser's statistics, as its last whole-batch update left them, for the processes' books."""
        norm, tensors = self.normalizer, self.block.tensors
        for key, rms in norm.obs_rms.items():
            tensors[f"stats/{key}/mean"].numpy()[...] = rms.mean
            tensors[f"stats/{key}/var"].numpy()[...] = rms.var
        tensors["stats/ret_var"].numpy()[...] = norm.ret_rms.var

    def header(self, phases: int, t: int, steps_before: int) -> tuple[int, ...]:
        return (phases, t, t - 1, steps_before, t % 2, self.mslot, self.version)

    # ------------------------------------------------------------------ a rollout
    def collect(self, c: Rollout) -> tuple[int, Optional[int]]:
        """``n_steps`` steps of every env (the collector's hooks, episodes and timing); returns the steps taken and the
        step at which the hooks stopped the rollout (None: they did not)."""
        s, pool, timing, clock, hooks = self.storage, c.pool, c.timing, time.perf_counter, c.hooks
        started = clock()
        every = c.cfg.sde_sample_freq  # the caller's settings, as assigned between learn calls (and the bootstrap's gamma)
        self.refresh(c.cfg.gamma)
        self.sync_matrices()  # the rollout's first matrices (the collector drew them)
        self.draw(0, every)
        if self.normalizer is not None:
            self.publish_stats()
        owed: list[Callable[[], None]] = []  # the last step's episodes, then the next step's draws: while the workers step

        def idle() -> bool:
            if owed:
                owed.pop(0)()
            return bool(owed)

        for t in range(s.n_steps):
            settle = (BOOKS if hooks is not None else NORM | BOOKS) if t else 0
            if hooks is None and t + 1 < s.n_steps:
                owed.append(lambda t=t: self.draw(t + 1, every))
            timing.serial += clock() - started
            mark = clock()
            pool.work(self.header(settle | ACT | STEP, t, c.steps_before), idle=idle if pool.waits else None)
            started = clock()
            timing.envs += started - mark
            while owed:
                idle()
            dones = s.terminated[t] | s.truncated[t]
            if self.normalizer is not None:
                self.normalizer.observe(
                    {key: s.env_obs[key][t + 1] for key in self.normalizer.obs_rms}, s.env_rewards[t], dones
                )
                self.publish_stats()
            if hooks is not None:
                timing.serial += clock() - started
                pool.work(self.header(NORM, t + 1, c.steps_before))
                started = clock()
                if not hooks.step(t):
                    return t + 1, t
                if t + 1 < s.n_steps:
                    self.draw(t + 1, every)
            ended = np.flatnonzero(dones)
            if len(ended):  # copied now: a process writes its env's row again at the env's next episode end
                values, kinds = s.episode_values[ended], s.episode_kinds[ended]
                owed.insert(0, lambda values=values, kinds=kinds: c.episodes.read_rows(values, kinds, s.info_keywords))
        timing.serial += clock() - started
        pool.work(self.header(BOOKS if hooks is not None else NORM | BOOKS, s.n_steps, c.steps_before))
        while owed:
            idle()
        return s.n_steps, None

    def probe(self, step_obs: Callable[[int], Any], processes: list[tuple[range, bool]]) -> tuple[Optional[int], str]:
        """:func:`~ppo_dict.algo.rollout.shard_probe.probe` of these processes' columns on this storage; the granule
        found is the program's."""
        granule, why = probe(
            self.program, self.block, self.policy, self.central, step_obs, self.storage, processes, self.sync_matrices
        )
        if granule is not None:
            self.program = dataclasses.replace(self.program, granule=granule)
        return granule, why
