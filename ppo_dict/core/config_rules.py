"""What a config's settings imply: the values derived from them, and the checks of the settings alone.

:class:`ConfigRules` is the half of :class:`ppo_dict.core.config.Config` that is not its fields (Config inherits it): the
settings are declared there, one field each, and what follows from them is here, with the constants it needs. The
checks that need other modules (the env, the model, rl-zoo files) live in ``ppo_dict.run.checks``.
"""

from __future__ import annotations

import dataclasses
import re
from functools import cached_property
from typing import Any, Optional

from ppo_dict.core.errors import ConfigError
from ppo_dict.core.fields import field_problem
from ppo_dict.core.layout import Layout, layout_problems, plan_layout
from ppo_dict.core.ranks import RankInfo, env_range

#: the recurrent models (sb3-contrib's RecurrentPPO: MlpLstmPolicy, CnnLstmPolicy; MultiInputLstmPolicy for Dict
#: observations)
RECURRENT_MODELS = ("mlp_lstm", "cnn_lstm")
RESUME_AUTO = "auto"  # --resume auto: resume from --run_dir if it holds a checkpoint, else start fresh
MONITOR_KEYS = ("r", "l", "t")  # what sb3's Monitor writes into an episode's info itself: no info keyword may be one


class ConfigRules:
    """The derived values and the checks of :class:`ppo_dict.core.config.Config`, which inherits them (its fields are
    the attributes read here)."""

    # ------------------------------------------------------------------ derived values
    @property
    def recurrent(self) -> bool:
        """An LSTM policy (``--model mlp_lstm | cnn_lstm``): sb3-contrib's RecurrentPPO."""
        return self.model in RECURRENT_MODELS

    @property
    def lstm_settings(self) -> dict[str, Any]:
        """sb3-contrib's LSTM keyword arguments, each unset one at its default."""
        return dict(
            lstm_hidden_size=self.lstm_hidden_size or 256,
            n_lstm_layers=self.n_lstm_layers or 1,
            shared_lstm=bool(self.shared_lstm),
            enable_critic_lstm=self.enable_critic_lstm is not False,
            lstm_kwargs=dict(self.lstm_kwargs),
        )

    def layout(self, unit: int = 1, cpus: Optional[tuple[int, str]] = None, rank: Optional[RankInfo] = None) -> Layout:
        """Which process steps which env column (:func:`ppo_dict.core.layout.plan_layout`: every usable CPU by default, any
        ``n_envs`` split over them), for envs in whole ``unit``s (a Godot game's agents); ``cpus``: planned on these
        instead; ``rank``: one rank's share of the envs over ``torchrun`` (:func:`~ppo_dict.core.ranks.env_range`), the
        layout settings counting per rank, on the CPUs its affinity gives it."""
        if unit == 1 and cpus is None and rank is None:
            return self._layout
        n_envs = self.n_envs if rank is None else len(env_range(self.num_envs, rank.rank, rank.world))
        return plan_layout(
            n_envs,
            self.num_workers,
            self.envs_per_worker,
            self.main_envs,
            self.main_steps_envs,
            self.double_buffer,
            unit,
            cpus,
        )

    @cached_property
    def _layout(self) -> Layout:
        return plan_layout(
            self.n_envs, self.num_workers, self.envs_per_worker, self.main_envs, self.main_steps_envs, self.double_buffer
        )

    @property
    def num_envs(self) -> int:
        return self.layout().n_envs

    @property
    def rollout_size(self) -> int:
        """Transitions per rollout: ``n_steps * n_envs``."""
        return self.n_steps * self.num_envs

    @property
    def minibatch_size(self) -> int:
        if self.num_batches is not None:
            return max(1, self.rollout_size // self.num_batches)
        return self.batch_size

    @property
    def vecnorm_gamma(self) -> float:
        return self.gamma if self.norm_gamma is None else self.norm_gamma

    # ------------------------------------------------------------------ checks of the values alone
    def problems(self) -> list[str]:
        """Every setting that is out of range or disagrees with another, one line each (empty: fine).

        Worked out once per config (it is frozen): the run plan, the pool and ``PPO`` all check the
        run's config (the command line's, once its seed and run directory are settled) on the way to
        training, and only the first pays."""
        return list(self._problems)

    @cached_property
    def _problems(self) -> tuple[str, ...]:
        return tuple(self._find_problems())

    def _find_problems(self) -> list[str]:
        problems = [p for f in dataclasses.fields(self) for p in [field_problem(f, getattr(self, f.name))] if p]
        bad = {p.split("=", 1)[0] for p in problems}
        if not bad & {"n_envs", "num_workers", "envs_per_worker", "main_envs"}:
            layout = layout_problems(
                self.n_envs, self.num_workers, self.envs_per_worker, self.main_envs, self.main_steps_envs, self.double_buffer
            )
            problems += layout
            if not layout and not bad & {"n_steps", "batch_size"}:
                problems += self._minibatch_problems()
        if not re.fullmatch(r"auto|cpu|cuda(:[0-9]+)?", self.device):
            problems.append(f"device={self.device!r}: must be auto, cpu, cuda or cuda:N")
        problems += self._cuda_graph_problems()
        if self.resume == RESUME_AUTO and self.run_dir is None:
            problems.append("resume='auto': needs --run_dir (the directory a requeued job resumes from, or starts in)")
        if self.double_buffer and not bad & {"n_envs", "num_workers", "envs_per_worker"}:
            n, w = self.num_envs, self.layout().processes
            if w == 0 or n < 2:
                problems.append(
                    f"double_buffer=True: needs worker processes (num_workers >= 1) and n_envs >= 2, to step one "
                    f"half of the envs while the policy samples the other's actions (got num_workers={w}, "
                    f"n_envs={n})"
                )
        problems += self._recurrent_problems()
        if self.squash_output and not self.use_sde:
            problems.append(
                "squash_output=True: only with --use_sde (sb3: squash_output=True is only available when using gSDE)"
            )
        if self.action_masks and self.use_sde:
            problems.append(
                "action_masks=True: MaskablePPO has no gSDE (masks need Discrete, MultiDiscrete or MultiBinary "
                "actions); drop --use_sde"
            )
        if self.atari_wrapper and self.pixel_obs_wrapper:
            problems.append("atari_wrapper=True: Atari games observe their own screen; drop --pixel_obs_wrapper")
        if self.video and self.eval_freq == 0:
            problems.append("video=True: needs --eval_freq > 0 (videos are recorded during evaluations)")
        clashes = [key for key in self.info_keywords if key in MONITOR_KEYS]
        if clashes:
            problems.append(
                f"info_keywords={','.join(clashes)}: sb3's Monitor writes {', '.join(MONITOR_KEYS)} itself; choose other keys"
            )
        repeated = sorted({key for key in self.info_keywords if self.info_keywords.count(key) > 1})
        if repeated:
            problems.append(f"info_keywords={','.join(repeated)}: given more than once")
        return problems

    def _cuda_graph_problems(self) -> list[str]:
        """``--cuda_graphs``: a device that can be CUDA, a policy step it captures (ppo_dict.algo.rollout.graph_step)."""
        if not self.cuda_graphs:
            return []
        problems = []
        if self.device == "cpu":
            problems.append("cuda_graphs=True: CUDA graphs need a CUDA device, not device='cpu' (use --device cuda or auto)")
        if self.recurrent:
            problems.append(
                f"cuda_graphs=True: recurrent policies are not captured (model={self.model!r}); drop --cuda_graphs"
            )
        if self.use_sde:
            problems.append(
                "cuda_graphs=True: gSDE draws new exploration matrices outside the step, which a captured graph "
                "would not see; drop --use_sde"
            )
        return problems

    def _recurrent_problems(self) -> list[str]:
        """The LSTM flags: set only with a recurrent model, in a combination sb3-contrib takes."""
        lstm_flags = {
            "lstm_hidden_size": self.lstm_hidden_size,
            "n_lstm_layers": self.n_lstm_layers,
            "shared_lstm": self.shared_lstm,
            "enable_critic_lstm": self.enable_critic_lstm,
            "lstm_kwargs": self.lstm_kwargs or None,
            "rnn_type": self.rnn_type,
        }
        if not self.recurrent:
            return [
                f"{name}={value!r}: needs a recurrent model (--model mlp_lstm or cnn_lstm), not model={self.model!r}"
                for name, value in {**lstm_flags, "lstm_fast_path": self.lstm_fast_path or None}.items()
                if value is not None
            ]
        problems = []
        settings = self.lstm_settings
        if settings["shared_lstm"] and settings["enable_critic_lstm"]:
            problems.append(
                "shared_lstm=True: the critic either shares the actor's LSTM or has its own (enable_critic_lstm, "
                "True by default): add --enable_critic_lstm False (sb3-contrib refuses both)"
            )
        if settings["shared_lstm"] and not self.share_features_extractor:
            problems.append(
                "shared_lstm=True: needs share_features_extractor=True (sb3-contrib: the LSTM cannot be shared "
                "when the features extractor is not)"
            )
        return problems

    def _minibatch_problems(self) -> list[str]:
        if self.num_batches is not None and not 1 <= self.num_batches <= max(1, self.rollout_size):
            return [f"num_batches={self.num_batches!r}: must be in [1, {max(1, self.rollout_size)}]"]
        problems = []
        # sb3 PPO.__init__ asserts these two; they are reported with the rest.
        if self.normalize_advantage and self.minibatch_size <= 1:
            problems.append(f"batch_size={self.minibatch_size}: must be > 1 when normalize_advantage is True (sb3 issue #440)")
        if self.normalize_advantage and self.rollout_size <= 1:
            problems.append(f"n_steps*n_envs={self.rollout_size}: must be > 1 when normalize_advantage is True")
        unguarded = "MaskablePPO" if self.action_masks else "RecurrentPPO" if self.recurrent else None
        if unguarded and self.normalize_advantage and self.rollout_size % self.minibatch_size == 1 and self.rollout_size > 1:
            problems.append(
                f"batch_size={self.minibatch_size}: with "
                f"{'action_masks' if self.action_masks else 'a recurrent model'} and normalize_advantage, the "
                f"last minibatch of each epoch holds one sample (n_steps*n_envs={self.rollout_size}), whose "
                f"advantage std is NaN in {unguarded} (it has no single-sample guard): choose a batch_size that "
                f"leaves no single sample"
            )
        return problems

    def check(self) -> None:
        """Raise one :class:`ConfigError` listing :meth:`problems`, if there are any."""
        problems = self.problems()
        if problems:
            raise ConfigError(problems)
