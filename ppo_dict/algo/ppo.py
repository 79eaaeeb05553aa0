"""PPO with sb3's numbers: collect a rollout into storage, bootstrap, GAE, log, update.

One iteration reads top to bottom in :meth:`PPO.learn`, as CleanRL's loop does. The envs behind
``pool`` run in this process or in worker processes that write straight into ``pool.storage``;
this module sees only the storage arrays.
"""

from __future__ import annotations

import functools
import sys
import time
from typing import Any, Callable, Optional

import numpy as np
import torch

from ppo_dict.algo.rollout.collect import Collector, Timing
from ppo_dict.algo.training.device_update import device_ppo_update
from ppo_dict.algo.training.gradient_step import optimizer_state_problem
from ppo_dict.algo.ranks import RankEpisodes, RankNormalizer, Ranks, rank_collect, ranked_update
from ppo_dict.algo.model import Model, build_normalizer, resolve_device
from ppo_dict.algo.networks.policy import ActorCritic
from ppo_dict.algo.rollout.plan import DEVICE, RANKS, RECURRENT, plan_rollout
from ppo_dict.algo.rollout.rollout_step import RankRows
from ppo_dict.algo.networks.recurrent_policy import build_policy
from ppo_dict.algo.training.recurrent_update import recurrent_update
from ppo_dict.algo.training.update import UpdateSettings, compute_gae, ppo_update
from ppo_dict.algo.training.update_threads import cores_keep_the_bits, update_threads
from ppo_dict.core.config import Config
from ppo_dict.core.errors import CheckpointError, UpdateInterrupted
from ppo_dict.core.layout import Layout, load_gone_note
from ppo_dict.core.load import BUSY, LoadWatch, busy_at_start
from ppo_dict.core.logger import Logger
from ppo_dict.core.machine import cpu_budget
from ppo_dict.core.parse import make_schedule
from ppo_dict.core.seeding import set_random_seed, thread_count
from ppo_dict.data.episodes import EpisodeLog
from ppo_dict.envs import contains_image
from ppo_dict.vec import EnvPool
from ppo_dict.vec.vec_env_pool import VecEnvPool


