"""One frozen dataclass holds every setting; each field's metadata says how to read and check it.

Names and defaults are Stable-Baselines3's (``PPO.__init__``, ``ActorCriticPolicy``,
``VecNormalize``); schedules are written as rl-zoo writes them (``lin_3e-4``). This module is a
leaf of the trainer: the fields are declared in ``ppo_dict.core.learning_settings`` and
``ppo_dict.core.run_settings``, the command line (``ppo_dict.run.cli``) is generated from their metadata, what follows
from the settings (derived values, the checks of the values alone) is ``ppo_dict.core.config_rules``, and the
checks that need other modules (the env, the model, rl-zoo files) live in ``ppo_dict.run.checks``.

A ``Config`` built in Python reads its values with the same parsers as the command line
(``Config(net_arch="64,64")`` is ``[64, 64]``; a value no parser reads is a :class:`ConfigError`
at once), and :meth:`Config.problems` lists what is out of range however the config was built.
"""

from __future__ import annotations

import dataclasses
import difflib
import re
from dataclasses import dataclass
from typing import Any

from ppo_dict.core.config_rules import RECURRENT_MODELS, RESUME_AUTO, ConfigRules  # noqa: F401  (the first two re-exported)
from ppo_dict.core.errors import ConfigError
from ppo_dict.core.fields import read_value
from ppo_dict.core.learning_settings import MODELS  # noqa: F401  (re-exported)
from ppo_dict.core.machine import physical_cores  # noqa: F401  (re-exported: the trainer and benchmarks ask it here)
from ppo_dict.core.run_settings import MP_METHODS, RunSettings  # noqa: F401  (MP_METHODS re-exported)

#: ``(n_steps, batch_size)`` when not given: sb3's PPO's, and sb3-contrib's RecurrentPPO's for a recurrent model
ROLLOUT_DEFAULTS = {False: (2048, 64), True: (128, 128)}


@dataclass(frozen=True)
class Config(RunSettings, ConfigRules):
    """Every setting of a run. Flags are ``--<field name>``; defaults are sb3's.

    Attributes are documented in their ``help`` text, which is also ``--help``.
    """

    # The fields are LearningSettings' (ppo_dict.core.learning_settings: the env, the policy, PPO, the normalisation)
    # then RunSettings' (ppo_dict.core.run_settings: the workers, the system, the run directory, evaluation, tracking).

    def __post_init__(self) -> None:
        """Read every value with its flag's parser; a value none can read is refused here, all at once."""
        values, unreadable = read_values(self.to_dict())
        if unreadable:
            raise ConfigError(list(unreadable.values()))
        for name, value in values.items():
            object.__setattr__(self, name, value)
        # A default that depends on the model is settled here, once: the config then holds the value the
        # run uses (config.json, checkpoints, a sweep agent's --n_steps=128 mean the same as a typed one).
        n_steps, batch_size = ROLLOUT_DEFAULTS[self.recurrent]
        object.__setattr__(self, "n_steps", n_steps if self.n_steps is None else self.n_steps)
        object.__setattr__(self, "batch_size", batch_size if self.batch_size is None else self.batch_size)

    @classmethod
    def read(cls, values: dict[str, Any]) -> tuple["Config", dict[str, str]]:
        """``(config, unreadable)``: the config of ``values`` (keyword arguments, or flags as typed)
        with every value its parser cannot read left at its default, and ``{setting: problem}`` for
        those and for names that are not settings. Never raises: ``ppo_dict.run.checks.validate(config,
        unreadable=...)`` lists these problems with every other one, in one :class:`ConfigError`."""
        known = {k: v for k, v in values.items() if k in FIELDS}
        read, unreadable = read_values(known)
        for name in values.keys() - known.keys():
            close = difflib.get_close_matches(name, FIELDS, n=1)
            unreadable[name] = f"{name}: no such setting" + (f" (did you mean {close[0]}?)" if close else "")
        return cls(**read), unreadable

    # ------------------------------------------------------------------ conversions
    def replace(self, **changes: Any) -> "Config":
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> "Config":
        """A config from :meth:`to_dict`'s output (e.g. read back from a checkpoint or JSON);
        keys that are not fields (written by another version) are ignored."""
        return cls(**parse_values(values))


FIELDS: dict[str, dataclasses.Field] = {f.name: f for f in dataclasses.fields(Config)}


def read_values(values: dict[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    """``(read, unreadable)``: each of ``values`` (keys: Config fields) read by its field's parser,
    and ``{field: "field=value: why"}`` for those no parser reads (whatever the parser raised: they
    read text and touch nothing, so any exception means the value cannot be read)."""
    read, unreadable = {}, {}
    for name, value in values.items():
        try:
            read[name] = read_value(FIELDS[name], value)
        except Exception as exc:  # noqa: BLE001 (ValueError, SyntaxError, OverflowError, RecursionError...: all unreadable)
            unreadable[name] = f"{name}={value!r}: {exc}"
    return read, unreadable


def problem_setting(problem: str) -> str:
    """The setting a problem line names first: ``n_envs`` in ``"n_envs=0: must be in [1, inf]"``."""
    return re.split(r"[=:*\s]", problem, maxsplit=1)[0]


def parse_values(values: dict[str, Any]) -> dict[str, Any]:
    """``{field: value read by its parser}`` for the keys of ``values`` that are Config fields."""
    return {k: read_value(FIELDS[k], v) for k, v in values.items() if k in FIELDS}
