"""``save`` and ``load`` of sb3's API: sb3's zips (written as sb3 writes them) and ppo_dict's files.

* ``save(path)``: the zip an sb3 model of the same settings would write, with this model's
  parameters, Adam state and counters: ``stable_baselines3.PPO.load`` (sb3-contrib's
  ``MaskablePPO.load``) opens it with equal parameters.
* ``load(path, env)``: an sb3 zip (sb3's own included) is read without unpickling its ``data`` entry
  (``ppo_dict.interop.sb3_zip``; ``trust_pickles=True`` unpickles it as sb3 does, after one warning
  line), then loaded as sb3's ``load`` does it: the
  saved settings (``kwargs`` override them), ``_setup_model`` with the saved seed (which seeds the
  RNGs and the envs' next reset, as sb3's does), then the parameters, Adam's state, the counters,
  and a new gSDE exploration matrix; so ``learn`` continues as after sb3's ``load``, bit for bit.
  A ppo_dict model file or checkpoint (``Model.save``, ``--save_path``, ``checkpoints/``) is loaded
  from its config; a checkpoint restores the training state too (RNG streams, counters, episode
  statistics, the envs' reset seed), so ``learn(n, reset_num_timesteps=False)`` continues as
  ``--resume`` with ``--total_timesteps`` n more does.
"""

from __future__ import annotations

import copy
import os
import zipfile
from collections import deque
from typing import Any, Optional

from gymnasium import spaces
from stable_baselines3.common.utils import FloatSchedule, check_for_correct_spaces, get_system_info
from stable_baselines3.common.vec_env.patch_gym import _convert_space

from ppo_dict.api.arguments import EXTRAS, SAME_NAME, own_policy_class
from ppo_dict.api.carry import rnn_states
from ppo_dict.core.config import Config
from ppo_dict.core.errors import CheckpointError
from ppo_dict.algo.model import gym_env_spec, saved_env
from ppo_dict.core.file_effects import announce
from ppo_dict.core.files import load_model_state, space_mismatch, to_numpy
from ppo_dict.envs import contains_image
from ppo_dict.core.seeding import preserved_rng
from ppo_dict.interop.sb3 import sb3_kwargs
from ppo_dict.interop.schedules import custom_objects_line, is_schedule_text, zip_schedule
from ppo_dict.interop.sb3_zip import Unrebuilt, class_name, read_zip, refuse_unrebuilt, trust_warning
from ppo_dict.run.checkpoint import restore, write_model_file


#: an algorithm of sb3's API (``ppo_dict.api.base.Algorithm``, which imports this module)
Algorithm = Any
#: sb3 arguments that are not hyperparameters a zip holds
NOT_SAVED = ("policy", "env", "device", "_init_setup_model")
#: sb3's arguments that are schedules (a function of the script's, in a zip, is a pickle)
SCHEDULE_KEYS = ("learning_rate", "clip_range", "clip_range_vf")


