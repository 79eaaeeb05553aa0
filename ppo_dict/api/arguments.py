"""sb3's constructor arguments as the command line's config values, and what ppo_dict refuses of them.

An algorithm's arguments (``ppo_dict.api.algorithms``) are sb3's own, bound against the sb3 class's
signature (the same names, order and defaults), plus ppo_dict's settings as keyword-only
arguments with the command line's names (:data:`EXTRAS`). :func:`config_values` turns them into
the values ``ppo_dict.run.cli.read_config`` reads, the command line's one path to a
:class:`~ppo_dict.core.config.Config`; what ppo_dict does not implement is listed by
:func:`unsupported`, each by name, in the same error as every other problem.
"""

from __future__ import annotations

import importlib
import inspect
from typing import Any, Optional

import torch
from gymnasium import spaces
from torch import nn

from ppo_dict.algo.networks.policy import ACTIVATION_CLASSES
from ppo_dict.core.config import FIELDS
from ppo_dict.data.recurrent import CELL_STATES
from ppo_dict.envs import contains_image

#: sb3 arguments that are config fields of the same name and meaning (read by the same parsers)
SAME_NAME = (
    "learning_rate",
    "n_steps",
    "batch_size",
    "n_epochs",
    "gamma",
    "gae_lambda",
    "clip_range",
    "clip_range_vf",
    "normalize_advantage",
    "ent_coef",
    "vf_coef",
    "max_grad_norm",
    "use_sde",
    "sde_sample_freq",
    "target_kl",
    "seed",
    "verbose",
    "tensorboard_log",
    "stats_window_size",
)
#: sb3 arguments whose default is the only value ppo_dict implements
DEFAULT_ONLY = {"rollout_buffer_class": None, "rollout_buffer_kwargs": None}
#: what a zip holds for those defaults (sb3's ``_setup_model`` picks the buffer class, ``__init__`` turns None into {})
SAVED_DEFAULTS = {
    "rollout_buffer_class": ("RolloutBuffer", "DictRolloutBuffer", "MaskableRolloutBuffer", "MaskableDictRolloutBuffer"),
    "rollout_buffer_kwargs": ({},),
}
#: the sb3 modules of those buffer classes
BUFFER_MODULES = ("stable_baselines3.common.buffers", "sb3_contrib.common.maskable.buffers")
#: the policy keyword arguments that are config fields of the same name (``activation_fn`` as its name, where it has one)
POLICY_FIELDS = (
    "net_arch",
    "activation_fn",
    "ortho_init",
    "log_std_init",
    "share_features_extractor",
    "normalize_images",
    "full_std",
    "use_expln",
    "squash_output",
)
#: sb3-contrib's recurrent policies' keyword arguments that are config fields of the same name (the command line's LSTM flags),
#: and ``rnn_type`` (``--rnn_type``: "lstm" or "gru"), ppo_dict's own, which no sb3-contrib policy takes
LSTM_FIELDS = ("lstm_hidden_size", "n_lstm_layers", "shared_lstm", "enable_critic_lstm", "lstm_kwargs", "rnn_type")
#: ppo_dict's own settings, keyword-only, with the command line's names and defaults; torch_threads and
#: update_threads default to the process's torch thread count (sb3 sets none), n_envs to 1 for an env id
EXTRAS = (
    "n_envs",
    "num_workers",
    "envs_per_worker",
    "mp_method",
    "main_steps_envs",
    "main_envs",
    "spin_wait_us",
    "double_buffer",
    "step_timeout",
    "torch_threads",
    "update_threads",
    "env_kwargs",
    "gym_packages",
)
#: sb3's policy keyword arguments that are objects: the API builds the policy's features extractor, its activations
#: (a class the config has no name for) and the optimizer with them as sb3 does (:func:`built_here`); the config holds no class
BUILT_HERE = ("features_extractor_class", "features_extractor_kwargs", "optimizer_class", "optimizer_kwargs", "activation_fn")


def extras_signature() -> list[inspect.Parameter]:
    """The keyword-only parameters of :data:`EXTRAS`, defaults as the command line's (threads: None, see above)."""
    defaults = {"torch_threads": None, "update_threads": None, "env_kwargs": None}
    return [
        inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=defaults.get(name, FIELDS[name].default))
        for name in EXTRAS
    ]


def sb3_device(device: Any) -> str:
    """sb3's ``get_device``: "auto" is CUDA where torch has it, else the CPU (for every policy)."""
    device = torch.device(device if str(device) != "auto" else ("cuda" if torch.cuda.is_available() else "cpu"))
    return "cuda" if device.type == "cuda" and device.index is None else str(device)


