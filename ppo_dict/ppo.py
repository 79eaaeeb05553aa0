"""PPO with sb3's numbers: collect a rollout into storage, bootstrap, GAE, log, update.

One iteration reads top to bottom in :meth:`PPO.learn`, as CleanRL's loop does. The envs behind
``pool`` run in this process or in worker processes that write straight into ``pool.storage``;
this module sees only the storage arrays.
"""
from __future__ import annotations

import sys
import time
from collections import deque
from typing import Callable, Optional

import numpy as np
import torch
from gymnasium import spaces

from ppo_dict.config import Config
from ppo_dict.envs import contains_image
from ppo_dict.errors import NonFiniteError
from ppo_dict.logger import Logger
from ppo_dict.normalize import Normalizer
from ppo_dict.parse import make_schedule
from ppo_dict.policy import ActorCritic, build_policy
from ppo_dict.seeding import set_random_seed
from ppo_dict.storage import StepObsToDevice, obs_layout, obs_to_tensor
from ppo_dict.update import UpdateSettings, compute_gae, ppo_update
from ppo_dict.vec import EnvPool


def resolve_device(name: str, images: bool = False, cuda_available: Optional[bool] = None) -> torch.device:
    """The torch device ``--device name`` means for a policy that takes images or not.

    ``auto`` keeps sb3's numbers where it can: MLP policies stay on the CPU (where PPO is also
    faster, and bit-exact with sb3; sb3 warns about the GPU for them), image policies (NatureCNN,
    dicts with images) go to CUDA when a GPU is present (``cuda_available``: None probes torch).
    """
    if name != "auto":
        return torch.device(name)
    if cuda_available is None:
        cuda_available = torch.cuda.is_available()
    return torch.device("cuda" if images and cuda_available else "cpu")


def build_normalizer(cfg: Config, observation_space: spaces.Space, n_envs: int) -> Optional[Normalizer]:
    """sb3 ``VecNormalize`` statistics for every vector key (uint8 images are left alone), or None."""
    if not cfg.normalize:
        return None
    vector_keys = {k: shape for k, (shape, dtype) in obs_layout(observation_space).items() if dtype != np.uint8}
    return Normalizer(vector_keys, n_envs, cfg.norm_obs, cfg.norm_reward, cfg.clip_obs, cfg.clip_reward, cfg.vecnorm_gamma, cfg.norm_epsilon)


def safe_mean(values: list) -> float:
    return np.nan if len(values) == 0 else float(np.mean(values))