def sb3_model(algorithm: Algorithm) -> Any:
    """An sb3 model object (no env) of ``algorithm``'s settings, parameters, Adam state and counters."""
    arguments = {k: v for k, v in algorithm._arguments.items() if k not in NOT_SAVED}
    # ppo_dict's (an LSTM's here; a GRU saves ppo_dict's file): sb3-contrib's policies take none
    if "rnn_type" in (arguments.get("policy_kwargs") or {}):
        arguments["policy_kwargs"] = {k: v for k, v in arguments["policy_kwargs"].items() if k != "rnn_type"}
    with preserved_rng():  # building sb3's policy draws from the RNGs: this model's streams stay as they are
        model = algorithm.spec.sb3()(algorithm._arguments["policy"], None, device="cpu", _init_setup_model=False, **arguments)
        model.observation_space = copy.deepcopy(algorithm.observation_space)
        model.action_space = copy.deepcopy(algorithm.action_space)
        model.n_envs = algorithm.n_envs or 1
        model._setup_lr_schedule()  # sb3's _setup_model without its seeding and its rollout buffer
        # sb3-contrib's MaskablePPO passes its policies no use_sde (a class of the script's neither)
        takes_sde = not algorithm.cfg.action_masks
        model.policy = model.policy_class(
            model.observation_space,
            model.action_space,
            model.lr_schedule,
            **({"use_sde": model.use_sde} if takes_sde else {}),
            **model.policy_kwargs,
        )
        model.clip_range = FloatSchedule(model.clip_range)
        if model.clip_range_vf is not None:
            model.clip_range_vf = FloatSchedule(model.clip_range_vf)
    model.policy.load_state_dict({k: v.detach().cpu() for k, v in algorithm.policy.state_dict().items()})
    model.policy.optimizer.load_state_dict(algorithm._optimizer_of().state_dict())
    model.num_timesteps, model._n_updates = algorithm.num_timesteps, algorithm._n_updates
    model._total_timesteps, model._current_progress_remaining = (
        algorithm._total_timesteps,
        algorithm._current_progress_remaining,
    )
    model._episode_num, model.start_time = algorithm._episode_num, algorithm.start_time
    model.rollout_buffer_class = sb3_buffer_class(algorithm)
    # sb3's, from the last learn
    model._last_obs, model._last_episode_starts = algorithm._last_obs, algorithm._last_episode_starts
    model._last_original_obs = algorithm._last_original_obs
    if algorithm.trainer is not None and algorithm.trainer.collector.states is not None and algorithm._carried is not None:
        model._last_lstm_states = rnn_states(algorithm.trainer, 0)
    if algorithm.ep_info_buffer is not None:
        model.ep_info_buffer = deque(algorithm.ep_info_buffer, maxlen=algorithm.cfg.stats_window_size)
        model.ep_success_buffer = deque(algorithm.ep_success_buffer, maxlen=algorithm.cfg.stats_window_size)
    return model


def sb3_buffer_class(algorithm: Algorithm) -> Optional[type]:
    """The ``rollout_buffer_class`` sb3's ``_setup_model`` sets (and its zip saves): sb3's (Dict)RolloutBuffer,
    sb3-contrib MaskablePPO's Maskable(Dict)RolloutBuffer; None for RecurrentPPO, which picks its buffer without keeping it."""
    if algorithm.spec.recurrent:
        return None
    dict_obs = isinstance(algorithm.observation_space, spaces.Dict)
    if algorithm.cfg.action_masks:
        from sb3_contrib.common.maskable.buffers import MaskableDictRolloutBuffer, MaskableRolloutBuffer

        return MaskableDictRolloutBuffer if dict_obs else MaskableRolloutBuffer
    from stable_baselines3.common.buffers import DictRolloutBuffer, RolloutBuffer

    return DictRolloutBuffer if dict_obs else RolloutBuffer


def save(algorithm: Algorithm, path: Any, exclude: Any = None, include: Any = None) -> None:
    """sb3's ``save`` of :func:`sb3_model` (``.zip`` added to a path without it, as sb3 adds it)."""
    sb3_model(algorithm).save(path, exclude, include)


def save_checkpoint(algorithm: Algorithm, path: Any, exclude: Any = None, include: Any = None) -> None:
    """ppo_dict's checkpoint of ``algorithm`` at ``path`` (``.zip`` added to a path without it, as sb3's ``save``), for a
    model no sb3 class can read (a masked recurrent one): :func:`load` reads it back; without a trainer, its model file."""
    if exclude is not None or include is not None:
        raise ValueError(
            f"exclude/include: {algorithm.spec.name}.save writes ppo_dict's checkpoint, which has no sb3 zip entries to pick"
        )
    path = os.fspath(path)
    path = path if os.path.splitext(path)[1] else f"{path}.zip"
    if algorithm.trainer is not None:
        write_model_file(algorithm.trainer, path)
        return
    from ppo_dict.algo.model import Model

    Model(
        algorithm.cfg, algorithm.policy, None, algorithm.observation_space, algorithm.action_space, algorithm.num_timesteps
    ).save(path)


