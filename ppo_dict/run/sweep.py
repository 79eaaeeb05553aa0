"""A sweep's trials on an Optuna study: each trial's command as wandb's agent builds it, run as a subprocess, its metric
read back (``python -m ppo_dict.sweep`` is the command line; ``sweep_file`` reads and checks the file, ``study`` holds
the storage and its crashed trials).

Each trial is the command line a ``wandb agent`` would run for the same sweep file: the file's ``command`` with ``${env}``,
``${interpreter}`` and ``${args}`` expanded by wandb's own ``create_sweep_command`` / ``create_sweep_command_args``
(flags as ``--name=value``), run as a subprocess that prints its summary JSON line last, from which the sweep's
``metric`` is read (``metrics[<name>]``). Every method is an Optuna sampler, so every method shares one storage:
``grid`` (``GridSampler``), ``random`` (``RandomSampler``) and ``bayes`` (``TPESampler``). A stop signal, once the
study runs (:func:`install_stop_handlers`), stops the running trials and queues them again.
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import threading
import time
from typing import Any, Optional

from ppo_dict.core.errors import SweepError
from ppo_dict.core.reading import UnreadableFile, read_capped
from ppo_dict.envs.godot.game import die_with_parent
from ppo_dict.run import startup
from ppo_dict.run.study import OUTCOME, OWNER, default_storage, join_study, open_storage, recover, redact, retry, this_process
from ppo_dict.run.sweep_file import check_sweep, distribution, own_command

#: the repository's root, put on each trial's PYTHONPATH so that ``-m ppo_dict.main_ppo`` finds this checkout
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

#: seconds a trial may take to stop after SIGTERM (ppo_dict finishes its update and checkpoints) before SIGKILL
STOP_GRACE = 60.0


def suggest(name: str, spec: dict[str, Any], trial: Any) -> Any:
    """One parameter drawn by the study's sampler (wandb's distributions in Optuna's terms)."""
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


def make_sampler(method: str, parameters: dict[str, dict[str, Any]], seed: Optional[int]) -> Any:
    """The Optuna sampler of a wandb method; grid search walks the categorical parameters' indices."""
    import optuna

    if method == "grid":
        space = {n: list(range(len(s["values"]))) for n, s in parameters.items() if distribution(n, s) == "categorical"}
        return optuna.samplers.GridSampler(space, seed=seed)
    if method == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    return optuna.samplers.TPESampler(seed=seed)


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