def model_of(default_model: Optional[str], observation_space: spaces.Space, suffix: str = "") -> str:
    """The config's ``model`` for a policy: its own, or by the observation for a multi-input policy
    (``suffix``: ``"_lstm"`` for sb3-contrib's MultiInputLstmPolicy)."""
    if default_model is not None:
        return default_model
    return ("cnn" if contains_image(observation_space) else "mlp") + suffix


def policy_problems(alias: str, observation_space: spaces.Space, multi_input: str) -> list[str]:
    """What sb3 refuses of a policy for the observation (its own words where it has them);
    ``multi_input``: the algorithm's policy for Dict observations."""
    is_dict = isinstance(observation_space, spaces.Dict)
    if alias != multi_input and is_dict:
        return [f"policy={alias!r}: You must use `{multi_input}` when working with dict observation space, not {alias}"]
    if alias == multi_input and not is_dict:
        others = f"{multi_input.replace('MultiInput', 'Mlp')} or {multi_input.replace('MultiInput', 'Cnn')}"
        return [f"policy={alias!r}: takes a Dict observation space, not {observation_space} (use {others})"]
    return []


def policy_values(
    policy_kwargs: Optional[dict[str, Any]], alias: Optional[str], taken: tuple[str, ...], algorithm: str = "PPO"
) -> tuple[dict[str, Any], list[str]]:
    """``(config values, problems)`` of sb3's ``policy_kwargs`` for policy ``alias`` of ``algorithm``;
    ``taken``: the keyword arguments its policies take (MaskablePPO's: no Gaussian ones; RecurrentPPO's: the LSTM's too)."""
    values: dict[str, Any] = {}
    problems: list[str] = []
    for name, value in dict(policy_kwargs or {}).items():
        if name == "activation_fn" and name in taken:
            names = {cls: key for key, cls in ACTIVATION_CLASSES.items()}
            if value in names:
                values[name] = names[value]  # the config's name of it (else the API builds it: built_here)
            elif not (isinstance(value, type) and issubclass(value, nn.Module)):
                problems.append(
                    f"policy_kwargs activation_fn={value!r}: must be a torch.nn.Module class (nn.Tanh, nn.Softplus, ...)"
                )
        elif name == "rnn_type" and name in taken and not (value is None or str(value).lower() in CELL_STATES):
            problems.append(
                f"policy_kwargs rnn_type={value!r}: the recurrent cell, one of "
                f"{', '.join(map(repr, CELL_STATES))} ('lstm': sb3-contrib's LSTM; 'gru': torch's nn.GRU in its "
                f"place, one state per layer)"
            )
        elif name in taken:
            if name == "net_arch" and isinstance(value, list) and len(value) == 1 and isinstance(value[0], dict):
                value = value[0]  # sb3 < 1.8's [dict(pi=..., vf=...)], unwrapped as sb3 unwraps it
            values[name] = {} if name == "lstm_kwargs" and value is None else value  # sb3-contrib's: lstm_kwargs or {}
        elif name in BUILT_HERE:
            problem = built_here_problem(name, value)
            if problem:
                problems.append(f"policy_kwargs {name}={value!r}: {problem}")
        elif not default_policy_kwarg(name, value, alias):
            why = (
                f"{algorithm}'s policies take no such argument"
                if name in POLICY_FIELDS + LSTM_FIELDS
                else "ppo_dict builds sb3's default only"
            )
            problems.append(f"policy_kwargs {name}={value!r}: not supported ({why})")
    return values, problems


def built_here_problem(name: str, value: Any) -> str:
    """What is wrong with one of :data:`BUILT_HERE` (``""``: nothing): a class of the right kind, a dict of keyword
    arguments."""
    if name.endswith("_kwargs"):
        return "" if value is None or isinstance(value, dict) else "must be a dict of keyword arguments, or None"
    base, what = (
        (nn.Module, "a features extractor class (sb3's BaseFeaturesExtractor)")
        if name == "features_extractor_class"
        else (torch.optim.Optimizer, "a torch optimizer class (torch.optim.Adam, torch.optim.RMSprop, ...)")
    )
    return "" if isinstance(value, type) and issubclass(value, base) else f"must be {what}"