def zip_path(path: Any) -> Any:
    """The file sb3's ``load`` opens: ``path``, else ``path.zip``."""
    if isinstance(path, (str, os.PathLike)) and not os.path.exists(path) and os.path.exists(f"{path}.zip"):
        return f"{path}.zip"
    return path


def is_sb3_zip(path: Any) -> bool:
    """Whether ``path`` is a zip sb3 wrote (its ``data`` entry), not a torch file (a zip too) or a run directory."""
    if not (os.path.isfile(path) and zipfile.is_zipfile(path)):
        return False
    with zipfile.ZipFile(path) as archive:
        return "data" in archive.namelist()


def load(
    cls: type,
    path: Any,
    env: Any,
    device: Any,
    custom_objects: Optional[dict[str, Any]],
    print_system_info: bool,
    force_reset: bool,
    trust_pickles: bool = False,
    **kwargs: Any,
) -> Algorithm:
    """See the module doc; ``cls``: the algorithm class loading."""
    path = zip_path(path)
    if isinstance(path, (str, os.PathLike)) and os.path.exists(path) and not is_sb3_zip(path):
        return load_ppo_dict_file(cls, str(path), env, device, **kwargs)
    if trust_pickles:
        trust_warning([path if isinstance(path, (str, os.PathLike)) else "the zip given"])
    if print_system_info:  # sb3's load prints this system's block, then its load_from_zip_file the saved model's
        print("== CURRENT SYSTEM INFO ==")
        get_system_info()
    data, params = read_zip(path, trust_pickles, device, custom_objects, print_system_info)
    if not data or not params:
        raise CheckpointError(f"{path}: not an sb3 model zip (no data or no parameters in it)")
    alias = policy_alias(cls, path, data.get("policy_class"))  # another algorithm's zip is named as such, not as unpickled
    names = cls.spec.signature().parameters
    needed = [k for k in dict.fromkeys(("observation_space", "action_space", "policy_kwargs", *names)) if k not in kwargs]
    refuse_unrebuilt(path, data, needed, what_to_pass(cls.spec.name, data, needed))
    stored = data.get("policy_kwargs")
    policy_kwargs = dict((kwargs["policy_kwargs"] if isinstance(stored, Unrebuilt) else stored) or {})
    policy_kwargs.pop("device", None)
    if (
        isinstance(policy_kwargs.get("net_arch"), list)
        and policy_kwargs["net_arch"]
        and isinstance(policy_kwargs["net_arch"][0], dict)
    ):
        policy_kwargs["net_arch"] = policy_kwargs["net_arch"][0]  # sb3's backward compatibility
    if "policy_kwargs" in kwargs and kwargs["policy_kwargs"] != policy_kwargs:
        raise ValueError(
            f"The specified policy kwargs do not equal the stored policy kwargs.Stored kwargs: {policy_kwargs}, "
            f"specified kwargs: {kwargs['policy_kwargs']}"
        )
    # sb3's arguments only: the zip's n_envs is the saving model's, and the env given decides the count, as in sb3's load
    arguments = {k: schedule(v) for k, v in data.items() if k in names and k not in NOT_SAVED and k not in EXTRAS}
    if isinstance(data.get("_stats_window_size"), int):  # sb3 saves its argument under this name
        arguments["stats_window_size"] = data["_stats_window_size"]
    arguments.update({**kwargs, "policy_kwargs": policy_kwargs})  # a policy_kwargs given equals the stored (checked above)
    model = cls(alias, env, device=device, _init_setup_model=False, **arguments)
    observation_space, action_space = _convert_space(data["observation_space"]), _convert_space(data["action_space"])
    if model.env is not None:
        check_for_correct_spaces(model.env, observation_space, action_space)
    else:
        model.observation_space, model.action_space, model.n_envs = observation_space, action_space, data.get("n_envs", 1)
    model._setup_model()
    model.set_parameters(params, exact_match=True, device=device)
    continue_counters(model, data)
    if model.cfg.use_sde:
        model.policy.reset_noise()  # sb3's load ends so: an exploration matrix from the loaded log_std (torch RNG draws)
    return model


