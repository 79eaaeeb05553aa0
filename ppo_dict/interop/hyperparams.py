"""Reading rl-zoo hyperparameter files (``hyperparams/ppo.yml``) into Config values.

An rl-zoo file has one entry per env id (``Reacher-v2:``) holding sb3 ``PPO`` keyword arguments
plus rl-zoo's own keys (``normalize``, ``n_envs``, ``n_timesteps``, ``policy``,
``policy_kwargs``, ``frame_stack``, ``env_wrapper`` when it is sb3's AtariWrapper, and
``monitor_kwargs`` with sb3 Monitor's ``info_keywords``: ``--info_keywords``). String
values such as ``policy_kwargs: "dict(net_arch=[64, 64])"`` are parsed with :func:`~ppo_dict.core.parse.safe_literal`;
rl-zoo ``eval``s them, ppo_dict never does.

``--hyperparams rl_zoo3`` reads rl-zoo's own ``ppo.yml`` from the installed ``rl_zoo3`` package
(the ``zoo`` extra), or its ``ppo_lstm.yml`` (sb3-contrib's RecurrentPPO: ``MlpLstmPolicy``, ``CnnLstmPolicy``,
``MultiInputLstmPolicy`` and the LSTM's ``policy_kwargs``) when ``--model`` names a recurrent model. An env without an
entry takes the file's ``atari`` entry (games ale-py makes) or its ``default`` entry, as rl-zoo's
``ExperimentManager.read_hyperparameters`` does.
"""

from __future__ import annotations

import importlib.util
import os
import re
from argparse import ArgumentTypeError
from dataclasses import dataclass, field
from typing import Any, Iterable, Optional, Sequence

from ppo_dict.core.config import parse_values
from ppo_dict.core.parse import KEY_VALUE, key_values, safe_literal
from ppo_dict.core.reading import open_regular, read_yaml  # read_yaml: also read from here (benchmarks)
from ppo_dict.envs import gym_id_of, is_atari_env

#: rl-zoo key -> Config field, where the names differ
RENAMED = {"n_timesteps": "total_timesteps"}
#: sb3 PPO keyword arguments that are Config fields under the same name
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
    "target_kl",
    "n_envs",
    "seed",
    "use_sde",
    "sde_sample_freq",
)
#: VecNormalize keyword arguments (rl-zoo's ``normalize: "dict(...)"``) -> Config field
NORMALIZE_KWARGS = {
    "norm_obs": "norm_obs",
    "norm_reward": "norm_reward",
    "clip_obs": "clip_obs",
    "clip_reward": "clip_reward",
    "gamma": "norm_gamma",
    "epsilon": "norm_epsilon",
}
#: ActorCriticPolicy keyword arguments that are Config fields under the same name
POLICY_KWARGS = (
    "net_arch",
    "activation_fn",
    "ortho_init",
    "log_std_init",
    "share_features_extractor",
    "normalize_images",
    "full_std",
    "use_expln",
    "squash_output",
    "lstm_hidden_size",
    "n_lstm_layers",
    "shared_lstm",
    "enable_critic_lstm",
    "lstm_kwargs",
)
#: sb3's policy names, and sb3-contrib RecurrentPPO's (rl-zoo's ``ppo_lstm.yml``)
POLICIES = {
    "MlpPolicy": "mlp",
    "CnnPolicy": "cnn",
    "MultiInputPolicy": "mlp",
    "MlpLstmPolicy": "mlp_lstm",
    "CnnLstmPolicy": "cnn_lstm",
    "MultiInputLstmPolicy": "mlp_lstm",
}
#: keys rl-zoo knows that ppo_dict does not implement, with the reason
UNSUPPORTED = {
    "vec_env_wrapper": "vec env wrappers from the file are not applied",
    "callback": "callbacks from the file are not run",
    "normalize_kwargs": 'write normalize: "dict(...)" instead',
}


#: ``--hyperparams rl_zoo3``: rl-zoo's PPO file from the installed package (its RecurrentPPO file for a recurrent run)
RL_ZOO = "rl_zoo3"
RL_ZOO_FILES = {False: "ppo.yml", True: "ppo_lstm.yml"}


def hyperparams_file(name: str, recurrent: bool = False) -> str:
    """The file ``--hyperparams name`` means: a path, or ``rl_zoo3`` for the installed rl-zoo's ``ppo.yml``
    (``ppo_lstm.yml``, rl-zoo's ``--algo ppo_lstm``, when ``recurrent``: ``--model mlp_lstm | cnn_lstm``).

    Found without importing rl_zoo3 (which imports sb3, optuna and huggingface_hub); raises
    ``FileNotFoundError`` naming the extra to install when rl_zoo3 is not there.
    """
    if name != RL_ZOO:
        return name
    spec = importlib.util.find_spec(RL_ZOO)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("rl_zoo3 is not installed: pip install rl_zoo3 (or ppo_dict's zoo extra), or give a file path")
    return os.path.join(list(spec.submodule_search_locations)[0], "hyperparams", RL_ZOO_FILES[recurrent])


