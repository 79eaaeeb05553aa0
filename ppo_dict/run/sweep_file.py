"""A wandb sweep file, read and checked before any trial runs: what it may decide and what it may not.

A sweep file (wandb's format: ``method``, ``metric``, ``command``, ``parameters``) is read as YAML values
(aliases bounded: ``ppo_dict.core.reading.read_yaml``), from a regular file of a sweep file's size,
and every problem is listed in one :class:`SweepError`: values of the wrong type, a distribution not
supported here, and what only the command line decides: a command other than ppo_dict's own
(``${interpreter} -m ppo_dict.main_ppo ${args}``) runs only with the sweep's ``--allow_command``, and no
parameter may set a setting of ``ppo_dict.core.file_effects.COMMAND_LINE_ONLY`` (trust in pickles, where
a run writes).
"""

from __future__ import annotations

import math
from typing import Any

from ppo_dict.core.errors import SweepError
from ppo_dict.core.file_effects import COMMAND_LINE_ONLY, GODOT_PROGRAM_KWARGS
from ppo_dict.core.reading import MiB, read_capped
from ppo_dict.envs import gym_id_of, is_godot_name
from ppo_dict.run.cli import ALIASES

DISTRIBUTIONS = ("constant", "categorical", "uniform", "int_uniform", "log_uniform_values", "q_uniform")
#: the most bytes a sweep file holds (a few KiB: a method, a metric, a command and its parameters)
MAX_SWEEP_BYTES = 1 * MiB


def read_sweep_file(path: str) -> dict[str, Any]:
    """The sweep file at ``path`` as a mapping (not yet checked: :func:`check_sweep`); :class:`SweepError` says
    why it cannot be read."""
    import yaml

    from ppo_dict.core.reading import read_yaml

    try:
        sweep = read_yaml(read_capped(path, MAX_SWEEP_BYTES, "a sweep file"))  # a regular file only: a FIFO is not waited on
    except OSError as exc:
        raise SweepError(f"cannot read {path}: {exc}") from exc
    except (yaml.YAMLError, ValueError, RecursionError) as exc:
        raise SweepError(f"{path}: not a sweep file: {exc}") from exc
    if not isinstance(sweep, dict):
        raise SweepError(
            f"{path}: a sweep file is a mapping (method, metric, command, parameters), not {type(sweep).__name__}"
        )
    return sweep


def distribution(name: str, spec: dict[str, Any]) -> str:
    """wandb's rules: ``value`` -> constant, ``values`` -> categorical, ``min/max`` -> uniform (int if both ints)."""
    if "distribution" in spec:
        return str(spec["distribution"])
    if "value" in spec:
        return "constant"
    if "values" in spec:
        return "categorical"
    if "min" in spec and "max" in spec:
        return "int_uniform" if isinstance(spec["min"], int) and isinstance(spec["max"], int) else "uniform"
    raise SweepError(f"parameter {name!r}: give value, values, or min and max")


#: the command of a sweep file that runs ppo_dict's own trainer (``${env}`` first, as wandb writes it, or not)
OWN_COMMANDS = tuple(
    ["${interpreter}", "-m", module, "${args}"] for module in ("ppo_dict.main_ppo", "ppo_dict.main_ppo_godot")
)


def own_command(command: Any) -> bool:
    """Whether ``command`` (a sweep file's) runs ppo_dict's own command line: ``${interpreter} -m ppo_dict.main_ppo
    ${args}``."""
    return isinstance(command, list) and (command[1:] if command[:1] == ["${env}"] else command) in OWN_COMMANDS


def setting_of(name: Any) -> str:
    """The setting a sweep parameter sets: wandb passes ``--<name>=<value>``, so every spelling the command line takes
    for a flag (``tensorboard-log``, ``wandb-project-name``: rl-zoo's, ``ppo_dict.run.cli.ALIASES``) is that flag."""
    text = str(name)
    return next((setting for setting, spellings in ALIASES.items() if f"--{text}" in spellings), text)


def parameter_values(spec: Any) -> list[Any]:
    """The values a parameter's spec may give a trial (``value``, ``values``; a range gives numbers only)."""
    if not isinstance(spec, dict):
        return []
    return [spec["value"]] if "value" in spec else list(spec["values"]) if isinstance(spec.get("values"), list) else []


def code_effect(setting: str, spec: Any) -> str:
    """What a parameter imports or launches (``""``: nothing): ``gym_packages``, an ``env`` of the form
    ``module:Id`` (gymnasium imports the module) or a Godot game, ``env_kwargs`` naming a Godot program,
    ``main_ppo_godot``'s ``env_path``."""
    values = parameter_values(spec)
    if setting == "gym_packages":
        return "imports the module(s) it names"
    if setting == "env_path":  # ppo_dict.main_ppo_godot's flag
        return "launches the Godot program it names"
    if setting == "env" and any(":" in gym_id_of(str(v)) or is_godot_name(str(v)) for v in values):
        return "names a module to import (<module>:<env id>) or a Godot game to launch"
    if setting == "env_kwargs" and any(key in str(v) for v in values for key in GODOT_PROGRAM_KWARGS):
        return f"may name the Godot program launched ({', '.join(GODOT_PROGRAM_KWARGS)})"
    return ""


