"""Throughput against the worker count: does ppo_dict's rollout grow linearly with the cores?

For each env id and env count, in interleaved rounds: ppo_dict's rollouts (collection and GAE,
MLP 64x64 on the CPU) on 1, 2, 4, ... workers, exact and ``--double_buffer``, beside sb3's PPO on
DummyVecEnv and SubprocVecEnv at the same env count (``--sb3``), and one env stepped in this
process with fixed actions (the raw rate of a core). Efficiency = throughput / (workers x the raw
rate, measured in the same interleaved rounds): 1.0 is linear scaling. Exact rollouts on W >= 2
workers run W processes (the main process steps a worker's share); on 1 worker, and with
``--double_buffer``, the main process runs beside the W workers, so a low worker count can pass
1.0 there. An env count that a worker count does not divide is rounded to the
nearest multiple (256 envs on 15 workers: 255). Rows are appended to perf_log.md and throughput is
drawn against workers, with the linear line, in a PNG beside it (``--plot``).

On a 16-core machine (issue 21's targets: 15 workers, 256 envs, Reacher-v5: exact >= 0.6 of the
linear line, ``--double_buffer`` >= 0.85, >= 8x sb3's best; efficiency >= 0.7 at every worker count)::

    python benchmarks/bench_scale.py --env_ids Reacher-v5 --envs 256 --workers 1,2,4,8,15 --sb3
    python benchmarks/bench_scale.py --env_ids HalfCheetah-v5 --envs 32,128 --workers 1,2,4,8,15

One call per env id and env count keeps a call within a few minutes.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import textwrap
import warnings
from typing import Optional

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv  # noqa: E402

from benchmarks.bench import ours_config, ours_contender, raw_env, sb3_contender  # noqa: E402
from benchmarks.harness import Contender, Table, add_log_flags, interleave, log_path, machine_line, machine_times, ratio_text  # noqa: E402
from ppo_dict.core.config import physical_cores  # noqa: E402

MODES = {"exact": {}, "double_buffer": {"double_buffer": True}}


def default_workers() -> str:
    """1, 2, 4, ... below the physical cores, and one less than them (the main process takes one)."""
    cores = physical_cores()
    counts = [w for w in (1, 2, 4, 8, 16, 32, 64) if w < cores] + [max(1, cores - 1)]
    return ",".join(str(w) for w in sorted(set(counts)))


def layout(n_envs: int, workers: int) -> int:
    """The env count nearest ``n_envs`` that ``workers`` divide (at least one env each)."""
    return workers * max(1, round(n_envs / workers))


def measure(table: Table, env_id: str, n_envs: int, workers: list[int], modes: list[str], sb3: bool, rounds: int,
            n_steps: int) -> tuple[float, dict[str, list[tuple[int, float]]]]:
    """The rows of one env id and env count; returns the raw rate and ``{mode: [(workers, steps/s)]}`` for the plot.
    The raw env runs in the same interleaved rounds as the rest, so a busy minute lowers both."""
    raw = raw_env(n_steps * 16, env_id)
    contenders: list[tuple[Optional[str], int, Contender]] = [("raw", 0, raw)]
    for mode in modes:
        for w in workers:
            n = layout(n_envs, w)
            cfg = ours_config(n, w, "cpu", env_id=env_id, n_steps=n_steps, **MODES[mode])
            contenders.append((mode, w, ours_contender(f"ppo_dict, {w} worker{'s' if w > 1 else ''} x {n // w} envs, {mode}", cfg, training=False)))
    if sb3:
        for name, cls in (("sb3 DummyVecEnv", DummyVecEnv), ("sb3 SubprocVecEnv (one process per env)", SubprocVecEnv)):
            contenders.append((None, 0, sb3_contender(name, cls, n_envs, "cpu", training=False, env_id=env_id, n_steps=n_steps)))
    curves: dict[str, list[tuple[int, float]]] = {mode: [] for mode in modes}
    try:
        interleave([c for _, _, c in contenders], rounds, warmup=True)
        raw_rate = raw.rate
        sb3_sides = [c for mode, _, c in contenders if mode is None]
        best_sb3 = max(sb3_sides, key=lambda c: c.rate) if sb3_sides else None
        setting = f"{env_id}, {n_envs} envs, MLP 64x64 on the CPU, n_steps {n_steps}, rollouts"
        table.row(setting, "raw: one env stepped in this process, fixed actions, no policy", f"{raw_rate:.0f} steps/s")
        for c in sb3_sides:
            table.row(setting, f"rollout, {c.name}", f"{c.rate:.0f} steps/s, {c.cpu:.0f} CPU-us/step")
        for mode, w, c in contenders:
            if mode not in MODES:
                continue
            curves[mode].append((w, c.rate))
            linear = w * raw_rate
            table.row(setting, f"rollout, {c.name}", f"{c.rate:.0f} steps/s, {c.cpu:.0f} CPU-us/step; efficiency {c.rate / linear:.2f} "
                      f"({w} x raw {raw_rate:.0f} steps/s = {linear:.0f})",
                      f"vs {best_sb3.name}" if best_sb3 else "", ratio_text(c, best_sb3) if best_sb3 else "")
    finally:
        for _, _, c in contenders:
            c.close()
    return raw_rate, curves


def plot(path: str, title: str, raw_rates: dict[str, float], curves: dict[tuple[str, int, str], list[tuple[int, float]]]) -> None:
    """Throughput against workers, one panel per env id, with each env's linear line (workers x raw)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    env_ids = list(raw_rates)
    fig, axes = plt.subplots(1, len(env_ids), figsize=(6 * len(env_ids), 4.5), squeeze=False)
    for ax, env_id in zip(axes[0], env_ids):
        largest = 1
        for (curve_env, n_envs, mode), points in curves.items():
            if curve_env != env_id or not points:
                continue
            ws, rates = zip(*points)
            largest = max(largest, *ws)
            ax.plot(ws, rates, marker="o", linestyle="-" if mode == "exact" else "--", label=f"{n_envs} envs, {mode}")
        ax.plot([0, largest], [0, largest * raw_rates[env_id]], color="gray", linestyle=":", label="linear: workers x one raw env")
        ax.set(title=env_id, xlabel="workers", ylabel="env steps/s", xlim=(0, largest + 0.5), ylim=(0, None))
        ax.legend(fontsize=8)
    fig.suptitle("\n".join(textwrap.wrap(title, 110)), fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    print(f"plot: {path}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_log_flags(parser)
    parser.add_argument("--quick", action="store_true", help="one round instead of three (a smoke run)")
    parser.add_argument("--env_ids", default="Reacher-v5,HalfCheetah-v5", help="gymnasium env ids, comma-separated")
    parser.add_argument("--envs", default="32,128,256", help="env counts, comma-separated")
    parser.add_argument("--workers", default=default_workers(), help="worker counts, comma-separated (default: 1, 2, 4, ... and the physical cores - 1)")
    parser.add_argument("--modes", default="exact,double_buffer", help=f"rollout modes, comma-separated, of {', '.join(MODES)}")
    parser.add_argument("--sb3", action="store_true", help="also sb3's PPO on DummyVecEnv and SubprocVecEnv at each env count")
    parser.add_argument("--n_steps", type=int, default=128, help="rollout length per env")
    parser.add_argument("--plot", default=os.path.join(ROOT, "perf_scale.png"), help="the PNG of throughput against workers")
    args = parser.parse_args()
    modes, workers = args.modes.split(","), [int(w) for w in args.workers.split(",")]
    problems = [f"--modes {m}: one of {', '.join(MODES)}" for m in modes if m not in MODES]
    problems += [f"--workers {w}: at least 1" for w in workers if w < 1] + (["--n_steps: at least 2"] if args.n_steps < 2 else [])
    if problems:
        parser.error("; ".join(problems))
    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)
    rounds = 1 if args.quick else 3
    started, table = machine_times(), Table()
    raw_rates: dict[str, list[float]] = {}
    curves: dict[tuple[str, int, str], list[tuple[int, float]]] = {}
    for env_id in args.env_ids.split(","):
        for n_envs in (int(n) for n in args.envs.split(",")):
            raw_rate, by_mode = measure(table, env_id, n_envs, workers, modes, args.sb3, rounds, args.n_steps)
            raw_rates.setdefault(env_id, []).append(raw_rate)
            for mode, points in by_mode.items():
                curves[(env_id, n_envs, mode)] = points
    command = "python benchmarks/bench_scale.py " + " ".join(sys.argv[1:])
    table.write("bench_scale", command.strip(), started, log=log_path(args))
    if args.plot:
        plot(args.plot, f"{command.strip()}: {machine_line()}", {env: statistics.median(rates) for env, rates in raw_rates.items()}, curves)


if __name__ == "__main__":
    main()
