"""Learning curves from run directories: ``python -m ppo_dict.plot RUN_DIR [RUN_DIR ...]``.

Reads each run's ``progress.csv`` (and ``evaluations.npz`` if present). Runs of the same env
(several seeds) are drawn as their mean with a band of one standard deviation, each run's curve
interpolated onto a common step grid over the steps all of them reached. Where the runs logged
episode statistics besides the return (``rollout/success_rate``, ``rollout/<key>`` of their
``--info_keywords``), a second panel below shows them.
"""

from __future__ import annotations

import os
import sys
from collections import defaultdict
from typing import Optional

import numpy as np

from ppo_dict.core.files import atomic_write
from ppo_dict.core import bounded
from ppo_dict.core.reading import read_capped
from ppo_dict.run.tracking import STEP, read_csv

KEY = "rollout/ep_rew_mean"
EVAL_KEY = "eval/mean_reward"
SUCCESS_KEY = "rollout/success_rate"
CURVE_FILE = "learning_curve.png"


def load_curve(run_dir: str, key: str = KEY) -> tuple[np.ndarray, np.ndarray]:
    """``(steps: int64[k], values: float64[k])`` of ``key`` in ``run_dir/progress.csv`` (rows that have it)."""
    rows = [r for r in read_csv(os.path.join(run_dir, "progress.csv")) if key in r and STEP in r]
    return np.array([r[STEP] for r in rows], dtype=np.int64), np.array([r[key] for r in rows], dtype=np.float64)


#: the most bytes of a ``config.json`` read (a run's is a few KiB)
MAX_CONFIG_BYTES = 2**20


def run_config(run_dir: str) -> dict:
    """What the plot takes of a run's ``config.json``: its ``env`` (text) and ``info_keywords`` (a list of text), each
    left out where it is not that; empty when the file does not read (a FIFO is not waited on, a file over
    :data:`MAX_CONFIG_BYTES` or nested deeper than JSON data is not parsed)."""
    path = os.path.join(run_dir, "config.json")
    try:
        config = bounded.loads(read_capped(path, MAX_CONFIG_BYTES, "a config.json").decode(), path)
    except (OSError, ValueError):
        return {}
    if not isinstance(config, dict):
        return {}
    keywords = config.get("info_keywords")
    return {
        **({"env": config["env"]} if isinstance(config.get("env"), str) else {}),
        **({"info_keywords": keywords} if isinstance(keywords, list) and all(isinstance(k, str) for k in keywords) else {}),
    }


def run_label(run_dir: str) -> str:
    """The env of a run (from its ``config.json``), else the directory's name."""
    return str(run_config(run_dir).get("env") or os.path.basename(os.path.normpath(run_dir)))


def episode_keys(run_dirs: list[str]) -> list[str]:
    """The episode statistics besides the return that the runs logged: ``rollout/success_rate``
    and ``rollout/<key>`` of their ``info_keywords``."""
    keys = [SUCCESS_KEY] + [f"rollout/{k}" for d in run_dirs for k in run_config(d).get("info_keywords", ())]
    return [key for key in dict.fromkeys(keys) if any(len(load_curve(d, key)[0]) for d in run_dirs)]


def _draw(ax, run_dirs: list[str], key: str, label_key: bool = False) -> int:
    """``key``'s curves on ``ax``, one mean-and-band line per env; returns how many were drawn."""
    groups: dict[str, list[tuple[np.ndarray, np.ndarray]]] = defaultdict(list)
    for run_dir in run_dirs:
        steps, values = load_curve(run_dir, key)
        if len(steps):
            groups[run_label(run_dir)].append((steps, values))
    for label, curves in sorted(groups.items()):
        label = f"{label} {key}" if label_key else label
        if len(curves) == 1:
            ax.plot(*curves[0], label=label)
        else:
            grid, mean, std = mean_and_spread(curves)
            ax.plot(grid, mean, label=f"{label} (mean of {len(curves)} runs, band: ±1 std)")
            ax.fill_between(grid, mean - std, mean + std, alpha=0.25)
    return len(groups)