def what_to_pass(algorithm: str, data: dict[str, Any], needed: list[str]) -> str:
    """The refusal's advice for the values not rebuilt: the ``custom_objects`` line of the schedules, named as the
    zip's JSON names their functions (the learning rate's by its ``lr_schedule``), and where to pass the others."""
    unrebuilt = [key for key in needed if isinstance(data.get(key), Unrebuilt)]
    schedules = {key: data.get("lr_schedule" if key == "learning_rate" else key) for key in unrebuilt if key in SCHEDULE_KEYS}
    functions = {key: named.name if isinstance(named, Unrebuilt) else "" for key, named in schedules.items()}
    advice = f"Pass the schedules your script gave: {custom_objects_line(algorithm, functions)}. " if functions else ""
    return advice + (
        "Pass its value to load (as a keyword argument, or in custom_objects). " if len(unrebuilt) > len(functions) else ""
    )


def schedule(value: Any) -> Any:
    """A zip's value as sb3's constructor takes it: rl-zoo's ``lin_<x>`` (a schedule rebuilt from its JSON) as
    rl-zoo's ``SimpleLinearSchedule`` (which a zip saved again describes too); any other value as it is."""
    return zip_schedule(value) if is_schedule_text(value) else value


def policy_alias(cls: type, path: Any, policy_class: Any) -> Any:
    """The alias of a zip's policy class (a class of the script's own, given as ``custom_objects``' ``policy_class``:
    the class), or a CheckpointError naming what the zip holds."""
    own = own_policy_class(policy_class, cls.spec.policy_base)
    if own is not None:
        return own
    module, name = class_name(policy_class)
    sb3s = module.split(".")[0] in ("stable_baselines3", "sb3_contrib")
    if name in cls.spec.policy_classes and sb3s:
        return cls.spec.policy_classes[name]
    if not sb3s and cls.spec.policy_base is not None and isinstance(policy_class, Unrebuilt):
        raise CheckpointError(
            f"{path}: its policy is {module}.{name}, a class of a script's own, which ppo_dict does not "
            f"unpickle from a file: pass the class, {cls.spec.name}.load(path, "
            f"custom_objects={{'policy_class': {name}}})"
        )
    raise CheckpointError(
        f"{path}: not an sb3 {cls.spec.name} model: its policy is {module}.{name}; {cls.spec.name}.load "
        f"takes a zip saved by {cls.spec.sb3_class.replace(':', '.')}"
    )


def continue_counters(model: Algorithm, data: dict[str, Any]) -> None:
    """The zip's counters and episode buffers, as sb3's ``load`` puts them back."""
    model.num_timesteps = int(data.get("num_timesteps", 0))
    model._total_timesteps = int(data.get("_total_timesteps", 0))
    model._current_progress_remaining = float(data.get("_current_progress_remaining", 1.0))
    model._episode_num = int(data.get("_episode_num", 0))
    if isinstance(data.get("start_time"), (int, float)):
        model.start_time = data["start_time"]  # sb3's load: the saved model's, until the next learn starts its clock
    if model.trainer is None:  # kept on the model until set_env gives it a trainer (sb3's load keeps them on the model)
        model.__dict__["_saved_updates"] = int(data.get("_n_updates", 0))
        for name in ("ep_info_buffer", "ep_success_buffer"):
            episodes = () if isinstance(data.get(name), Unrebuilt) else data.get(name) or ()
            model.__dict__[f"_saved_{name.removeprefix('ep_')}"] = deque(episodes, maxlen=model.cfg.stats_window_size)
        return
    model.trainer.n_updates = int(data.get("_n_updates", 0))
    for name, target in (
        ("ep_info_buffer", model.trainer.episodes.info_buffer),
        ("ep_success_buffer", model.trainer.episodes.success_buffer),
    ):
        target.clear()
        if not isinstance(data.get(name), Unrebuilt):  # not unpickled: the episodes start afresh, as after learn()'s reset
            target.extend(data.get(name) or ())


