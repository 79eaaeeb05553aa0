"""A wandb sweep file, read and checked before any trial runs: what it may decide and what it may not.

A sweep file (wandb's format: ``method``, ``metric``, ``command``, ``parameters``) is read as YAML values
(aliases bounded: ``ppo_dict.interop.hyperparams.read_yaml``), from a regular file of a sweep file's size,
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
from ppo_dict.core.file_effects import COMMAND_LINE_ONLY
from ppo_dict.core.reading import MiB, read_capped

DISTRIBUTIONS = ("constant", "categorical", "uniform", "int_uniform", "log_uniform_values", "q_uniform")
#: the most bytes a sweep file holds (a few KiB: a method, a metric, a command and its parameters)
MAX_SWEEP_BYTES = 1 * MiB


def read_sweep_file(path: str) -> dict[str, Any]:
    """The sweep file at ``path`` as a mapping (not yet checked: :func:`check_sweep`); :class:`SweepError` says
    why it cannot be read."""
    import yaml

    from ppo_dict.interop.hyperparams import read_yaml

    try:
        sweep = read_yaml(read_capped(path, MAX_SWEEP_BYTES, "a sweep file"))  # a regular file only: a FIFO is not waited on
    except OSError as exc:
        raise SweepError(f"cannot read {path}: {exc}") from exc
    except (yaml.YAMLError, ValueError, RecursionError) as exc:
        raise SweepError(f"{path}: not a sweep file: {exc}") from exc
    if not isinstance(sweep, dict):
        raise SweepError(f"{path}: a sweep file is a mapping (method, metric, command, parameters), not {type(sweep).__name__}")
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
OWN_COMMANDS = tuple(["${interpreter}", "-m", module, "${args}"] for module in ("ppo_dict.main_ppo", "ppo_dict.main_ppo_godot"))


def own_command(command: Any) -> bool:
    """Whether ``command`` (a sweep file's) runs ppo_dict's own command line: ``${interpreter} -m ppo_dict.main_ppo ${args}``."""
    return isinstance(command, list) and (command[1:] if command[:1] == ["${env}"] else command) in OWN_COMMANDS


def parameter_problems(name: Any, spec: Any, method: Any) -> list[str]:
    """What is wrong with one parameter of a sweep file: a setting only the command line gives, a spec that is
    not a mapping of wandb's keys with values of their types, a distribution not supported here."""
    if name in COMMAND_LINE_ONLY:
        return [f"parameter {name!r}: set on the command line only (docs/safety.md), never by a sweep file; to give it to "
                f"every trial, pass it after --"]
    if not isinstance(spec, dict):
        return [f"parameter {name!r}: a {type(spec).__name__}, not a mapping (value, values, or min and max)"]
    number = lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)  # noqa: E731
    problems = []
    if "values" in spec and not (isinstance(spec["values"], list) and spec["values"]):
        problems.append(f"parameter {name!r}: values must be a non-empty list")
    if any(k in spec and not number(spec[k]) for k in ("min", "max", "q")) or (number(spec.get("min")) and number(spec.get("max"))
                                                                               and spec["min"] > spec["max"]):
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
    return []


def check_sweep(sweep: dict[str, Any], method: Any, allow_command: bool = False) -> None:
    """Refuse a sweep file (one :class:`SweepError` listing every problem) that cannot run: values of the wrong
    type, a command that is not ppo_dict's own (unless ``allow_command``), a parameter only the command line sets."""
    problems = []
    if method not in ("grid", "random", "bayes"):
        problems.append(f"method={str(method)[:40]!r}: must be grid, random or bayes")
    metric = sweep.get("metric")
    if not (isinstance(metric, dict) and isinstance(metric.get("name"), str) and metric.get("goal", "minimize") in ("minimize", "maximize")):
        problems.append("metric: needs a name and goal: minimize | maximize")
    command = sweep.get("command")
    if not (isinstance(command, list) and all(isinstance(c, str) for c in command) and "${args}" in command):
        problems.append("command: must be a list of strings that contains ${args}")
    elif not allow_command and not own_command(command):
        problems.append(f"command: {' '.join(command)[:200]} is not ppo_dict's own command (${{interpreter}} -m ppo_dict.main_ppo ${{args}}): "
                        "a sweep file runs another program only when the sweep's command line says so (--allow_command)")
    parameters = sweep.get("parameters") or {}
    if not isinstance(parameters, dict):
        problems.append(f"parameters: a {type(parameters).__name__}, not a mapping of names to their values")
        parameters = {}
    for name, spec in parameters.items():
        problems += parameter_problems(name, spec, method)
    if problems:
        raise SweepError("cannot run this sweep:\n" + "\n".join(f"  - {p}" for p in problems))