def built_here(policy_kwargs: Optional[dict[str, Any]]) -> dict[str, Any]:
    """The keyword arguments of :data:`BUILT_HERE` given in ``policy_kwargs`` (``activation_fn``: a class the config has
    no name for)."""
    given = {name: value for name, value in dict(policy_kwargs or {}).items() if name in BUILT_HERE}
    if given.get("activation_fn") in ACTIVATION_CLASSES.values():
        del given["activation_fn"]
    return given


def sb3_policy_alias(policy: Any, policy_classes: dict[str, str]) -> Optional[str]:
    """The alias of ``policy``: itself for a name, the alias of one of sb3's (sb3-contrib's) own policy
    classes (``policy_classes``: class name -> alias), else None (a user's class, subclasses of sb3's included)."""
    if isinstance(policy, str):
        return policy
    module = getattr(policy, "__module__", "").split(".")[0]
    name = getattr(policy, "__name__", None)
    if module in ("stable_baselines3", "sb3_contrib") and name in policy_classes:
        return policy_classes[name]
    return None


def own_policy_class(policy: Any, base: Optional[str]) -> Optional[type]:
    """``policy`` if it is a class of the script's own that ppo_dict trains through its methods: a subclass of
    ``base`` (``"module:Class"``, the algorithm's sb3 policy class; not sb3-contrib's recurrent one), else None."""
    if base is None or not isinstance(policy, type):
        return None
    module, _, name = base.partition(":")
    recurrent = any(
        c.__name__ == "RecurrentActorCriticPolicy" and c.__module__.startswith("sb3_contrib") for c in policy.__mro__
    )
    return policy if issubclass(policy, getattr(importlib.import_module(module), name)) and not recurrent else None


def default_policy_kwarg(name: str, value: Any, alias: Optional[str]) -> bool:
    """Whether a policy keyword argument ppo_dict has no field for asks for what it builds anyway."""
    if name == "lstm_kwargs":
        return value in (None, {})
    if name == "squash_output":
        return value is False
    return False


def unsupported(
    arguments: dict[str, Any],
    alias: Optional[str],
    aliases: tuple[str, ...] = ("MlpPolicy", "CnnPolicy", "MultiInputPolicy"),
    base: Optional[str] = None,
) -> list[str]:
    """The sb3 arguments given with a value ppo_dict does not implement, each by name (``alias``: the policy's,
    None for a class of the user's; ``aliases``: the algorithm's policies; ``base``: the sb3 class its own classes
    subclass)."""

    def is_default(name: str, value: Any) -> bool:
        saved = SAVED_DEFAULTS.get(name, ())
        sb3s = getattr(value, "__name__", None) in saved and getattr(value, "__module__", None) in BUFFER_MODULES
        return value == DEFAULT_ONLY[name] or (not isinstance(value, type) and value in saved) or sb3s

    problems = [
        f"{name}={arguments[name]!r}: not supported (ppo_dict implements {default!r} only)"
        for name, default in DEFAULT_ONLY.items()
        if name in arguments and not is_default(name, arguments[name])
    ]
    if alias is None and own_policy_class(arguments.get("policy"), base) is None:
        own = (
            f"a subclass of {base.replace(':', '.')}"
            if base
            else "no policy class of the script's own (RecurrentPPO's LSTM passes are ppo_dict's)"
        )
        problems.append(
            f"policy={arguments.get('policy')!r}: not a policy ppo_dict trains: {', '.join(aliases[:-1])} and "
            f"{aliases[-1]}, sb3's own classes of them, or {own} (a custom network is also policy_kwargs' "
            f"features_extractor_class and net_arch)"
        )
    return problems


def config_values(arguments: dict[str, Any], extras: dict[str, Any], fixed: dict[str, Any]) -> dict[str, Any]:
    """The command line's flags that mean what sb3's ``arguments`` and ppo_dict's ``extras`` mean
    (``fixed``: what the algorithm sets, e.g. MaskablePPO's masks). Values are read by the config's
    parsers later, as a typed flag is."""
    values = {name: arguments[name] for name in SAME_NAME if name in arguments}
    if "batch_size" in values and values["batch_size"] is None:  # sb3-contrib's: the whole rollout, one minibatch
        del values["batch_size"]
        values["num_batches"] = 1
    values["device"] = sb3_device(arguments.get("device", "auto"))
    given = {name: value for name, value in extras.items() if value is not None}  # None: the config's default
    threads = given.pop("torch_threads", None) or torch.get_num_threads()  # sb3 sets none: the process's own
    values.update(given, torch_threads=threads, update_threads=given.get("update_threads") or threads)
    values.update(fixed)
    return values
