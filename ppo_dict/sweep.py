"""Run a wandb sweep file locally, without a W&B server: ``python -m ppo_dict.sweep sweeps/reacher.yaml --count 8``.

Each trial is the command line a ``wandb agent`` would run for the same sweep file: the file's
``command`` with ``${env}``, ``${interpreter}`` and ``${args}`` expanded by wandb's own
``create_sweep_command`` / ``create_sweep_command_args`` (flags as ``--name=value``). Trials run
one after another as subprocesses; each prints its summary JSON line last, from which the
sweep's ``metric`` is read (``metrics[<name>]``, e.g. ``rollout/ep_rew_mean``). Methods:
``grid`` (every combination of ``values``), ``random`` (numpy, seeded) and ``bayes`` (Optuna's
TPE sampler, if optuna is installed: ``pip install optuna``).
"""
from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import subprocess
import sys
import time
from typing import Any, Iterator, Optional

import numpy as np

from ppo_dict.errors import SweepError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DISTRIBUTIONS = ("constant", "categorical", "uniform", "int_uniform", "log_uniform_values", "q_uniform")


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


def check_sweep(sweep: dict[str, Any], method: str) -> None:
    problems = []
    if method not in ("grid", "random", "bayes"):
        problems.append(f"method={method!r}: must be grid, random or bayes")
    metric = sweep.get("metric") or {}
    if "name" not in metric or metric.get("goal", "minimize") not in ("minimize", "maximize"):
        problems.append("metric: needs a name and goal: minimize | maximize")
    if not isinstance(sweep.get("command"), list) or "${args}" not in sweep["command"]:
        problems.append("command: must be a list that contains ${args}")
    for name, spec in (sweep.get("parameters") or {}).items():
        try:
            kind = distribution(name, spec)
        except SweepError as exc:
            problems.append(str(exc))
            continue
        if kind not in DISTRIBUTIONS:
            problems.append(f"parameter {name!r}: distribution {kind!r} is not supported here ({', '.join(DISTRIBUTIONS)})")
        elif method == "grid" and kind not in ("constant", "categorical"):
            problems.append(f"parameter {name!r}: grid search needs values, not a {kind} distribution")
    if problems:
        raise SweepError("cannot run this sweep:\n" + "\n".join(f"  - {p}" for p in problems))


def sample(name: str, spec: dict[str, Any], rng: np.random.Generator) -> Any:
    """One random draw of a parameter (wandb's random search semantics)."""
    kind = distribution(name, spec)
    if kind == "constant":
        return spec["value"]
    if kind == "categorical":
        return spec["values"][int(rng.integers(len(spec["values"])))]
    lo, hi = spec["min"], spec["max"]
    if kind == "int_uniform":
        return int(rng.integers(lo, hi + 1))
    if kind == "log_uniform_values":
        return float(math.exp(rng.uniform(math.log(lo), math.log(hi))))
    value = float(rng.uniform(lo, hi))
    return round(value / spec.get("q", 1.0)) * spec.get("q", 1.0) if kind == "q_uniform" else value


def suggest(name: str, spec: dict[str, Any], trial: Any) -> Any:
    """The same parameter as an Optuna suggestion (bayes)."""
    kind = distribution(name, spec)
    if kind == "constant":
        return spec["value"]
    if kind == "categorical":
        # Optuna stores categorical choices by value; lists (net_arch) are passed by their index.
        index = trial.suggest_categorical(name, list(range(len(spec["values"]))))
        return spec["values"][index]
    if kind == "int_uniform":
        return trial.suggest_int(name, spec["min"], spec["max"])
    if kind == "q_uniform":
        return trial.suggest_float(name, spec["min"], spec["max"], step=spec.get("q", 1.0))
    return trial.suggest_float(name, spec["min"], spec["max"], log=kind == "log_uniform_values")


def grid(parameters: dict[str, dict[str, Any]]) -> Iterator[dict[str, Any]]:
    names = list(parameters)
    choices = [[spec["value"]] if "value" in spec else list(spec["values"]) for spec in parameters.values()]
    for combination in itertools.product(*choices):
        yield dict(zip(names, combination))


def agent_command(sweep: dict[str, Any], params: dict[str, Any]) -> list[str]:
    """The argv ``wandb agent`` builds for one trial (wandb_agent.Agent._command_run, without the server)."""
    from wandb.sdk.launch.sweeps.utils import create_sweep_command, create_sweep_command_args

    command = create_sweep_command(list(sweep["command"]))
    variables = create_sweep_command_args({"args": {k: {"value": v} for k, v in params.items()}})
    variables["interpreter"] = [sys.executable]  # the agent says "python"; the same interpreter as ours is safer
    variables["program"] = [str(sweep.get("program", ""))]
    variables["env"] = ["/usr/bin/env"]
    argv: list[str] = []
    for chunk in map(str, command):
        argv += (variables.get(chunk[2:-1]) or []) if chunk.startswith("${") and chunk.endswith("}") else [chunk]
    return argv