#: the one rl-zoo ``env_wrapper`` ppo_dict applies (itself, in the workers: ``--atari_wrapper True``)
ATARI_WRAPPER = "stable_baselines3.common.atari_wrappers.AtariWrapper"
#: AtariWrapper keyword arguments -> Config field
ATARI_KWARGS = {
    "noop_max": "atari_noop_max",
    "frame_skip": "atari_frame_skip",
    "screen_size": "image_size",
    "terminal_on_life_loss": "atari_terminal_on_life_loss",
    "clip_reward": "atari_clip_reward",
    "action_repeat_probability": "atari_action_repeat_probability",
}
#: rl-zoo's entry for every Atari game without one of its own (``ExperimentManager.read_hyperparameters``)
ATARI_ENTRY = "atari"


def env_wrapper_values(value: Any, where: str) -> tuple[dict[str, Any], list[str]]:
    """rl-zoo's ``env_wrapper`` -> ``(raw Config values, problems)``.

    Written as rl-zoo's ``get_wrapper_class`` reads it: a class path, or a list of class paths
    and ``{class path: kwargs}`` mappings. Only sb3's AtariWrapper is applied.
    """
    values: dict[str, Any] = {}
    problems: list[str] = []
    for wrapper in value if isinstance(value, list) else [] if value is None else [value]:
        name, kwargs = next(iter(wrapper.items())) if isinstance(wrapper, dict) and len(wrapper) == 1 else (wrapper, {})
        if name != ATARI_WRAPPER:
            problems.append(
                f"{where}: env_wrapper {name!r} is not supported: ppo_dict applies only {ATARI_WRAPPER} (--atari_wrapper True)"
            )
            continue
        values["atari_wrapper"] = True
        if not isinstance(kwargs, dict) and kwargs is not None:
            problems.append(
                f"{where}: env_wrapper: {name}'s arguments are {shown(kwargs)}, not a mapping of AtariWrapper arguments"
            )
            continue
        for kwarg, kwarg_value in (kwargs or {}).items():
            if kwarg not in ATARI_KWARGS:
                problems.append(f"{where}: env_wrapper: {kwarg!r} is not an AtariWrapper argument ({', '.join(ATARI_KWARGS)})")
            else:
                values[ATARI_KWARGS[kwarg]] = kwarg_value
    return values, problems


#: rl-zoo's entry for an env without one of its own, where it is not an Atari game
DEFAULT_ENTRY = "default"


def _entry_names(env: str) -> list[str]:
    """The keys an env may have in the file, in rl-zoo's order: ``gym_Reacher-v2`` -> ``gym_Reacher-v2``,
    ``Reacher-v2``, then the fallback entry ``atari`` (Atari ids) or ``default``."""
    names = list(dict.fromkeys([env, gym_id_of(env) or env]))
    names.append(ATARI_ENTRY if is_atari_env(env) else DEFAULT_ENTRY)
    return names


def other_versions(env: str, entries: Any) -> list[str]:
    """The file's entries for other versions of ``env``'s gymnasium id (``Reacher-v2`` for ``Reacher-v5``)."""
    found = re.fullmatch(r"(.+)-v\d+", gym_id_of(env) or env)
    return (
        []
        if found is None
        else [str(e) for e in entries if re.fullmatch(rf"{re.escape(found.group(1))}-v\d+", str(e)) and e != gym_id_of(env)]
    )


def _as_dict(value: Any, what: str) -> dict[str, Any]:
    parsed = safe_literal(value) if isinstance(value, str) else value
    if not isinstance(parsed, dict):
        raise ValueError(f"{what} must be a dict, got {value!r}")
    return parsed