def ppo_dict_file_without_env(model: Algorithm, state: dict[str, Any], cfg: Config, path: str) -> Algorithm:
    """A ppo_dict model file or checkpoint loaded as sb3's ``load`` loads a zip without env: its spaces (read from one env
    built from the saved config, then closed: the file holds their text only), the policy's weights, Adam's state where
    the file has it, and the counters; no envs and no normaliser (sb3's model without env has no VecNormalize either).
    Image observations need ``env=``: the env given decides their layout (sb3 transposes them in its vec env)."""
    announce(path, cfg, typed=(), dry_run=False)  # what its config imports or launches, said before it is
    made = saved_env(gym_env_spec(cfg, path), path)
    try:
        observation_space, action_space = made.observation_space, made.action_space
    finally:
        made.close()
    if contains_image(observation_space):
        raise CheckpointError(
            f"{path}: a ppo_dict model file of image observations loads with env= (the env given decides their layout)"
        )
    mismatch = space_mismatch(state, observation_space, action_space)
    if mismatch:
        raise CheckpointError(f"{path}: {mismatch}")
    model.observation_space, model.action_space, model.n_envs = observation_space, action_space, 1
    model._setup_model()
    try:
        model.policy.load_state_dict(state["policy"])
        if "optimizer" in state:
            model._optimizer_of().load_state_dict(state["optimizer"])
    except (RuntimeError, ValueError, KeyError) as exc:
        raise CheckpointError(f"{path}: the saved policy does not fit the config ({type(exc).__name__}: {exc})") from exc
    model.num_timesteps = int(state["num_timesteps"])
    model.__dict__["_saved_updates"] = int(state.get("n_updates", 0))
    return model


def load_ppo_dict_file(cls: type, path: str, env: Any, device: Any, **kwargs: Any) -> Algorithm:
    """A ppo_dict model file or checkpoint, with its config's settings (``kwargs`` override them)."""
    state = load_model_state(path)
    cfg = Config.from_dict(state["config"])
    masked_recurrent = cfg.recurrent and cfg.action_masks
    if cfg.recurrent != cls.spec.recurrent or masked_recurrent != bool(
        cls.spec.recurrent and cls.spec.fixed.get("action_masks")
    ):
        reader = "MaskableRecurrentPPO" if masked_recurrent else "RecurrentPPO" if cfg.recurrent else "PPO or MaskablePPO"
        kind = (
            "a masked recurrent model"
            if masked_recurrent
            else "a recurrent model"
            if cfg.recurrent
            else "not a recurrent model"
        )
        raise CheckpointError(
            f"{path}: {kind} (model={cfg.model!r}{', action_masks=True' if masked_recurrent else ''}): "
            f"{reader}.load reads it, not {cls.spec.name}.load"
        )
    arguments = {name: getattr(cfg, name) for name in SAME_NAME}
    arguments["policy_kwargs"] = {
        **sb3_kwargs(cfg)["policy_kwargs"],
        **({"rnn_type": "gru"} if cfg.recurrent and cfg.rnn_type == "gru" else {}),
    }
    alias = cls.spec.multi_input if state["observation_space"].startswith("Dict(") else cls.spec.policy_for(cfg.model)
    arguments.update(kwargs)
    model = cls(alias, env, device=device, _init_setup_model=False, **arguments)
    if model.env is None:
        return ppo_dict_file_without_env(model, state, cfg, path)
    if (state["normalizer"] is not None) != (model.envs.vec_normalize is not None):
        raise CheckpointError(
            f"{path}: saved with normalize={state['normalizer'] is not None}: pass an env "
            f"{'in' if state['normalizer'] is not None else 'without'} a VecNormalize with the run's "
            f"settings"
        )
    model._setup_model()
    if "optimizer" in state:
        restore(model.trainer, state, path)  # weights, Adam, counters, episodes, RNG streams, the envs' reset seed
        if model.trainer.env_seed is not None:
            model.env.seed(model.trainer.env_seed)
    else:
        model.trainer.model.load(state["policy"], to_numpy(state["normalizer"]), path)
    return model