class TrialProcesses:
    """The trial subprocesses running now, so that a signal to the sweep stops them all.

    Trials run in their own session (a terminal's Ctrl-C reaches the sweep only, which passes
    one SIGTERM on: ppo_dict then checkpoints and exits 143) and get SIGTERM from the kernel if
    the sweep dies without a word (SIGKILL): no trial outlives its sweep.
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.running: set[subprocess.Popen] = set()
        self.stopping = False
        self.signum: Optional[int] = None  # the signal that stopped the sweep

    def run(self, argv: list[str], timeout: float) -> tuple[Optional[dict[str, Any]], str, bool]:
        """``(summary JSON, error text, interrupted)`` of one trial; the summary is the last stdout line."""
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH", "")) if p)}
        proc = subprocess.Popen(
            argv,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            start_new_session=True,
            preexec_fn=die_with_parent(signal.SIGTERM),
        )
        with self.lock:
            self.running.add(proc)
        try:
            stdout, stderr = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self._end(proc)
            return None, f"timed out after {timeout:.0f} s", False
        except KeyboardInterrupt:  # n_jobs=1: the signal handler interrupted this wait; the trial was sent SIGTERM
            self._end(proc)
            raise
        finally:
            with self.lock:
                self.running.discard(proc)
        # 130/143: ppo_dict stopped by SIGINT/SIGTERM; negative: killed by a signal. Not the trial's own failure.
        interrupted = self.stopping or proc.returncode < 0 or proc.returncode in (130, 143)
        lines = stdout.strip().splitlines()
        try:
            return json.loads(lines[-1]), "", interrupted
        except (IndexError, json.JSONDecodeError):
            return None, f"exit {proc.returncode}: {(stderr.strip().splitlines() or ['no output'])[-1]}", interrupted

    @staticmethod
    def _end(proc: subprocess.Popen) -> None:
        proc.terminate()
        try:
            proc.communicate(timeout=STOP_GRACE)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()

    def stop(self, sig: int = signal.SIGTERM) -> None:
        """Send ``sig`` to every running trial; no new trial starts after this."""
        self.stopping = True
        with self.lock:
            for proc in self.running:
                proc.send_signal(sig)


class TrialFailed(Exception):
    """A trial ended without its metric (Optuna records it as FAIL; the sweep goes on)."""


def metric_value(summary: Optional[dict[str, Any]], name: str) -> float:
    if summary is None:
        return math.nan
    metrics = summary.get("metrics")
    value = (metrics if isinstance(metrics, dict) else {}).get(name, summary.get(name))
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    return float(value) if number else math.nan  # text, a list, nothing: no metric (the trial fails, named)


def make_objective(sweep: dict[str, Any], out: str, extra: list[str], timeout: float, trials: TrialProcesses) -> Any:
    """Optuna's objective: draw the parameters, run the trial's command, return its metric."""
    parameters: dict[str, dict[str, Any]] = sweep.get("parameters") or {}
    metric = sweep["metric"]["name"]

    def objective(trial: Any) -> float:
        trial.set_user_attr(OWNER, this_process())  # first: recover() in other processes reads it
        params = {name: suggest(name, spec, trial) for name, spec in parameters.items()}
        run_dir = os.path.join(out, f"trial_{trial.number:04d}")
        argv = agent_command(sweep, params) + list(extra) + ["--run_dir", run_dir]
        trial.set_user_attr("params", params)
        trial.set_user_attr("argv", argv)
        if trials.stopping:
            trial.set_user_attr(OUTCOME, "interrupted")
            raise TrialFailed("the sweep is stopping")
        started = time.time()
        try:
            summary, error, interrupted = trials.run(argv, timeout)
        except KeyboardInterrupt:
            trial.set_user_attr(OUTCOME, "interrupted")
            raise
        value = metric_value(summary, metric)
        trial.set_user_attr("ran", ran_values(run_dir, params))
        trial.set_user_attr("seconds", round(time.time() - started, 1))
        if interrupted or error or math.isnan(value):
            message = "interrupted" if interrupted else error or f"no {metric} logged"
            trial.set_user_attr(OUTCOME, "interrupted" if interrupted else "failed")
            trial.set_user_attr("error", message)
            raise TrialFailed(message)
        trial.set_user_attr(OUTCOME, "ok")
        return value

    return objective


def ran_values(run_dir: str, params: dict[str, Any]) -> dict[str, Any]:
    """The parameters as the trial ran them, from its ``config.json`` (arguments after ``--`` win over the sweep file's:
    ``-- --total_timesteps 8192`` runs 8192 steps whatever the file says); ``{}`` where the trial wrote none."""
    try:
        config = json.loads(read_capped(os.path.join(run_dir, "config.json"), 1 << 20, "a trial's config.json"))
    except (OSError, ValueError, UnreadableFile):
        # no config.json (a trial refused, another program's): the drawn values stand
        return {}
    return {name: config[name] for name in params if isinstance(config, dict) and name in config}


def row(trial: Any) -> dict[str, Any]:
    """One trial of the study as the results table and ``results.json`` show it."""
    attrs, state = trial.user_attrs, trial.state.name.lower()
    if state == "complete":
        status = f"ok {attrs.get('seconds', 0):.0f}s"
    elif state == "fail":
        status = f"failed: {attrs.get('error') or attrs.get(OUTCOME) or 'its process died'}"
    elif state == "running":
        status = f"running ({attrs.get(OWNER, {}).get('host', '?')} pid {attrs.get(OWNER, {}).get('pid', '?')})"
    else:
        status = state + (f" (retry of {trial.system_attrs['failed_trial']})" if "failed_trial" in trial.system_attrs else "")
    params = attrs.get("params", trial.params)
    return {
        "trial": trial.number,
        "params": params,
        "ran": {**params, **attrs.get("ran", {})},
        "value": math.nan if trial.value is None else trial.value,
        "status": status,
        "argv": attrs.get("argv"),
        "host": attrs.get(OWNER, {}).get("host"),
    }


def format_table(rows: list[dict[str, Any]], names: list[str], metric: str) -> str:
    header = ["trial", *names, metric, "status"]
    body = [[str(r["trial"]), *(str(r["ran"].get(n, "")) for n in names), f"{r['value']:.4g}", r["status"]] for r in rows]
    widths = [max(len(h), *(len(b[i]) for b in body)) for i, h in enumerate(header)] if body else [len(h) for h in header]
    lines = ["  ".join(c.ljust(w) for c, w in zip(header, widths)), "  ".join("-" * w for w in widths)]
    lines += ["  ".join(c.ljust(w) for c, w in zip(b, widths)) for b in body]
    return "\n".join(lines)


def import_optuna() -> Any:
    """The ``optuna`` module (seconds to import); :class:`SweepError` saying how to install it."""
    try:
        import optuna
    except ImportError as exc:
        raise SweepError("sweeps run on Optuna: pip install optuna (ppo_dict's sweep extra)") from exc
    return optuna


def run_sweep(
    sweep: dict[str, Any],
    count: int,
    method: str,
    out: str,
    extra: list[str],
    seed: Optional[int] = None,
    timeout: float = 3600.0,
    storage: Optional[str] = None,
    study_name: str = "sweep",
    n_jobs: int = 1,
    trials: Optional[TrialProcesses] = None,
    allow_command: bool = False,
    allow_code: bool = False,
) -> list[dict[str, Any]]:
    """Run up to ``count`` trials of the study (``n_jobs`` at a time); returns one row per trial of
    the whole study, this process's and every other's. ``allow_command``: the sweep file's command may
    be another program than ppo_dict's own; ``allow_code``: its parameters may import or launch code (each
    said in one line before any trial)."""
    for name, effect in check_sweep(sweep, method, allow_command, allow_code).items():
        print(f"--allow_code: the sweep file's parameter {name!r} {effect}", flush=True)
    if not own_command(sweep["command"]):
        print(
            f"--allow_command: each trial runs the sweep file's command, {' '.join(sweep['command'])}, not ppo_dict's own",
            flush=True,
        )
    optuna = import_optuna()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    url = storage or default_storage(out)
    study = join_study(
        open_storage(url, retry), study_name, sweep, method, make_sampler(method, sweep.get("parameters") or {}, seed)
    )
    recover(study, lambda line: print(line, flush=True))
    states = [t.state.name.lower() for t in study.get_trials(deepcopy=False)]
    print(
        f"study {study_name} in {redact(url)}: {len(states)} trials so far "
        f"({', '.join(f'{states.count(s)} {s}' for s in sorted(set(states))) or 'new'}); "
        f"running up to {count} here, {n_jobs} at a time",
        flush=True,
    )
    trials = trials or TrialProcesses()
    metric = sweep["metric"]["name"]

    def after_trial(study: Any, trial: Any) -> None:
        print(f"trial {trial.number}: {metric}={row(trial)['value']:.4g} ({row(trial)['status']})", flush=True)
        if trials.stopping:
            study.stop()

    if count > 0:
        study.optimize(
            make_objective(sweep, out, extra, timeout, trials),
            n_trials=count,
            n_jobs=n_jobs,
            catch=(TrialFailed,),
            callbacks=[after_trial],
        )
    return [row(t) for t in study.get_trials(deepcopy=False)]


def best(rows: list[dict[str, Any]], maximize: bool) -> Optional[dict[str, Any]]:
    scored = [r for r in rows if not math.isnan(r["value"])]
    if not scored:
        return None
    return (max if maximize else min)(scored, key=lambda r: r["value"])


def install_stop_handlers(trials: TrialProcesses) -> dict[int, Any]:
    """SIGINT/SIGTERM/SIGHUP (those :func:`startup.taken_signals` takes): pass SIGTERM to the running trials
    and stop (the trials are queued again on resume); a second signal kills them. Returns the handlers it replaced."""

    def handler(signum: int, frame: Any) -> None:
        trials.signum = trials.signum or signum
        trials.stop(signal.SIGKILL if trials.stopping else signal.SIGTERM)
        raise KeyboardInterrupt

    return {sig: signal.signal(sig, handler) for sig in startup.taken_signals()}


def write_results(rows: list[dict[str, Any]], sweep: dict[str, Any], out: str, study_name: str, storage: Optional[str]) -> int:
    """Print the study's table and best trial, write ``<out>/results.json``; the command line's exit status
    (1: no trial logged the metric)."""
    metric, maximize = sweep["metric"]["name"], sweep["metric"].get("goal") == "maximize"
    print(format_table(rows, list(sweep.get("parameters") or {}), metric))
    top = best(rows, maximize)
    os.makedirs(out, exist_ok=True)
    results = os.path.join(out, "results.json")
    with open(results, "w") as f:
        json.dump(
            {
                "study": study_name,
                "storage": redact(storage or default_storage(out)),
                "metric": metric,
                "goal": "maximize" if maximize else "minimize",
                "trials": rows,
                "best": top,
            },
            f,
            indent=2,
        )
    if top is None:
        print(f"no trial logged {metric}", file=sys.stderr)
        return 1
    print(f"best: trial {top['trial']} {metric}={top['value']:.4g} {json.dumps(top['params'])}")
    print(
        json.dumps({"best_trial": top["trial"], "best_value": top["value"], "best_params": top["params"], "results": results})
    )
    return 0
