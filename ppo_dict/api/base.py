"""An algorithm of sb3's API on ppo_dict's trainer: construction, the envs, parameters and actions.

One model object: the algorithm holds ppo_dict's trainer (``trainer``, ``ppo_dict.algo.ppo.PPO``), whose
policy, normaliser and spaces are the :class:`~ppo_dict.algo.model.Model` that ppo_dict's files
hold (``trainer.model``: the same objects, no copies). ``predict`` is that Model's predict on the
observations the training vec env gives (after its ``VecNormalize``, as sb3's predict takes them);
``save`` writes sb3's zip of it; ``load`` reads sb3's zips and ppo_dict's model files
(``ppo_dict.api.files``); ``learn`` is sb3's loop with its callbacks (``ppo_dict.api.learning``). The model is
built as sb3's ``_setup_model`` builds it (``ppo_dict.api.building``); sb3's arguments read and assign as its
attributes do (``ppo_dict.api.settings``); a policy class of the script's own predicts itself.
"""

from __future__ import annotations

import sys
import time
from collections import deque
from typing import Any, ClassVar, Optional

import numpy as np
import torch
from gymnasium import spaces
from stable_baselines3.common.logger import Logger as SB3Logger
from stable_baselines3.common.utils import check_for_correct_spaces
from stable_baselines3.common.vec_env import VecEnv, VecNormalize, unwrap_vec_normalize

from ppo_dict.algo.model import Model
from ppo_dict.algo.networks.own_policy import policy_object
from ppo_dict.algo.networks.policy import ActorCritic
from ppo_dict.algo.ppo import PPO as Trainer
from ppo_dict.api import settings
from ppo_dict.api.arguments import sb3_device
from ppo_dict.api.checks import build_config
from ppo_dict.api.envs import TrainingEnvs, classify
from ppo_dict.api.buffer import BufferState, RolloutBufferView
from ppo_dict.api.carry import last_episode_starts, last_obs
from ppo_dict.api.building import make_pool, setup_model, start_trainer
from ppo_dict.core.parse import make_schedule, parse_packages
from ppo_dict.core.seeding import preserved_rng, set_random_seed
from ppo_dict.envs import is_image_space, leaf_spaces
from ppo_dict.interop.zip_entries import zip_params