def mean_and_spread(
    curves: list[tuple[np.ndarray, np.ndarray]], points: int = 200
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(grid, mean, std)`` over runs, on ``points`` steps from the latest first step to the earliest last step."""
    lo = max(int(steps[0]) for steps, _ in curves)
    hi = min(int(steps[-1]) for steps, _ in curves)
    grid = np.linspace(lo, hi, points) if hi > lo else np.array([float(lo)])
    stacked = np.stack([np.interp(grid, steps, values) for steps, values in curves])
    return grid, stacked.mean(axis=0), stacked.std(axis=0)


def plot_runs(run_dirs: list[str], out: str, key: str = KEY, title: Optional[str] = None) -> str:
    """Write a PNG of ``key`` against env steps, one mean-and-band line per env; returns ``out``."""
    labels = sorted({run_label(d) for d in run_dirs if len(load_curve(d, key)[0])})
    if not labels:
        raise ValueError(f"no {key} values in {', '.join(run_dirs)} (progress.csv)")
    # after the check: a run without the values (no episode ended) does not pay matplotlib's import (about 0.5 s)
    from matplotlib.backends.backend_agg import FigureCanvasAgg  # no pyplot: no global figure state
    from matplotlib.figure import Figure

    extra = episode_keys(run_dirs) if key == KEY else []
    fig = Figure(figsize=(7, 7.5 if extra else 4.5))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(2, 1, 1) if extra else fig.add_subplot()
    _draw(ax, run_dirs, key)
    if len(run_dirs) == 1:
        evaluations = os.path.join(run_dirs[0], "evaluations.npz")
        if os.path.exists(evaluations):
            from ppo_dict.run.evaluation import read_evaluations  # (torch and the envs: only for a run that evaluated)

            data = read_evaluations(evaluations)  # checked: a FIFO is not waited on, a file of other arrays is refused
            ax.plot(data["timesteps"], data["results"].mean(axis=1), "o--", label=EVAL_KEY)
    ax.set_xlabel("environment steps")
    ax.set_ylabel(key)
    ax.set_title(title or ", ".join(labels))
    ax.grid(alpha=0.3)
    ax.legend(loc="best", fontsize="small")
    if extra:
        below = fig.add_subplot(2, 1, 2, sharex=ax)
        for name in extra:
            _draw(below, run_dirs, name, label_key=True)
        below.set_xlabel("environment steps")
        below.set_ylabel("episode statistics (mean of the last 100)")
        below.grid(alpha=0.3)
        below.legend(loc="best", fontsize="small")
    fig.tight_layout()
    atomic_write(out, lambda f: fig.savefig(f, format="png", dpi=100))
    return out


def plot_run(run_dir: str) -> str:
    """``run_dir/learning_curve.png`` for one run."""
    return plot_runs([run_dir], os.path.join(run_dir, CURVE_FILE))


def main(argv: Optional[list[str]] = None) -> int:
    from ppo_dict.run.cli import Option, command_parser  # the command line's parts only where it is one (main_ppo plots too)

    parser = command_parser(
        "python -m ppo_dict.plot",
        __doc__,
        [
            Option(
                ("run_dirs",),
                "run directories (several seeds of one env: their mean and spread)",
                kwargs={"nargs": "+", "metavar": "RUN_DIR"},
            ),
            Option(("--out",), "PNG file to write", "learning_curves.png"),
            Option(("--key",), "logged key to plot (e.g. eval/mean_reward, train/value_loss)", KEY),
        ],
    )
    args = parser.parse_args(argv)
    missing = [d for d in args.run_dirs if not os.path.isfile(os.path.join(d, "progress.csv"))]
    if missing:
        print(f"error: no progress.csv in {', '.join(missing)}", file=sys.stderr)
        return 2
    try:
        print(plot_runs(args.run_dirs, args.out, args.key))
    except (ValueError, OSError) as exc:  # OSError: a file of the run that is not read (a FIFO, a directory)
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