class PPO:
    """Proximal Policy Optimisation with sb3's numbers.

    Construction follows sb3's order, which fixes the torch RNG stream: the envs exist first,
    then the seeds are set, then the policy and Adam are built. ``cfg.seed=None`` seeds nothing
    (as in sb3); the command line always passes a seed. A config with a bad setting is refused
    here (:meth:`Config.check`), however it was built.
    """

    def __init__(self, cfg: Config, pool: EnvPool, logger: Optional[Logger] = None):
        cfg.check()
        self.cfg, self.pool, self.storage = cfg, pool, pool.storage
        self.n_envs = pool.num_envs
        self.device = resolve_device(cfg.device, contains_image(pool.observation_space))
        self.logger = logger or Logger(verbose=cfg.verbose)
        self.lr_schedule = make_schedule(cfg.learning_rate)
        self.clip_schedule = make_schedule(cfg.clip_range)
        self.clip_vf_schedule = None if cfg.clip_range_vf is None else make_schedule(cfg.clip_range_vf)
        if cfg.seed is not None:
            set_random_seed(cfg.seed, using_cuda=self.device.type == "cuda")
        self.policy: ActorCritic = build_policy(cfg, pool.observation_space, pool.action_space).to(self.device)
        # sb3's default optimizer_kwargs: eps=1e-5 (not torch's 1e-8).
        self.optimizer = torch.optim.Adam(self.policy.parameters(), lr=self.lr_schedule(1), eps=1e-5)
        self.normalizer = build_normalizer(cfg, pool.observation_space, self.n_envs)
        if self.normalizer is not None:
            self.storage.own_obs_stage(self.normalizer.normalized_keys)
        self.num_timesteps = 0
        self.iteration = 0
        self.n_updates = 0
        self.ep_info_buffer: deque[dict[str, float]] = deque(maxlen=100)
        self.env_seed: Optional[int] = cfg.seed  # env i's first reset uses env_seed + i (a resume changes it)
        self._last_dones = np.ones(self.n_envs, dtype=bool)  # sb3's _last_episode_starts
        self._envs_started = False
        self._box_actions = isinstance(pool.action_space, spaces.Box)
        self._step_obs = StepObsToDevice(self.storage, self.device)

    # ------------------------------------------------------------------ the iteration
    def learn(
        self,
        total_timesteps: Optional[int] = None,
        should_stop: Callable[[], bool] = lambda: False,
        after_update: Optional[Callable[["PPO"], None]] = None,
        on_rollout: Optional[Callable[["PPO"], None]] = None,
    ) -> "PPO":
        """Train until ``total_timesteps`` env steps (sb3 ``OnPolicyAlgorithm.learn``).

        ``on_rollout(self)`` sees each finished rollout in storage (after GAE, before the update);
        ``after_update(self)`` runs after each update (progress, evaluation, checkpoints); both
        must leave the RNG streams as they found them. ``should_stop`` is asked next; True ends
        training there (Ctrl-C). A resumed model continues its counters (sb3's ``reset_num_timesteps=False``).
        """
        total = total_timesteps or self.cfg.total_timesteps
        self.start_envs()
        self._start_time, self._start_steps = time.time_ns(), self.num_timesteps
        while self.num_timesteps < total:
            self.collect_rollout()  # n_steps of every env; time-limit truncations bootstrapped on the way
            self.compute_advantages()  # V(last obs), then GAE in float32 as sb3
            self.iteration += 1
            if on_rollout is not None:
                on_rollout(self)
            # After the rollout: the first update uses 1 - n_steps*n_envs/total, never 1.0.
            progress_remaining = 1.0 - float(self.num_timesteps) / float(total)
            if self.iteration % self.cfg.log_interval == 0:
                self._record_rollout_logs()
                self.logger.dump(step=self.num_timesteps)
            self.train(progress_remaining)
            self.storage.carry_over()  # the last observation starts the next rollout
            if after_update is not None:
                after_update(self)
            if should_stop():
                break
        return self

    def start_envs(self) -> None:
        """First reset of every env (env i with ``env_seed + i``) and of the normaliser; idempotent."""
        if self._envs_started:
            return
        self.pool.reset(self.env_seed)
        if self.normalizer is not None:
            self.normalizer.returns = np.zeros(self.n_envs)  # a resumed statistic may come from another n_envs
            self._write_obs(0, self.normalizer.reset(self.storage.env_obs_at(0)))
        self._envs_started = True

    def _write_obs(self, t: int, normalized: dict[str, np.ndarray]) -> None:
        for key, values in normalized.items():
            self.storage.obs[key][t] = values

    @torch.no_grad()
    def collect_rollout(self) -> None:
        """``n_steps`` steps of every env into storage (sb3 ``collect_rollouts`` before its GAE).

        Starts from ``obs[0]``: the reset observations, or the last ones of the previous rollout
        (:meth:`RolloutStorage.carry_over`).
        """
        s = self.storage
        self.policy.eval()
        for t in range(s.n_steps):
            actions, values, log_probs = self.policy(self._step_obs(t))
            actions = actions.cpu().numpy()
            # The env gets clipped actions; the buffer keeps the unclipped ones (re-scored in train).
            if self._box_actions:
                np.clip(actions, self.pool.action_space.low, self.pool.action_space.high, out=s.env_actions)
            else:
                s.env_actions[...] = actions
            self.pool.step(t)
            self.num_timesteps += self.n_envs
            self._after_env_step(t)
            s.actions[t] = actions.reshape(self.n_envs, s.action_dim)
            s.values[t] = values.cpu().numpy().ravel()  # sb3 clones first; the storage write copies anyway
            s.log_probs[t] = log_probs.cpu().numpy()

    def _after_env_step(self, t: int) -> None:
        """What sb3 does between ``env.step`` and ``rollout_buffer.add``: episode statistics,
        normalisation (sb3's VecNormalize sits in the vec env), the time-limit bootstrap."""
        s = self.storage
        dones = s.dones_at(t)
        self._check_finite(t, dones)
        for i in np.flatnonzero(dones):
            self.ep_info_buffer.append({"r": float(s.episode_return[i]), "l": int(s.episode_length[i])})
        s.rewards[t] = s.env_rewards[t]
        if self.normalizer is not None:
            done_rows = np.flatnonzero(dones)
            terminal = {key: arr[done_rows] for key, arr in s.env_terminal_obs.items()}
            obs, s.rewards[t], terminal = self.normalizer.step(s.env_obs_at(t + 1), s.env_rewards[t], dones, terminal)
            self._write_obs(t + 1, obs)
            for key, values in terminal.items():
                s.terminal_obs[key][done_rows] = values
        self._bootstrap_truncated(s.rewards[t], s.truncated[t] & ~s.terminated[t])
        s.episode_starts[t] = self._last_dones
        self._last_dones = dones

    def _bootstrap_truncated(self, rewards: np.ndarray, truncated: np.ndarray) -> None:
        """``r += gamma * V(terminal obs)`` where an episode was cut by a time limit.

        One env at a time, in env order, in torch float32 arithmetic, as sb3 does: batching the
        terminal observations changes the rounding (1.2e-7).
        """
        for idx in np.flatnonzero(truncated):
            terminal_value = self.policy.predict_values(obs_to_tensor(self.storage.terminal_input(idx), self.device))[0]
            rewards[idx] += self.cfg.gamma * terminal_value

    @torch.no_grad()
    def compute_advantages(self) -> None:
        """``V(obs[n_steps])`` and GAE over the stored rollout (sb3 ``compute_returns_and_advantage``)."""
        s = self.storage
        last_values = self.policy.predict_values(self._step_obs(s.n_steps))
        s.advantages[...], s.returns[...] = compute_gae(
            s.rewards, s.values, s.episode_starts, last_values.clone().cpu().numpy().flatten(), self._last_dones,
            self.cfg.gamma, self.cfg.gae_lambda,
        )

    def _check_finite(self, t: int, dones: np.ndarray) -> None:
        """Name the env and step of a NaN/inf obs or reward before it reaches the normaliser.

        Per step this is one ``isfinite().all()`` per float array (terminal observations only when
        an episode ended); the offending env is looked for only once something is not finite.
        """
        s = self.storage
        checks = [("reward", s.env_rewards[t], None)]
        checks += [(f"observation[{key!r}]", arr[t + 1], None) for key, arr in s.env_obs.items() if arr.dtype.kind == "f"]
        if dones.any():
            checks += [(f"terminal observation[{key!r}]", arr[dones], np.flatnonzero(dones))
                       for key, arr in s.env_terminal_obs.items() if arr.dtype.kind == "f"]
        for what, arr, rows in checks:
            if np.isfinite(arr).all():
                continue
            bad = np.flatnonzero(~np.isfinite(arr.reshape(len(arr), -1)).all(axis=1))[0]
            env = int(bad if rows is None else rows[bad])
            raise NonFiniteError(
                f"non-finite {what} from env {env} ({self.pool.backend.label}) at rollout step {t} "
                f"(total steps {self.num_timesteps}); statistics were not updated with it"
            )

    def train(self, progress_remaining: float) -> dict[str, float]:
        """One PPO update over the stored rollout; logs ``train/*``."""
        settings = UpdateSettings(
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
        logs, self.n_updates = ppo_update(self.policy, self.optimizer, self.storage, settings, self.n_updates, self.device)
        self.logger.record("train/learning_rate", settings.learning_rate)
        self.logger.record_many(logs)
        return logs

    def _record_rollout_logs(self) -> None:
        time_elapsed = max((time.time_ns() - self._start_time) / 1e9, sys.float_info.epsilon)
        self.logger.record("time/iterations", self.iteration)
        if self.ep_info_buffer:
            self.logger.record("rollout/ep_rew_mean", safe_mean([e["r"] for e in self.ep_info_buffer]))
            self.logger.record("rollout/ep_len_mean", safe_mean([e["l"] for e in self.ep_info_buffer]))
        self.logger.record("time/fps", int((self.num_timesteps - self._start_steps) / time_elapsed))
        self.logger.record("time/time_elapsed", int(time_elapsed))
        self.logger.record("time/total_timesteps", self.num_timesteps)

    @property
    def ep_rew_mean(self) -> float:
        return safe_mean([e["r"] for e in self.ep_info_buffer])

    def close(self) -> None:
        self.pool.close()