def translate(entry: dict[str, Any], where: str) -> tuple[dict[str, Any], list[str]]:
    """One rl-zoo entry -> ``(raw Config values, problems)``."""
    values: dict[str, Any] = {}
    problems: list[str] = []
    for key, value in entry.items():
        try:
            if key in RENAMED:
                values[RENAMED[key]] = value
            elif key in SAME_NAME or key == "frame_stack":
                values[key] = value
            elif key == "env_wrapper":
                wrapper_values, wrapper_problems = env_wrapper_values(value, where)
                values.update(wrapper_values)
                problems += wrapper_problems
            elif key == "normalize":
                if isinstance(value, bool):
                    values["normalize"] = value
                else:  # rl-zoo: a string of VecNormalize kwargs means normalize=True with those kwargs
                    values["normalize"] = True
                    for name, kwarg in _as_dict(value, "normalize").items():
                        if name not in NORMALIZE_KWARGS:
                            problems.append(
                                f"{where}: normalize: {name!r} is not a VecNormalize argument ppo_dict knows "
                                f"({', '.join(NORMALIZE_KWARGS)})"
                            )
                        else:
                            values[NORMALIZE_KWARGS[name]] = kwarg
            elif key == "monitor_kwargs":  # rl-zoo passes them to sb3's Monitor; ppo_dict records info_keywords itself
                for name, kwarg in _as_dict(value, "monitor_kwargs").items():
                    if name != "info_keywords":
                        problems.append(f"{where}: monitor_kwargs: {name!r} is not supported (supported: info_keywords)")
                    else:
                        values["info_keywords"] = list(kwarg) if isinstance(kwarg, (list, tuple)) else kwarg
            elif key == "policy":
                if not isinstance(value, str) or value not in POLICIES:
                    problems.append(f"{where}: policy={value!r}: must be one of {', '.join(POLICIES)}")
                else:
                    values["model"] = POLICIES[value]
            elif key == "policy_kwargs":
                for name, kwarg in _as_dict(value, "policy_kwargs").items():
                    if name not in POLICY_KWARGS:
                        problems.append(
                            f"{where}: policy_kwargs: {name!r} is not supported (supported: {', '.join(POLICY_KWARGS)})"
                        )
                    else:
                        values[name] = kwarg
            elif key in UNSUPPORTED:
                problems.append(f"{where}: {key!r} is not supported: {UNSUPPORTED[key]}")
            else:
                problems.append(f"{where}: {key!r} is not an rl-zoo PPO hyperparameter")
        except (ValueError, SyntaxError, TypeError) as exc:  # TypeError: a value of another type (a list where a name goes)
            problems.append(f"{where}: {key}={shown(value)}: {exc}")
    parsed: dict[str, Any] = {}
    for name, value in values.items():  # one value at a time, so that each bad one is named
        try:
            parsed.update(parse_values({name: value}))
        except (ValueError, TypeError, SyntaxError, ArgumentTypeError) as exc:  # ArgumentTypeError: a flag's own parser
            problems.append(f"{where}: {name}={shown(value)}: {exc}")
    return parsed, problems