class Algorithm:
    """The common part of :class:`~ppo_dict.api.algorithms.PPO` and ``MaskablePPO`` (``spec``: the table entry)."""

    spec: ClassVar[Any]

    def __init__(self, *args: Any, **kwargs: Any):
        arguments, extras = self.spec.bind(*args, **kwargs)
        self.verbose, self.seed = arguments["verbose"], arguments["seed"]
        self.policy_kwargs = {} if arguments["policy_kwargs"] is None else arguments["policy_kwargs"]
        self.tensorboard_log = arguments["tensorboard_log"]
        self.device = torch.device(sb3_device(arguments["device"]))
        if self.verbose >= 1:
            print(f"Using {self.device} device")
        env, packages = arguments["env"], extras.get("gym_packages", ())
        self.envs: Optional[TrainingEnvs] = (
            None
            if env is None
            else classify(
                env, extras.get("n_envs"), dict(extras.get("env_kwargs") or {}), parse_packages(packages), self.verbose
            )
        )
        self.cfg = build_config(self.spec, arguments, extras, self.envs)  # one ConfigError listing every problem
        self._arguments, self._extras = arguments, extras
        if extras.get("torch_threads") is not None:
            torch.set_num_threads(extras["torch_threads"])  # asked for; else the process's own count, as sb3 leaves it
        if self.envs is not None and self.envs.notice:
            print(self.envs.notice, flush=True)
        self.env: Optional[VecEnv] = None if self.envs is None else self.envs.vec_env
        self.observation_space: Optional[spaces.Space] = None if self.env is None else self.env.observation_space
        self.action_space: Optional[spaces.Space] = None if self.env is None else self.env.action_space
        self.n_envs = 0 if self.env is None else self.env.num_envs
        self.trainer: Optional[Trainer] = None
        self._policy: Optional[ActorCritic] = None  # a model without envs (loaded to predict) has a policy alone
        self._optimizer: Optional[torch.optim.Optimizer] = None
        self._needs_reset = True  # sb3's _last_obs is None: the next learn resets the envs
        self._logger: Optional[SB3Logger] = None
        self._custom_logger = False
        self._rollout_steps = 0  # env steps of the rollout in progress (sb3 counts them as they are taken)
        self._buffer = BufferState()  # what sb3's rollout_buffer holds besides the storage (ppo_dict.api.buffer)
        # the next rollout's start, kept between learn calls (ppo_dict.api.carry)
        self._carried: Optional[dict[str, Any]] = None
        self._last_original_obs: Any = None  # sb3's: a VecNormalize's raw observations at the last reset
        self._total_timesteps, self._num_timesteps_at_start, self.start_time = 0, 0, 0.0
        self._current_progress_remaining = 1.0
        self._episode_num = 0
        self._predictor: Optional[Model] = None
        if arguments["_init_setup_model"]:
            self._setup_model()

    # ------------------------------------------------------------------ sb3's arguments as attributes (ppo_dict.api.settings)
    def __getattr__(self, name: str) -> Any:
        arguments = self.__dict__.get("_arguments", {})
        if name in arguments and name not in ("policy", "env"):
            return settings.read(self, name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def __setattr__(self, name: str, value: Any) -> None:
        """sb3's hyperparameters, assignable between ``learn`` calls where sb3's are, with sb3's effect
        (:mod:`ppo_dict.api.settings`); ``env`` is ``set_env``'s."""
        if name in self.__dict__.get("_arguments", ()) and name != "env":
            settings.assign(self, name, value)
            return
        object.__setattr__(self, name, value)

    @property
    def lr_schedule(self) -> Any:
        """sb3's ``lr_schedule``: the learning rate of each update, from the remaining progress (made from
        ``learning_rate`` when the model is built; assign another to change the next updates', as in sb3)."""
        return make_schedule(self.cfg.learning_rate) if self.trainer is None else self.trainer.lr_schedule

    @lr_schedule.setter
    def lr_schedule(self, schedule: Any) -> None:
        if not callable(schedule):
            raise TypeError(
                f"lr_schedule={schedule!r}: a function of the remaining progress (sb3's Schedule), e.g. lambda _: 1e-4"
            )
        self._require_trainer().lr_schedule = schedule

    # ------------------------------------------------------------------ building the model (ppo_dict.api.building)
    def _setup_model(self) -> None:
        """sb3's ``_setup_model``: the envs' pool (its processes), the seeds, then the policy and its optimizer."""
        setup_model(self)

    def set_random_seed(self, seed: Optional[int] = None) -> None:
        """sb3's: python, numpy and torch seeded, the action space, and the envs' next reset (env i: ``seed + i``)."""
        if seed is None:
            return
        set_random_seed(seed, using_cuda=self.device.type == "cuda")
        if self.action_space is not None:
            self.action_space.seed(seed)
        if self.env is not None:
            self.env.seed(seed)

    # ------------------------------------------------------------------ what scripts read
    @property
    def policy(self) -> ActorCritic:
        """The networks, with sb3's parameter names, sb3's methods and ``policy.optimizer`` (a policy class of the
        script's: its object)."""
        return policy_object(self.trainer.policy) if self.trainer is not None else self._policy

    @property
    def logger(self) -> SB3Logger:
        return self._logger

    def set_logger(self, logger: SB3Logger) -> None:
        """sb3's: this logger from now on (``learn`` then configures none of its own)."""
        self._logger, self._custom_logger = logger, True

    @property
    def num_timesteps(self) -> int:
        """Env steps so far, counted as sb3 counts them (during a rollout too)."""
        return (
            self.trainer.num_timesteps if self.trainer is not None else self.__dict__.get("_saved_timesteps", 0)
        ) + self._rollout_steps

    @num_timesteps.setter
    def num_timesteps(self, value: int) -> None:
        if self.trainer is None:
            self.__dict__["_saved_timesteps"] = int(value)
        else:
            self.trainer.num_timesteps = int(value)

    @property
    def _n_updates(self) -> int:
        """sb3's epoch counter (a model loaded without env: the zip's, as sb3's load puts it back)."""
        return self.__dict__.get("_saved_updates", 0) if self.trainer is None else self.trainer.n_updates

    @property
    def _stats_window_size(self) -> int:
        """sb3's name of ``stats_window_size``: the episodes ``ep_info_buffer`` keeps."""
        return self.cfg.stats_window_size

    @property
    def ep_info_buffer(self) -> Optional[deque]:
        """sb3's last episodes (``{"r", "l", "t", ...}``); a model loaded without env: the zip's."""
        return self.__dict__.get("_saved_info_buffer") if self.trainer is None else self.trainer.episodes.info_buffer

    @property
    def ep_success_buffer(self) -> Optional[deque]:
        return self.__dict__.get("_saved_success_buffer") if self.trainer is None else self.trainer.episodes.success_buffer

    @property
    def rollout_buffer(self) -> Optional[RolloutBufferView]:
        """sb3's rollout buffer, on the rollout storage (:class:`~ppo_dict.api.buffer.RolloutBufferView`)."""
        return None if self.trainer is None else RolloutBufferView(self)

    @property
    def _last_obs(self) -> Any:
        """sb3's: the observations the next rollout starts from, as the training vec env returned them (None before
        ``learn``)."""
        return last_obs(self)

    @property
    def _last_episode_starts(self) -> Optional[np.ndarray]:
        """sb3's: the envs whose episode starts with ``_last_obs``."""
        return last_episode_starts(self)

    def dump_logs(self, iteration: int = 0) -> None:
        """sb3's ``dump_logs`` (``LogEveryNTimesteps`` calls it): the rollout and time keys, then a dump."""
        elapsed = max((time.time_ns() - self.start_time) / 1e9, sys.float_info.epsilon)
        if iteration > 0:
            self.logger.record("time/iterations", iteration, exclude="tensorboard")
        for key, value in self._require_trainer().episodes.logs().items():
            self.logger.record(key, value)
        self.logger.record("time/fps", int((self.num_timesteps - self._num_timesteps_at_start) / elapsed))
        self.logger.record("time/time_elapsed", int(elapsed), exclude="tensorboard")
        self.logger.record("time/total_timesteps", self.num_timesteps, exclude="tensorboard")
        self.logger.dump(step=self.num_timesteps)

    def get_env(self) -> Optional[VecEnv]:
        return self.env

    def get_vec_normalize_env(self) -> Optional[VecNormalize]:
        return None if self.env is None else unwrap_vec_normalize(self.env)

    # ------------------------------------------------------------------ envs
    def set_env(self, env: Any, force_reset: bool = True) -> None:
        """sb3's: train on ``env`` from now on (as many envs, the same spaces). Its envs get their own
        pool; the policy and Adam objects themselves (references a script holds keep seeing training),
        the counters and the episode statistics carry over."""
        envs = classify(env, self.n_envs or None, dict(self._extras.get("env_kwargs") or {}), (), self.verbose)
        if self.n_envs and envs.vec_env.num_envs != self.n_envs:
            raise ValueError(
                "The number of environments to be set is different from the number of environments in the model: "
                f"({envs.vec_env.num_envs} != {self.n_envs}), whereas `set_env` requires them to be the same. To "
                f"load a model with a different number of environments, you must use "
                f"`{type(self).__name__}.load(path, env)` instead"
            )
        if self.observation_space is not None:
            check_for_correct_spaces(envs.vec_env, self.observation_space, self.action_space)
        old_policy, old_optimizer, old_trainer = self.policy, self._optimizer_of(), self.trainer
        self.envs, self.env = envs, envs.vec_env
        self.cfg = build_config(self.spec, self._arguments, {**self._extras, "n_envs": None}, envs)
        self.observation_space, self.action_space, self.n_envs = (
            self.env.observation_space,
            self.env.action_space,
            self.env.num_envs,
        )
        with preserved_rng():  # the new pool builds an env here to read its spaces: sb3's set_env draws nothing
            start_trainer(self, make_pool(self), old_policy, old_optimizer)
        if old_trainer is not None:
            self.trainer.num_timesteps, self.trainer.n_updates = old_trainer.num_timesteps, old_trainer.n_updates
            self.trainer.episodes.load_state(old_trainer.episodes.state())
        else:  # a model loaded without env: the zip's counters and episodes, as sb3's load put them on the model
            self.trainer.num_timesteps = self.__dict__.pop("_saved_timesteps", 0)
            self.trainer.n_updates = self.__dict__.pop("_saved_updates", 0)
            for name, target in (
                ("_saved_info_buffer", self.trainer.episodes.info_buffer),
                ("_saved_success_buffer", self.trainer.episodes.success_buffer),
            ):
                target.extend(self.__dict__.pop(name, None) or ())
        self._policy = self._optimizer = None
        self._needs_reset = self._needs_reset or force_reset

    def _optimizer_of(self) -> torch.optim.Optimizer:
        return self.trainer.optimizer if self.trainer is not None else self._optimizer

    def _require_trainer(self) -> Trainer:
        if self.trainer is None:
            raise ValueError(f"{type(self).__name__} has no env to learn from: pass env= (or set_env(env)) first")
        return self.trainer

    # ------------------------------------------------------------------ parameters
    def get_parameters(self) -> dict[str, dict]:
        """sb3's: ``{"policy": state dict, "policy.optimizer": Adam's state dict}``."""
        return {"policy": self.policy.state_dict(), "policy.optimizer": self._optimizer_of().state_dict()}

    def set_parameters(self, load_path_or_dict: Any, exact_match: bool = True, device: Any = "auto") -> None:
        """sb3's: parameters from a zip or from :meth:`get_parameters`' dict, in place."""
        params = load_path_or_dict
        if not isinstance(params, dict):
            params = zip_params(load_path_or_dict, device)  # each entry capped, as load reads a zip
        objects = {"policy": self.policy, "policy.optimizer": self._optimizer_of()}
        for name, state in params.items():
            if name not in objects:
                raise ValueError(f"Key {name} is an invalid object name.")
            if name == "policy":
                objects[name].load_state_dict(state, strict=exact_match)
            else:
                objects[name].load_state_dict(state)
        if exact_match and set(params) != set(objects):
            raise ValueError(
                f"Names of parameters do not match agents' parameters: expected {set(objects)}, got {set(params)}"
            )

    # ------------------------------------------------------------------ actions
    def predict(
        self, observation: Any, state: Any = None, episode_start: Any = None, deterministic: bool = False
    ) -> tuple[np.ndarray, Any]:
        """sb3's ``predict``: ``(actions, state)`` for one observation or a batch, as the training vec
        env gives them (normalised by its ``VecNormalize``; images channel-first or channel-last)."""
        return self._predict(observation, state, episode_start, deterministic, None)

    def _predict(
        self, observation: Any, state: Any, episode_start: Any, deterministic: bool, action_masks: Optional[np.ndarray]
    ) -> tuple[np.ndarray, Any]:
        """:meth:`Model.predict`: a recurrent model returns its LSTM states after the step, the others ``state`` as
        given (sb3's); a policy class of the script's own predicts itself, as sb3's ``predict`` asks ``policy.predict``."""
        if not isinstance(self.policy, ActorCritic):
            masks = {} if action_masks is None else {"action_masks": action_masks}
            return self.policy.predict(observation, state, episode_start, deterministic, **masks)
        model = self._model_for_predict()
        actions, states = model.predict(
            env_layout(observation, model.observation_space), state, episode_start, deterministic, action_masks
        )
        # one Discrete action: a 0-d array, as sb3's squeeze gives it
        return np.asarray(actions), (states if model.recurrent else state)

    def _model_for_predict(self) -> Model:
        """The Model of this policy, without the normaliser (sb3's predict takes normalised observations),
        for observations laid out as the envs give them."""
        if self._predictor is None or self._predictor.policy is not self.policy:
            space = (
                self.observation_space if self.envs is None or self.envs.facade is None else self.envs.facade.observation_space
            )
            self._predictor = Model(self.cfg, self.policy, None, space, self.action_space, self.num_timesteps)
        return self._predictor

    # ------------------------------------------------------------------ lifetime
    def close(self) -> None:
        """Stop the envs' processes (the training vec env's, and the trainer's pool); idempotent."""
        if self.env is not None:
            self.env.close()  # an sb3 vec env's pool is the vec env itself
        if self.trainer is not None and self.envs is not None and self.envs.facade is not None:
            self.trainer.close()

    def __enter__(self) -> "Algorithm":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ files (ppo_dict.api.files)
    def save(self, path: Any, exclude: Any = None, include: Any = None) -> None:
        """sb3's zip of this model, which ``stable_baselines3.PPO.load`` (``sb3_contrib.MaskablePPO.load``) opens."""
        from ppo_dict.api.files import save

        save(self, path, exclude, include)

    @classmethod
    def load(
        cls,
        path: Any,
        env: Any = None,
        device: Any = "auto",
        custom_objects: Optional[dict[str, Any]] = None,
        print_system_info: bool = False,
        force_reset: bool = True,
        **kwargs: Any,
    ) -> "Algorithm":
        """sb3's ``load`` of an sb3 zip (sb3's own included), or of a ppo_dict model file or checkpoint. The zip's
        pickled values are not unpickled (rebuilt from their JSON, or refused by name) unless ``trust_pickles=True``."""
        from ppo_dict.api.files import load

        return load(cls, path, env, device, custom_objects, print_system_info, force_reset, **kwargs)


def env_layout(observation: Any, space: spaces.Space) -> Any:
    """``observation`` with each image laid out as ``space`` has it: a channel-first image for a
    channel-last space (or the other way round) as a transposed view, as sb3's ``maybe_transpose``."""
    leaves = leaf_spaces(space)
    if not any(is_image_space(sub) for sub in leaves.values()):
        return observation

    def one(obs: Any, sub: spaces.Space) -> Any:
        if not is_image_space(sub):
            return obs
        obs = np.asarray(obs)
        channel_first = int(np.argmin(sub.shape)) == 0  # sb3's is_image_space_channels_first
        transposed = (*sub.shape[1:], sub.shape[0]) if channel_first else (sub.shape[2], *sub.shape[:2])
        if obs.shape[-3:] != tuple(sub.shape) and obs.shape[-3:] == transposed:
            return np.moveaxis(obs, -1, -3) if channel_first else np.moveaxis(obs, -3, -1)
        return obs

    if isinstance(space, spaces.Dict):
        return {key: one(value, space[key]) for key, value in observation.items()}
    return one(observation, space)