def range_problems(name: Any, spec: dict[str, Any], kind: str) -> list[str]:
    """A range Optuna cannot draw from, said before Optuna sees it: ``q`` not above 0, a log range that reaches 0,
    an integer range of other numbers."""
    if kind == "q_uniform" and not spec.get("q", 1.0) > 0:
        return [f"parameter {name!r}: q={spec['q']!r}: the step of a q_uniform distribution must be above 0"]
    if kind == "log_uniform_values" and not spec["min"] > 0:
        return [f"parameter {name!r}: min={spec['min']!r}: a log_uniform_values distribution draws from min > 0"]
    if kind == "int_uniform" and not all(isinstance(spec[k], int) for k in ("min", "max")):
        return [f"parameter {name!r}: an int_uniform distribution needs whole numbers min and max"]
    return []


def parameter_problems(name: Any, spec: Any, method: Any) -> list[str]:
    """What is wrong with one parameter of a sweep file: a setting only the command line gives (in any of its
    spellings), a spec that is not a mapping of wandb's keys with values of their types, a distribution not
    supported here or a range it cannot draw from."""
    if setting_of(name) in COMMAND_LINE_ONLY:
        shown = "" if setting_of(name) == str(name) else f" (--{setting_of(name)})"
        return [
            f"parameter {name!r}{shown}: set on the command line only (docs/safety.md), never by a sweep file; to give it "
            f"to every trial, pass it after --"
        ]
    if not isinstance(spec, dict):
        return [f"parameter {name!r}: a {type(spec).__name__}, not a mapping (value, values, or min and max)"]
    number = lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)  # noqa: E731
    problems = []
    if "values" in spec and not (isinstance(spec["values"], list) and spec["values"]):
        problems.append(f"parameter {name!r}: values must be a non-empty list")
    if any(k in spec and not number(spec[k]) for k in ("min", "max", "q")) or (
        number(spec.get("min")) and number(spec.get("max")) and spec["min"] > spec["max"]
    ):
        problems.append(f"parameter {name!r}: min, max and q must be finite numbers, min <= max")
    if "distribution" in spec and not isinstance(spec["distribution"], str):
        problems.append(f"parameter {name!r}: distribution must be a name ({', '.join(DISTRIBUTIONS)})")
    if problems:
        return problems
    try:
        kind = distribution(name, spec)
    except SweepError as exc:
        return [str(exc)]
    if kind not in DISTRIBUTIONS:
        return [f"parameter {name!r}: distribution {kind!r} is not supported here ({', '.join(DISTRIBUTIONS)})"]
    if kind != "constant" and kind != "categorical" and not ("min" in spec and "max" in spec):
        return [f"parameter {name!r}: a {kind} distribution needs min and max"]
    if method == "grid" and kind not in ("constant", "categorical"):
        return [f"parameter {name!r}: grid search needs values, not a {kind} distribution"]
    return [] if kind in ("constant", "categorical") else range_problems(name, spec, kind)


#: the fields of a run's summary line that are no numbers: a sweep's metric never names one
TEXT_FIELDS = ("env", "run_dir", "checkpoint", "metrics", "interrupted")


def check_sweep(sweep: dict[str, Any], method: Any, allow_command: bool = False, allow_code: bool = False) -> dict[str, str]:
    """Refuse a sweep file (one :class:`SweepError` listing every problem) that cannot run: values of the wrong
    type, a command that is not ppo_dict's own (unless ``allow_command``), a parameter only the command line sets,
    a parameter that imports or launches code (unless ``allow_code``). Returns ``{parameter: what it imports or
    launches}`` of those ``allow_code`` lets through (said before the first trial)."""
    problems = []
    if method not in ("grid", "random", "bayes"):
        problems.append(f"method={str(method)[:40]!r}: must be grid, random or bayes")
    metric = sweep.get("metric")
    if not (
        isinstance(metric, dict)
        and isinstance(metric.get("name"), str)
        and metric.get("goal", "minimize") in ("minimize", "maximize")
    ):
        problems.append("metric: needs a name and goal: minimize | maximize")
    elif metric["name"] in TEXT_FIELDS:
        problems.append(
            f"metric: {metric['name']!r} is text in a run's summary, not a number to minimize or maximize "
            "(a logged value such as eval/mean_reward or rollout/ep_rew_mean is)"
        )
    command = sweep.get("command")
    if not (isinstance(command, list) and all(isinstance(c, str) for c in command) and "${args}" in command):
        problems.append("command: must be a list of strings that contains ${args}")
    elif not allow_command and not own_command(command):
        problems.append(
            f"command: {' '.join(command)[:200]} is not ppo_dict's own command (${{interpreter}} -m "
            f"ppo_dict.main_ppo ${{args}}): a sweep file runs another program only when the sweep's command line "
            f"says so (--allow_command)"
        )
    parameters = sweep.get("parameters") or {}
    if not isinstance(parameters, dict):
        problems.append(f"parameters: a {type(parameters).__name__}, not a mapping of names to their values")
        parameters = {}
    effects = {
        str(name): effect for name, spec in parameters.items() for effect in [code_effect(setting_of(name), spec)] if effect
    }
    for name, spec in parameters.items():
        problems += parameter_problems(name, spec, method)
    if not allow_code:
        problems += [
            f"parameter {name!r}: {effect}; a sweep file imports and launches nothing unless the sweep's command "
            f"line says so (--allow_code), or give it to every trial after --"
            for name, effect in effects.items()
        ]
    if problems:
        raise SweepError("cannot run this sweep:\n" + "\n".join(f"  - {p}" for p in problems))
    return effects