def shown(value: Any, limit: int = 120) -> str:
    """``repr(value)`` cut to ``limit`` characters: a message names a value, it does not echo a file."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


@dataclass(frozen=True)
class Entry:
    """What ``--hyperparams path`` gives a run of ``env``: the ``file`` read, the ``name`` of the entry taken
    (None: none), that entry as the file writes it (``written``), its Config ``values``, and ``problems``."""

    path: str
    env: str
    file: str = ""
    name: Optional[str] = None
    written: dict[str, Any] = field(default_factory=dict)
    values: dict[str, Any] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    others: list[str] = field(default_factory=list)  # the file's entries for other versions of the env

    def text(self) -> str:
        """What was applied, as rl-zoo prints it at start: the entry taken (and why, where it is a fallback),
        then its values as written, a ``key: value`` line each."""
        where = self.path if self.path == self.file else f"{self.path} ({self.file})"
        head = f"hyperparameters: entry {self.name!r} of {where}"
        if self.name in (DEFAULT_ENTRY, ATARI_ENTRY):
            head += f", as it has no entry for {gym_id_of(self.env) or self.env}"
            if self.others:
                head += f" (its entries for other versions: {', '.join(self.others)}; --env {self.others[-1]} takes that one)"
        return "\n".join([head] + [f"  {key}: {value!r}" for key, value in sorted(self.written.items())])


def read_entry(path: str, env: str, recurrent: bool = False, replaced: Iterable[str] = ()) -> Entry:
    """``path``'s entry for ``env`` (:func:`hyperparams_file` of ``path`` and ``recurrent``), looked up as rl-zoo
    does: the env's id, else ``atari`` (Atari games) or ``default``; problems name the file and key. The
    entry's keys in ``replaced`` (``--hyperparams key:value`` overrides) are left out of its values, as rl-zoo's
    ``hyperparams.update`` replaces them whole (a ``policy_kwargs`` override drops the file's ``policy_kwargs``)."""
    import yaml  # PyYAML comes with wandb and gymnasium; imported only for this feature

    try:
        file = hyperparams_file(path, recurrent)
        with open_regular(file) as f:  # a regular file: a FIFO is not waited on
            document = read_yaml(f)
    except FileNotFoundError as exc:
        # the README's hyperparams/ppo.yml, run outside the checkout
        zoo_name = os.path.basename(path) in RL_ZOO_FILES.values()
        hint = f" (rl-zoo's own file, outside this repository's checkout: --hyperparams {RL_ZOO})" if zoo_name else ""
        return Entry(path, env, problems=[f"hyperparams={path!r}: cannot read: {exc}{hint}"])
    except (OSError, ValueError, yaml.YAMLError) as exc:
        return Entry(path, env, problems=[f"hyperparams={path!r}: cannot read: {exc}"])
    except RecursionError:
        return Entry(path, env, problems=[f"hyperparams={path!r}: cannot read: nested too deeply"])
    if not isinstance(document, dict):
        return Entry(path, env, file, problems=[f"hyperparams={path!r}: expected a mapping of env ids to hyperparameters"])
    names, others = _entry_names(env), other_versions(env, document)
    for name in names:
        if name in document:
            entry = document[name]
            if not isinstance(entry, dict):
                return Entry(path, env, file, problems=[f"hyperparams={path!r}: entry {name!r} is not a mapping"])
            values, problems = translate(
                {k: v for k, v in entry.items() if k not in set(replaced)}, f"hyperparams {path}[{name}]"
            )
            return Entry(path, env, file, name, entry, values, problems, others)
    hint = f"; its entries for other versions: {', '.join(others)}" if others else ""
    return Entry(
        path,
        env,
        file,
        others=others,
        problems=[f"hyperparams={path!r}: no entry for {' or '.join(names)} (entries: {', '.join(map(str, document))}){hint}"],
    )


def load_hyperparams(
    path: str, env: str, recurrent: bool = False, replaced: Iterable[str] = ()
) -> tuple[dict[str, Any], list[str]]:
    """``(Config values, problems)`` of :func:`read_entry`."""
    entry = read_entry(path, env, recurrent, replaced)
    return entry.values, entry.problems


#: where a problem of an override is said to be (a ``hyperparams`` problem, as the file's are)
OVERRIDES = "hyperparams key:value"


def split_words(words: Optional[Sequence[str]]) -> tuple[Optional[str], dict[str, Any], list[str]]:
    """``--hyperparams``' words -> ``(file, overrides as written, problems)``: a word ``key:value`` is an override of
    the file's entry (rl-zoo's ``--hyperparams n_epochs:5``), any other the file (a path, or ``rl_zoo3``; write
    ``./a:b.yml`` for a file whose name looks like an override), one at most."""
    files = [w for w in words or () if not KEY_VALUE.fullmatch(w)]
    problems = (
        [f"hyperparams={list(words or ())!r}: one file at most (the others are key:value overrides)"] if len(files) > 1 else []
    )
    return (files[-1] if files else None), key_values(list(words or ())), problems


def zoo_values(
    words: Optional[Sequence[str]], env: str, recurrent: bool, read_file: bool = True
) -> tuple[dict[str, Any], list[str]]:
    """``(Config values, problems)`` of ``--hyperparams``' words for a run of ``env``: the file's entry (where
    ``read_file``: not on a resume, whose config holds what its file gave), then the overrides, as rl-zoo's
    ``hyperparams.update(custom_hyperparams)``."""
    file, overrides, problems = split_words(words)
    values: dict[str, Any] = {}
    if file is not None and read_file and not problems:  # with two files, neither is read: the user meant one
        found, file_problems = load_hyperparams(file, env, recurrent, overrides)
        values.update(found)
        problems += file_problems
    found, override_problems = translate(overrides, OVERRIDES) if overrides else ({}, [])
    return {**values, **found}, problems + override_problems


def hyperparams_text(cfg: Any, base: str = "sb3's defaults", read_file: bool = True) -> str:
    """What the run of ``cfg`` takes its hyperparameters from, said at start and by ``--dry_run``: the entry of
    its ``--hyperparams`` file (:meth:`Entry.text`; not where ``read_file`` is False: a resumed run's config is
    its checkpoint's), else ``base`` (what the values not typed are), then the ``key:value`` overrides."""
    file, overrides, _ = split_words(cfg.hyperparams)
    if file is not None and read_file:
        lines = [read_entry(file, cfg.env, cfg.recurrent).text()]
    else:
        lines = [f"hyperparameters: {base}, and the flags typed"]
    if overrides:
        lines += ["hyperparameters set by --hyperparams key:value (over the entry's; a flag typed wins over them):"]
        lines += [f"  {key}: {value!r}" for key, value in overrides.items()]
    return "\n".join(lines)


#: rl-zoo's ``--algo`` names ppo_dict trains -> whether the algorithm is recurrent (rl-zoo's ``ppo_lstm.yml``)
ZOO_ALGOS = {"ppo": False, "ppo_lstm": True}


def parse_algo(text: str) -> str:
    """rl-zoo's ``--algo`` for what ppo_dict trains (:data:`ZOO_ALGOS`), or ``ValueError`` naming them."""
    name = str(text).strip().lower()
    if name not in ZOO_ALGOS:
        raise ValueError(
            "ppo_dict trains PPO: --algo ppo (sb3's PPO; sb3-contrib's MaskablePPO with --action_masks True) "
            "or ppo_lstm (sb3-contrib's RecurrentPPO)"
        )
    return name
