"""Collecting a rollout: the policy acts, the envs step, sb3's per-step bookkeeping follows.

:class:`Collector` fills :class:`~ppo_dict.data.storage.RolloutStorage` for ``n_steps`` steps of every
env, as sb3's ``collect_rollouts`` fills its buffer (before its GAE, which ``PPO.learn`` runs next):

* **exact** (default): at each step the policy samples actions for every env at once, every env
  steps, then the bookkeeping runs: sb3's order, so every number is sb3's.
* **double-buffered** (``--double_buffer``): the envs form two halves; while the workers step one
  half, this process samples the other half's actions, so the policy's cost hides behind env
  stepping. The same algorithm on the same storage, deterministic for a seed and a layout, but not
  sb3's numbers: the policy evaluates half batches (a matrix product rounds by its batch size),
  each half draws its own noise, and the normaliser's statistics take each half as its own batch.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Optional, Protocol, Sequence

import numpy as np
import torch

from ppo_dict.algo.rollout.books import add_bootstrap, batched_bootstrap, check_finite, learner_rows, start_episodes
from ppo_dict.algo.rollout.graph_step import GraphedStep
from ppo_dict.algo.rollout.normalize import Normalizer
from ppo_dict.algo.networks.policy import ActorCritic
from ppo_dict.algo.rollout.recurrent_step import RecurrentStep
from ppo_dict.algo.rollout.rollout_step import PolicyStep, StepObsToDevice, step_outputs
from ppo_dict.algo.rollout.plan import DOUBLE_BUFFERED, Plan
from ppo_dict.algo.rollout.sharded_rollout import ShardedRollout

# TIMING_KEYS: the time/* keys, asked of this module
from ppo_dict.algo.rollout.timing import TIMING_KEYS, OwedWork, Timing  # noqa: F401
from ppo_dict.core.config import Config
from ppo_dict.data.episodes import EpisodeLog
from ppo_dict.data.masking import ASK_MASKS
from ppo_dict.data.recurrent import StateStore
from ppo_dict.data.storage import aligned, obs_to_tensor
from ppo_dict.vec import EnvPool


class RolloutHooks(Protocol):
    """What sb3's callbacks see of a rollout (``ppo_dict.api``): ``rollout_start()`` after the
    rollout's exploration noise is drawn, ``step(t)`` after every env has stepped rollout step
    ``t`` and the normaliser has seen it, before the episode statistics, the time-limit bootstrap
    and the episode starts (sb3 ``collect_rollouts``' ``callback.on_step()``); False stops the rollout."""

    def rollout_start(self) -> None: ...

    def step(self, t: int) -> bool: ...


class Collector:
    """Steps ``pool``'s envs into its storage with ``policy``; sb3's bookkeeping on the way.

    Keeps what crosses rollouts: the last step's episode ends (sb3's ``_last_episode_starts``) and
    the episode statistics behind ``rollout/*`` (``episodes``, shared with PPO). ``hooks``: sb3's
    callbacks (None: nothing is asked per step); ``stopped``: the rollout step at which they
    stopped the last rollout, else None.
    """

    def __init__(
        self,
        cfg: Config,
        pool: EnvPool,
        policy: ActorCritic,
        normalizer: Optional[Normalizer],
        device: torch.device,
        episodes: EpisodeLog,
        timing: Timing,
        plan: Plan,
        shard: Optional[ShardedRollout] = None,
    ):
        self.cfg, self.pool, self.policy, self.normalizer, self.plan = cfg, pool, policy, normalizer, plan
        self.storage, self.n_envs, self.device = pool.storage, pool.num_envs, device
        self.episodes, self.timing = episodes, timing
        # sb3's _last_episode_starts (the storage's, shared with the workers)
        self.last_dones = np.ones(self.n_envs, dtype=bool)
        self.steps_before = 0  # env steps of earlier rollouts, for messages
        s = self.storage
        if normalizer is not None:
            s.own_obs_stage(normalizer.normalized_keys)
        self.step_obs = StepObsToDevice(s, device)
        everything = range(self.n_envs)
        self.halves = pool.halves if plan.step == DOUBLE_BUFFERED else (everything,)
        # one policy step per batch size (its noise buffer is shaped by it); the whole batch's evaluates values; over ranks,
        # each samples with its rows of the global batch's draws
        step_class = RecurrentStep if plan.recurrent else PolicyStep
        # --cuda_graphs: replayed as CUDA graphs (feed-forward only)
        graphed = GraphedStep if plan.graphed else (lambda step: step)
        self.policy_steps = {
            len(columns): graphed(step_class(policy, len(columns), plan.ranks)) for columns in (*self.halves, everything)
        }
        self.states = s.lstm_states = self._lstm_states() if plan.recurrent else None
        # where a step writes its actions, values and log-probs: the storage's rows on the CPU, else pinned buffers
        self.out, self.pinned = step_outputs(s, device, self.policy_steps)
        self.env_actions = s.env_actions.reshape(self.n_envs, s.action_dim)  # a view: the envs read it
        self.masks = None if s.action_masks is None else torch.from_numpy(s.action_masks)  # the envs write it
        self.masking = True  # sb3-contrib's use_masking: the policy samples among the masks' actions (set_masking)
        # off the CPU, a feed-forward policy's cut episodes are valued in one batch
        # (ppo_dict.algo.rollout.books.batched_bootstrap); the CPU keeps sb3's order
        self.device_bootstrap = plan.device_bootstrap
        self.to_env = policy.action_spec.to_env  # what the envs get of the sampled actions
        self.hooks: Optional[RolloutHooks] = None
        self.stopped: Optional[int] = None
        # exact rollouts on worker processes: a step's owed bookkeeping is done while the next step's envs step
        self.owed = OwedWork(timing)
        self.overlap = plan.overlap
        # the policy where the envs are (ppo_dict.algo.rollout.shard), where the plan chose it: built, probed and handed
        # out by the plan
        self.shard = shard

    def _lstm_states(self) -> StateStore:
        """A recurrent policy's LSTM states: each env's, over the rollout, one set per half (sb3-contrib's
        ``_last_lstm_states``)."""
        p = self.policy
        return StateStore(
            self.storage.n_steps,
            self.halves,
            p.lstm_actor.num_layers,
            p.lstm_actor.hidden_size,
            p.critic_has_states,
            p.rnn_type,
        )

    @property
    def policy_line(self) -> str:
        """The plan's ``policy step:`` line where worker processes step envs ("" where none do)."""
        return self.plan.policy_line

    @property
    def last_dones(self) -> np.ndarray:
        """Each env's last episode end (sb3's ``_last_episode_starts``), bool ``[n_envs]``."""
        return self.storage.last_dones

    @last_dones.setter
    def last_dones(self, dones: np.ndarray) -> None:
        self.storage.last_dones[...] = dones

    def set_masking(self, on: bool) -> None:
        """sb3-contrib's ``learn(use_masking=on)`` from the next rollout on (a run with masks). Off: the envs'
        ``action_masks()`` are not asked, the policy samples from its unmasked distribution and the storage keeps
        all-True masks, which the update applies as ``MaskableRolloutBuffer``'s untouched ones."""
        if self.masks is None or on == self.masking:
            return
        self.masking = on
        self.pool.call(ASK_MASKS, range(self.n_envs), args=(on,))
        if self.shard is not None:
            self.shard.masking = on

    # ------------------------------------------------------------------ a rollout
    def reset(self, seed: Any, options: Optional[Sequence[dict[str, Any]]] = None) -> None:
        """Reset of every env (env i with ``seed + i``, or ``seed[i]`` for a list; ``options[i]``) and of
        the normaliser. The LSTM states stay: zeros before the first rollout, else the last rollout's,
        stored in the next rollout's first row (its episode starts zero them in the forward), as
        sb3-contrib's ``_last_lstm_states``, made once with the model."""
        self.last_dones = np.ones(self.n_envs, dtype=bool)
        self.pool.reset(seed, options)
        if self.normalizer is not None:
            self.normalizer.returns = np.zeros(self.n_envs)  # a resumed statistic may come from another n_envs
            self._write_obs(0, slice(None), self.normalizer.reset(self.storage.env_obs_at(0)))

    def collect(self, steps_before: int) -> int:
        """``n_steps`` steps of every env into storage, from ``obs[0]``; returns the env steps taken."""
        self.steps_before = steps_before
        self.policy.eval()
        for step in self.policy_steps.values():
            step.refresh()
        self.policy.explore(self.n_envs)  # sb3 collect_rollouts: gSDE's new exploration matrices before the first step
        self.stopped = None
        self.owed.units.clear()  # what an abandoned rollout (an error) owed
        if self.hooks is not None:
            self.hooks.rollout_start()
        if self.shard is not None:
            steps, self.stopped = self.shard.collect(self)
        else:
            steps = self._collect_exact() if len(self.halves) == 1 else self._collect_double_buffered()
        started = time.perf_counter()
        self.owed.settle()
        self.timing.bookkeeping += time.perf_counter() - started
        self.timing.steps += steps
        return steps * self.n_envs

    def _collect_exact(self) -> int:
        everything, timing, clock = self.halves[0], self.timing, time.perf_counter
        for t in range(self.storage.n_steps):
            started = clock()
            self._act(t, everything)
            acted = clock()
            if self.overlap:
                self.pool.step(t, idle=self.owed.work)  # step t-1's owed bookkeeping while the workers step
            else:
                self.pool.step(t)
            stepped = clock()
            going = self._after_env_step(t, everything)
            timing.policy, timing.envs, timing.bookkeeping = (
                timing.policy + acted - started,
                timing.envs + stepped - acted,
                timing.bookkeeping + clock() - stepped,
            )
            if not going:
                return t + 1
        return self.storage.n_steps

    def _collect_double_buffered(self) -> int:
        """Half A steps while half B's actions are sampled, then the other way round (the hooks'
        step comes after half B's bookkeeping; a stop waits for half A's step in flight)."""
        a, b = self.halves
        timing, clock, n_steps = self.timing, time.perf_counter, self.storage.n_steps
        self._act(0, a)
        self.pool.step_async(0, a)
        for t in range(n_steps):
            mark = clock()
            self._act(t, b)  # while half A steps
            acted_b = clock()
            self.pool.step_wait()
            self.pool.step_async(t, b)
            sent_b = clock()
            self._after_env_step(t, a)
            booked_a = clock()
            if t + 1 < n_steps:
                self._act(t + 1, a)  # while half B steps
            acted_a = clock()
            self.pool.step_wait()
            if t + 1 < n_steps:
                self.pool.step_async(t + 1, a)
            sent_a = clock()
            going = self._after_env_step(t, b)
            timing.policy += acted_b - mark + acted_a - booked_a
            timing.envs += sent_b - acted_b + sent_a - acted_a
            timing.bookkeeping += booked_a - sent_b + clock() - sent_a
            if not going:
                if t + 1 < n_steps:
                    self.pool.step_wait()
                return t + 1
        return n_steps

    # ------------------------------------------------------------------ one step of some envs
    def _act(self, t: int, columns: range) -> None:
        """Sample step t's actions of the envs in ``columns`` into storage: unclipped in ``actions[t]``
        (re-scored in train), clipped in ``env_actions`` (what the envs apply), as sb3 does; values
        and log-probs too."""
        s, span = self.storage, slice(columns.start, columns.stop)
        if columns.start == 0:  # once per rollout step (double-buffered: before the first half's)
            self.policy.explore(self.n_envs, t, self.cfg.sde_sample_freq)
        obs = self.step_obs(t)
        if len(columns) < self.n_envs:
            obs = {k: v[span] for k, v in obs.items()} if isinstance(obs, dict) else obs[span]
        out = None if self.out is None else tuple(rows[t, span] for rows in self.out)
        # sb3-contrib: the masks at obs[t]
        masks = None if self.masks is None or not self.masking else self.step_obs.masks(self.masks, t, span)
        rows = span if len(columns) < self.n_envs else None
        if self.states is None:
            actions, values, log_probs = self.policy_steps[len(columns)](obs, out=out, rows=rows, masks=masks)
        else:  # the states before step t, reset where an episode starts; the states after it stored as row t+1
            group = self.halves.index(columns)
            keep = RecurrentStep.keep(self.last_dones[span], self.device)
            actions, values, log_probs, states = self.policy_steps[len(columns)](
                obs, self.states.at(t, group, self.device), keep, out=out, rows=rows, masks=masks
            )
            self.states.write(t + 1, states, group)
        if out is None:  # on an accelerator: three copies into pinned memory, one wait for them
            host = self.pinned[len(columns)]
            for buffer, result in zip(host, (actions, values, log_probs)):
                buffer.copy_(result.reshape(buffer.shape), non_blocking=True)
            torch.cuda.current_stream(self.device).synchronize()
            s.actions[t, span], s.values[t, span], s.log_probs[t, span] = (buffer.numpy() for buffer in host)
        if self.device_bootstrap and not self.overlap:
            # the last step's batched bootstrap: its values came back with the wait above, no wait of its own
            self.owed.settle()
        self.to_env(s.actions[t, span], out=self.env_actions[span])  # Box: clipped to the bounds, as sb3

    def _after_env_step(self, t: int, columns: range) -> bool:
        """What sb3 does between ``env.step`` and ``rollout_buffer.add``, for the envs in ``columns``:
        normalisation (sb3's VecNormalize sits in the vec env), the hooks' step (sb3's
        ``callback.on_step()``, once every env has stepped: False ends the rollout here, as it does
        sb3's), episode statistics, the time-limit bootstrap."""
        s, span = self.storage, slice(columns.start, columns.stop)
        dones = s.terminated[t, span] | s.truncated[t, span]
        check_finite(s, t, columns, self.pool.backend.label, self.steps_before, self.n_envs)
        if self.normalizer is not None:  # VecNormalize's statistics from these envs' step (a half's, double-buffered)
            self.normalizer.observe(
                {key: s.env_obs[key][t + 1, span] for key in self.normalizer.obs_rms}, s.env_rewards[t, span], dones, rows=span
            )
        learner_rows(s, self.normalizer, t, span)
        if self.hooks is not None and columns.stop == self.n_envs:
            self.owed.settle()  # a callback sees the statistics and rewards of the steps before
            if not self.hooks.step(t):
                self.stopped = t
                return False
        ended = np.flatnonzero(dones) + columns.start
        if len(ended):  # the rows are copied now: a worker writes its env's row again at the env's next episode end
            values, kinds = s.episode_values[ended], s.episode_kinds[ended]
            self.owed.owe(lambda: self.episodes.read_rows(values, kinds, s.info_keywords))
        self._bootstrap_truncated(t, s.rewards[t, span], s.truncated[t, span] & ~s.terminated[t, span], columns)
        if not self.overlap and not self.device_bootstrap:
            self.owed.settle()
        start_episodes(s, t, span, dones)
        return True

    def _write_obs(self, t: int, span: slice, normalized: dict[str, np.ndarray]) -> None:
        for key, values in normalized.items():
            self.storage.obs[key][t, span] = values

    def _bootstrap_truncated(self, t: int, rewards: np.ndarray, truncated: np.ndarray, columns: range) -> None:
        """``r += gamma * V(terminal obs)`` where an episode was cut by a time limit, owed (:class:`OwedWork`).

        Exact rollouts: one env at a time, in env order, each terminal observation a batch of one,
        as sb3 does (batching them changes the rounding, 1.2e-7). sb3's ``rewards[idx] += gamma *
        value`` multiplies a float32 tensor by a Python float in float32 and adds in float32; the
        same two roundings are done here on numpy float32 scalars, which spares a tensor op and a
        conversion per env. Double-buffered rollouts are not sb3's numbers anyway: all of a half's
        cut episodes are valued in one batch.
        """
        step, rows, first = self.policy_steps[self.n_envs], np.flatnonzero(truncated), columns.start
        if not len(rows):
            return
        # one batch on the device, owed until the next step's synchronisation (ppo_dict.algo.rollout.books.batched_bootstrap)
        if self.device_bootstrap:
            self.owed.owe(batched_bootstrap(step, self.storage, rewards, rows, first + rows, self.device, self.cfg.gamma))
            return
        if len(self.halves) > 1 and len(rows) > 1 and self.states is None:
            # aligned: a fancy-indexed copy starts wherever numpy's allocator put it, and a misaligned
            # batch could round differently from one run to the next on an AVX-512 CPU
            batch = self.storage.as_policy_input(
                aligned({k: arr[first + rows] for k, arr in self.storage.terminal_obs.items()})
            )
            add_bootstrap(
                rewards, rows, self.cfg.gamma, step.value(obs_to_tensor(batch, self.device)).cpu().numpy().reshape(-1)
            )
            return
        # overlapped: copied now, each row laid out as a fresh allocation (a worker may overwrite its env's row
        # at the next step); settled before the next step: read in place, as before
        terminal, value = self.storage.terminal_rows(first + rows) if self.overlap else None, self._terminal_value(t, columns)
        gamma = np.float32(self.cfg.gamma)

        def bootstrap(j: int, idx: int) -> None:
            obs = (
                self.storage.terminal_input(j, terminal) if terminal is not None else self.storage.terminal_input(first + idx)
            )
            with torch.inference_mode():
                add_bootstrap(rewards, idx, gamma, value(idx, obs_to_tensor(obs, self.device)))

        for j, idx in enumerate(rows):
            self.owed.owe(lambda j=j, idx=idx: bootstrap(j, idx))

    def _terminal_value(self, t: int, columns: range) -> Callable[[int, Any], float]:
        """``value(idx, obs)``: the critic's value of env ``columns.start + idx``'s terminal observation
        after step t, a batch of one. A recurrent policy's from that env's critic states after step t
        (sb3-contrib: ``vf[:, idx:idx + 1].contiguous()``, no episode start)."""
        step = self.policy_steps[self.n_envs]
        if self.states is None:
            return lambda idx, obs: step.critic(obs).item()
        vf = self.states.at(t + 1, self.halves.index(columns), self.device).vf
        no_start = torch.zeros(1, device=self.device)

        def recurrent(idx: int, obs: Any) -> float:
            states = tuple(state[:, idx : idx + 1].contiguous() for state in vf)
            return step.recurrent_critic(obs, states, no_start, resets=False).item()

        return recurrent

    def last_values(self) -> torch.Tensor:
        """``V(obs[n_steps])`` for every env, ``[n_envs, 1]`` (sb3's values after the last step; a recurrent
        policy's from the critic states after it, reset where the last step ended an episode, as sb3-contrib)."""
        step, obs = self.policy_steps[self.n_envs], self.step_obs(self.storage.n_steps)
        if self.states is None:
            return step.value(obs)
        rows = [self.states.at(self.storage.n_steps, g, self.device).vf for g in range(len(self.halves))]
        states = rows[0] if len(rows) == 1 else tuple(torch.cat([row[i] for row in rows], dim=1) for i in range(len(rows[0])))
        with torch.inference_mode():
            starts = torch.as_tensor(self.last_dones, dtype=torch.float32, device=self.device)
            return step.recurrent_critic(obs, states, starts, resets=bool(self.last_dones.any()))