def run_trial(argv: list[str], timeout: float) -> tuple[Optional[dict[str, Any]], str]:
    """``(summary JSON, error text)`` of one trial; the summary is the last stdout line."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH", "")) if p)}
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return None, f"timed out after {timeout:.0f} s"
    lines = proc.stdout.strip().splitlines()
    try:
        return json.loads(lines[-1]), ""
    except (IndexError, json.JSONDecodeError):
        return None, f"exit {proc.returncode}: {(proc.stderr.strip().splitlines() or ['no output'])[-1]}"


def metric_value(summary: Optional[dict[str, Any]], name: str) -> float:
    if summary is None:
        return math.nan
    value = summary.get("metrics", {}).get(name, summary.get(name))
    return math.nan if value is None else float(value)


def format_table(rows: list[dict[str, Any]], names: list[str], metric: str) -> str:
    header = ["trial", *names, metric, "status"]
    body = [[str(r["trial"]), *(str(r["params"].get(n, "")) for n in names), f"{r['value']:.4g}", r["status"]] for r in rows]
    widths = [max(len(h), *(len(b[i]) for b in body)) for i, h in enumerate(header)] if body else [len(h) for h in header]
    lines = ["  ".join(c.ljust(w) for c, w in zip(header, widths)), "  ".join("-" * w for w in widths)]
    lines += ["  ".join(c.ljust(w) for c, w in zip(b, widths)) for b in body]
    return "\n".join(lines)


def run_sweep(sweep: dict[str, Any], count: int, method: str, out: str, extra: list[str], seed: int = 0,
              timeout: float = 3600.0) -> list[dict[str, Any]]:
    """Run up to ``count`` trials; returns one row per trial (params, metric value, status, argv)."""
    check_sweep(sweep, method)
    parameters: dict[str, dict[str, Any]] = sweep.get("parameters") or {}
    metric, maximize = sweep["metric"]["name"], sweep["metric"].get("goal", "minimize") == "maximize"
    rng = np.random.default_rng(seed)
    study = None
    if method == "bayes":
        try:
            import optuna
        except ImportError as exc:
            raise SweepError("method bayes needs optuna: pip install optuna") from exc
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        study = optuna.create_study(direction="maximize" if maximize else "minimize", sampler=optuna.samplers.TPESampler(seed=seed))
    grid_points = grid(parameters) if method == "grid" else None
    rows: list[dict[str, Any]] = []
    for trial_index in range(count):
        trial = None
        if grid_points is not None:
            params = next(grid_points, None)
            if params is None:
                break  # the grid is exhausted
        elif study is not None:
            trial = study.ask()
            params = {name: suggest(name, spec, trial) for name, spec in parameters.items()}
        else:
            params = {name: sample(name, spec, rng) for name, spec in parameters.items()}
        argv = agent_command(sweep, params) + list(extra) + ["--run_dir", os.path.join(out, f"trial_{trial_index:03d}")]
        started = time.time()
        summary, error = run_trial(argv, timeout)
        value = metric_value(summary, metric)
        if study is not None and trial is not None:
            if math.isnan(value):
                study.tell(trial, state=optuna.trial.TrialState.FAIL)
            else:
                study.tell(trial, value)
        status = error or (f"ok {time.time() - started:.0f}s" if not math.isnan(value) else f"no {metric} logged")
        rows.append({"trial": trial_index, "params": params, "value": value, "status": status, "argv": argv})
        print(f"trial {trial_index}: {metric}={value:.4g} ({status})", flush=True)
    return rows


def best(rows: list[dict[str, Any]], maximize: bool) -> Optional[dict[str, Any]]:
    scored = [r for r in rows if not math.isnan(r["value"])]
    if not scored:
        return None
    return (max if maximize else min)(scored, key=lambda r: r["value"])


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ppo_dict.sweep", description=__doc__.splitlines()[0],
                                     epilog="Arguments after -- go to every trial, e.g. -- --total_timesteps 20000")
    parser.add_argument("sweep_file")
    parser.add_argument("--count", type=int, default=10, help="trials to run (grid: at most the grid's size)")
    parser.add_argument("--method", choices=("grid", "random", "bayes"), help="override the file's method")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random/bayes search itself")
    parser.add_argument("--out", default=None, help="folder for the trials' run directories (default: runs/sweep-<time>)")
    parser.add_argument("--timeout", type=float, default=3600.0, help="seconds one trial may take")
    args, extra = parser.parse_known_args(argv)
    extra = [a for a in extra if a != "--"]
    import yaml

    with open(args.sweep_file) as f:
        sweep = yaml.safe_load(f)
    method = args.method or sweep.get("method", "random")
    out = args.out or os.path.join("runs", f"sweep-{time.strftime('%Y%m%d-%H%M%S')}")
    try:
        rows = run_sweep(sweep, args.count, method, out, extra, args.seed, args.timeout)
    except SweepError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    metric, maximize = sweep["metric"]["name"], sweep["metric"].get("goal") == "maximize"
    names = list(sweep.get("parameters") or {})
    print(format_table(rows, names, metric))
    top = best(rows, maximize)
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "results.json"), "w") as f:
        json.dump({"metric": metric, "goal": "maximize" if maximize else "minimize", "trials": rows, "best": top}, f, indent=2)
    if top is None:
        print(f"no trial logged {metric}", file=sys.stderr)
        return 1
    print(f"best: trial {top['trial']} {metric}={top['value']:.4g} {json.dumps(top['params'])}")
    print(json.dumps({"best_trial": top["trial"], "best_value": top["value"], "best_params": top["params"], "results": os.path.join(out, "results.json")}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