class PPO:
    """Proximal Policy Optimisation with sb3's numbers.

    Construction follows sb3's order, which fixes the torch RNG stream: the envs exist first,
    then the seeds are set, then the policy and Adam are built. ``cfg.seed=None`` seeds nothing
    (as in sb3); the command line always passes a seed. A config with a bad setting is refused
    here (:meth:`Config.check`), however it was built. ``device``: the run plan's
    (``ppo_dict.run.run_plan.RunPlan.device``); by default resolved from ``cfg.device`` as the plan does.
    ``ranks``: this process is one rank of a run over several (``torchrun``; ``ppo_dict.algo.ranks``): ``pool``
    steps its envs ``ranks.envs`` of the global ``cfg.n_envs``, and the ranks train one PPO on the global batch.
    What runs (the rollout step, its books, the update) is decided once, once the model exists, by the run's plan
    (``plan``: ``ppo_dict.algo.rollout.plan``; ``layout``: the run plan's, which it records), and built from it.
    """

    def __init__(
        self,
        cfg: Config,
        pool: EnvPool,
        logger: Optional[Logger] = None,
        device: Optional[torch.device] = None,
        policy: Optional[ActorCritic] = None,
        optimizer: Optional[torch.optim.Optimizer] = None,
        ranks: Optional[Ranks] = None,
        layout: Optional[Layout] = None,
    ):
        cfg.check()
        self.cfg, self.pool, self.storage, self.ranks = cfg, pool, pool.storage, ranks
        self.n_envs = pool.num_envs
        self.device = device or resolve_device(cfg.device, contains_image(pool.observation_space))  # the run plan's
        self.logger = logger or Logger(verbose=cfg.verbose)
        self.lr_schedule = make_schedule(cfg.learning_rate)
        self.clip_schedule = make_schedule(cfg.clip_range)
        self.clip_vf_schedule = None if cfg.clip_range_vf is None else make_schedule(cfg.clip_range_vf)
        if cfg.seed is not None and policy is None:
            set_random_seed(cfg.seed, using_cuda=self.device.type == "cuda")
        # a policy and optimizer given (sb3's Python API builds its own) are trained as they are: nothing is seeded or drawn
        self.policy: ActorCritic = (
            policy if policy is not None else build_policy(cfg, pool.observation_space, pool.action_space).to(self.device)
        )
        # sb3's default optimizer_kwargs: eps=1e-5 (not torch's 1e-8).
        self.optimizer = (
            optimizer
            if optimizer is not None
            else torch.optim.Adam(self.policy.parameters(), lr=self.lr_schedule(1), eps=1e-5)
        )
        self.normalizer = build_normalizer(cfg, pool.observation_space, self.n_envs)
        self.num_timesteps = 0
        self.iteration = 0
        self.n_updates = 0
        # sb3's ep_info_buffer and ep_success_buffer
        self.episodes = EpisodeLog(self.storage.info_keywords, cfg.stats_window_size)
        if ranks is not None:  # the normaliser's statistics and the episodes over every rank's envs
            self.normalizer = None if self.normalizer is None else RankNormalizer(self.normalizer, ranks)
            self.episodes = RankEpisodes(self.episodes, ranks)
        self.env_seed: Optional[int] = cfg.seed  # env i's first reset uses env_seed + i (a resume changes it)
        # GAE's discount and lambda, set once as sb3 sets its rollout buffer's (a model's gamma assigned later is the
        # bootstrap's)
        self.gae_gamma, self.gae_lambda = cfg.gamma, cfg.gae_lambda
        self.timing = Timing()
        self.update_threads: Optional[int] = None  # chosen at the first update
        self._build_parts(layout)
        self._envs_started = False
        self.timing_logs = True  # log the time/* keys of Timing besides sb3's (sb3's API logs sb3's keys only)
        self.load = LoadWatch()  # other processes' use of the CPUs, looked at before each update
        self.last_values: Optional[torch.Tensor] = None  # V(obs[n_steps]) of the last rollout
        self._resumed_lstm_states: Optional[list[dict[str, np.ndarray]]] = None
        self.phase = ""  # "rollout" or "update" while one runs (a stop signal then drops the rollout: ppo_dict.main_ppo)
        self.stop_asked: Callable[[], bool] = lambda: False  # a stop signal came (the command line's; ppo_dict.main_ppo)
        self.env_snapshot: Optional[dict[str, Any]] = None  # the envs' saved entries a stop left (ppo_dict.run.env_states)
        self.env_local: Any = None  # over ranks, this rank's envs a stop read, for the ranks to gather (ppo_dict.run.ranks)

    def _build_parts(self, layout: Optional[Layout]) -> None:
        """What runs, decided once (the sharded step built, probed and handed out where chosen), and the parts built
        from it: the collector, the update, the update's index generator."""
        cfg, ranks = self.cfg, self.ranks
        rows = None if ranks is None else RankRows(ranks.info.name, ranks.envs.start, ranks.envs.stop, ranks.n_envs)
        self.plan, shard = plan_rollout(cfg, self.pool, self.policy, self.normalizer, self.device, rows, layout)
        self.collector = Collector(
            cfg, self.pool, self.policy, self.normalizer, self.device, self.episodes, self.timing, self.plan, shard
        )
        # sb3-contrib's sequence minibatches (whole sequences per LSTM call with --lstm_fast_path), the global batch's over
        # ranks (ppo_dict.algo.ranks), or sb3's
        self.update = {
            RECURRENT: functools.partial(recurrent_update, whole_sequences=cfg.lstm_fast_path),
            RANKS: functools.partial(ranked_update, ranks=ranks),
        }.get(self.plan.update, ppo_update)
        # off the CPU, a feed-forward policy's update draws its minibatches on the device, with no host work per minibatch
        # (ppo_dict.algo.training.device_update); the CPU keeps sb3's loop and numpy permutations
        self.index_generator = torch.Generator(self.device) if self.plan.update == DEVICE else None

    def pool_pids(self) -> list[int]:
        """The pool's worker processes (whose CPU time is the run's own, not other processes')."""
        return list(getattr(self.pool, "pids", []))

    @property
    def model(self) -> Model:
        """The model being trained (its policy and normaliser themselves, not copies)."""
        return Model(
            self.cfg, self.policy, self.normalizer, self.pool.observation_space, self.pool.action_space, self.num_timesteps
        )

    def load_optimizer(self, optimizer_state: dict[str, Any], source: str) -> None:
        """Adam's saved state into this run's optimizer; one that does not fit (torch's own check, then each
        moment's shape against its parameter's, which torch does not check) is a :class:`CheckpointError`."""
        try:
            self.optimizer.load_state_dict(optimizer_state)
        except (RuntimeError, ValueError, KeyError, TypeError, IndexError) as exc:
            raise CheckpointError(
                f"{source}: the saved optimizer state does not fit this config ({type(exc).__name__}: {exc})"
            ) from exc
        problem = optimizer_state_problem(self.optimizer)
        if problem:
            raise CheckpointError(f"{source}: the saved optimizer state does not fit this config ({problem})")

    # ------------------------------------------------------------------ the iteration
    def learn(
        self,
        total_timesteps: Optional[int] = None,
        should_stop: Callable[[], bool] = lambda: False,
        after_update: Optional[Callable[["PPO"], None]] = None,
        on_rollout: Optional[Callable[["PPO"], None]] = None,
        log_interval: Optional[int] = -1,
    ) -> "PPO":
        """Train until ``total_timesteps`` env steps (sb3 ``OnPolicyAlgorithm.learn``).

        ``on_rollout(self)`` sees each finished rollout in storage (after GAE, before the update);
        ``after_update(self)`` runs after each update (progress, evaluation, checkpoints); both
        must leave the RNG streams as they found them. ``should_stop`` is asked next; True ends
        training there (Ctrl-C). A rollout the collector's hooks stop ends training at once (sb3's
        callbacks). A resumed model continues its counters (sb3's ``reset_num_timesteps=False``).
        ``log_interval``: dump the logs every this many rollouts (-1: ``cfg.log_interval``; None: never).
        """
        total = self.cfg.total_timesteps if total_timesteps is None else total_timesteps
        log_interval = self.cfg.log_interval if log_interval == -1 else log_interval
        self.start_envs()
        self.load.look(self.pool_pids())  # from here, the first update's look covers the first rollout
        self._start_time, self._start_steps = time.time_ns(), self.num_timesteps
        self.timing = self.collector.timing = Timing()  # where this call's time goes
        while self.num_timesteps < total:
            started = time.perf_counter()
            self.phase = "rollout"
            self.collect_rollout()  # n_steps of every env; time-limit truncations bootstrapped on the way
            if self.collector.stopped is not None:  # as sb3: no GAE, no update; the next rollout starts from obs[t]
                self.phase = ""
                self.storage.carry_over(self.collector.stopped)
                break
            self.compute_advantages()  # V(last obs), then GAE in float32 as sb3
            self.phase = ""
            self.timing.rollout += time.perf_counter() - started
            self.iteration += 1
            if on_rollout is not None:
                on_rollout(self)
            # After the rollout: the first update uses 1 - n_steps*n_envs/total, never 1.0.
            progress_remaining = 1.0 - float(self.num_timesteps) / float(total)
            if log_interval is not None and self.iteration % log_interval == 0:
                self._record_rollout_logs()
                self.logger.dump(step=self.num_timesteps)
            started = time.perf_counter()
            self.train(progress_remaining)
            self.timing.update += time.perf_counter() - started
            self.timing.update_threads = self.update_threads
            self.storage.carry_over()  # the last observation starts the next rollout
            if after_update is not None:
                after_update(self)
            if should_stop():
                break
        return self

    def start_envs(self) -> None:
        """First reset of every env (env i with ``env_seed + i``) and of the normaliser; idempotent. A resumed
        recurrent run's first rollout starts from the LSTM states it saved (:meth:`load_lstm_states`)."""
        if not self._envs_started:
            self.reset_envs(self.env_seed)

    def start_envs_as_saved(self, put_back: Callable[[], None]) -> None:
        """The first reset of a run resumed with its envs' states: every env reset (a reset draws from the env's
        generator), then ``put_back()`` overwrites their states and the rows the first rollout starts from. The
        normaliser keeps its saved statistics and running returns (sb3's ``VecNormalize.reset`` would update the one
        and zero the other: a resumed run is the uninterrupted one), and the LSTM states are the saved ones."""
        self.pool.reset(self.env_seed)
        put_back()
        self._envs_started = True
        if self._resumed_lstm_states is not None:
            self.load_lstm_states(self._resumed_lstm_states)
            self._resumed_lstm_states = None

    def reset_envs(self, seed: Any, options: Optional[list[dict[str, Any]]] = None) -> None:
        """Reset every env (env i with ``seed + i``, or ``seed[i]`` for a list; ``options[i]``) and the
        normaliser's returns: the next rollout starts from there (sb3 ``_setup_learn``'s ``env.reset()``), with
        the LSTM states a resumed recurrent run saved on the first reset (else zeros)."""
        if self.ranks is not None:  # this rank's envs of the global ones: env i keeps seed + i
            envs = self.ranks.envs
            seed = seed + envs.start if isinstance(seed, int) else seed if seed is None else list(seed)[envs.start : envs.stop]
            options = None if options is None else list(options)[envs.start : envs.stop]
        self.collector.reset(seed, options)
        self._envs_started = True
        if self._resumed_lstm_states is not None:
            self.load_lstm_states(self._resumed_lstm_states)
            self._resumed_lstm_states = None

    def lstm_states(self) -> Optional[list[dict[str, np.ndarray]]]:
        """A recurrent run's LSTM states that start the next rollout (sb3-contrib's ``_last_lstm_states``), copies:
        per group of envs (all of them, or each ``--double_buffer`` half) ``{name: float32[n_layers, n_envs_of_group,
        hidden]}`` under sb3-contrib's buffer names; None for other models."""
        store = self.collector.states
        if store is None:
            return None
        if not self._envs_started and self._resumed_lstm_states is not None:  # restored, to start the first rollout
            return [{name: arr.copy() for name, arr in group.items()} for group in self._resumed_lstm_states]
        return [{name: arr[0].copy() for name, arr in arrays.items()} for arrays in store.arrays]

    def load_lstm_states(self, states: list[dict[str, np.ndarray]]) -> None:
        """Put :meth:`lstm_states`' values back as the next rollout's start (once the envs start, when they have not)."""
        store = self.collector.states
        if not self._envs_started:
            self._resumed_lstm_states = states
            return
        for arrays, saved in zip(store.arrays, states):
            for name, arr in arrays.items():
                arr[0] = saved[name]

    def collect_rollout(self) -> None:
        """``n_steps`` steps of every env into storage (sb3 ``collect_rollouts`` before its GAE).

        Starts from ``obs[0]``: the reset observations, or the last ones of the previous rollout
        (:meth:`RolloutStorage.carry_over`). Exact, or double-buffered (``ppo_dict.algo.rollout.collect``).
        """
        if self.ranks is None:
            self.num_timesteps += self.collector.collect(self.num_timesteps)
        else:  # this rank's envs, then every rank's episodes in sb3's order; the global batch's steps
            self.num_timesteps += rank_collect(self.collector, self.ranks, self.num_timesteps)

    def compute_advantages(self) -> None:
        """``V(obs[n_steps])`` and GAE over the stored rollout (sb3 ``compute_returns_and_advantage``)."""
        s = self.storage
        last_values = self.last_values = self.collector.last_values()
        s.advantages[...], s.returns[...] = compute_gae(
            s.rewards,
            s.values,
            s.episode_starts,
            last_values.clone().cpu().numpy().flatten(),
            self.collector.last_dones,
            self.gae_gamma,
            self.gae_lambda,
        )

    def train(self, progress_remaining: float) -> dict[str, float]:
        """One PPO update over the stored rollout; logs ``train/*``. Where other processes kept the CPUs busy
        through the rollout (:class:`~ppo_dict.core.load.LoadWatch`), the update keeps ``torch_threads`` (the
        first update proved the cores' threads give its bits, not that they are free) and the pool's waits sleep. A layout
        that a load at start planned on fewer CPUs stays; once that load has gone, a note says which flag gives the full
        one."""
        settings = self._update_settings(progress_remaining)
        busy = self.load.look(self.pool_pids())
        shared = busy is not None and busy >= BUSY
        if busy is not None:
            self.timing.busy_elsewhere = busy
            self.pool.adapt(shared)
        if self.load.gone() and self.cfg.verbose and self.ranks is None and not isinstance(self.pool, VecEnvPool):
            unit = self.pool.backend.unit  # the layout stays as planned; the note names the flag that gives the full one
            note = load_gone_note(self.cfg.layout(unit), self.cfg.layout(unit, cpu_budget()))
            if note:
                print(note, file=sys.stderr, flush=True)
        self.phase = "update"
        try:
            if self.stop_asked():  # a stop that came after the rollout: the update is dropped as if it had begun
                raise UpdateInterrupted("a stop signal before the update")
            if self.update_threads is None:
                self.update_threads, (logs, self.n_updates) = self._first_update(settings, shared or busy_at_start() >= BUSY)
            else:
                with thread_count(self.cfg.torch_threads if shared else self.update_threads):
                    logs, self.n_updates = self._update(settings)
        finally:
            self.phase = ""
        self.logger.record("train/learning_rate", settings.learning_rate)
        self.logger.record_many(logs)
        return logs

    def _first_update(self, settings: UpdateSettings, busy: bool) -> tuple[int, tuple[dict[str, float], int]]:
        """The first update, and the threads for every later one (``ppo_dict.algo.training.update_threads``: the cores
        where one epoch with them gives the bits of ``torch_threads``; ``busy``: other processes keep the CPUs busy)."""
        trial = functools.partial(
            cores_keep_the_bits, self.update, self.policy, self.optimizer, self.storage, settings, self.n_updates, self.device
        )
        chosen = update_threads(self.cfg, self.device, self.ranks is not None, settings, busy, trial)
        with thread_count(chosen):
            return chosen, self._update(settings)

    def _update(self, settings: UpdateSettings) -> tuple[dict[str, float], int]:
        """One update: sb3's loop, or off the CPU the device loop with this run's index generator."""
        if self.index_generator is None:
            return self.update(self.policy, self.optimizer, self.storage, settings, self.n_updates, self.device)
        return device_ppo_update(
            self.policy, self.optimizer, self.storage, settings, self.n_updates, self.device, self.index_generator
        )

    def _update_settings(self, progress_remaining: float) -> UpdateSettings:
        return UpdateSettings(
            learning_rate=self.lr_schedule(progress_remaining),
            clip_range=self.clip_schedule(progress_remaining),
            clip_range_vf=None if self.clip_vf_schedule is None else self.clip_vf_schedule(progress_remaining),
            n_epochs=self.cfg.n_epochs,
            batch_size=self.cfg.minibatch_size,
            normalize_advantage=self.cfg.normalize_advantage,
            ent_coef=self.cfg.ent_coef,
            vf_coef=self.cfg.vf_coef,
            max_grad_norm=self.cfg.max_grad_norm,
            target_kl=self.cfg.target_kl,
        )

    def _record_rollout_logs(self) -> None:
        time_elapsed = max((time.time_ns() - self._start_time) / 1e9, sys.float_info.epsilon)
        self.logger.record("time/iterations", self.iteration)
        self.logger.record_many(self.episodes.logs())  # rollout/*: sb3's ep_rew_mean, ep_len_mean, success_rate
        self.logger.record("time/fps", int((self.num_timesteps - self._start_steps) / time_elapsed))
        self.logger.record("time/time_elapsed", int(time_elapsed))
        self.logger.record("time/total_timesteps", self.num_timesteps)
        if self.timing_logs:
            self.logger.record_many(self.timing.logs(self.n_envs))

    @property
    def ep_rew_mean(self) -> float:
        return self.episodes.mean("r")

    @property
    def ep_info_buffer(self):
        """sb3's ``ep_info_buffer``: the last 100 episodes' statistics (``{"r": return, "l": length, ...}``)."""
        return self.episodes.info_buffer

    def close(self) -> None:
        self.pool.close()

    def __enter__(self) -> "PPO":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
