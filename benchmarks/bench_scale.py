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

``--emulate`` stands in for a many-core host on any host: every env sleeps ``--step_us`` a step and
uses no CPU (``PPODictZeroWork-v0`` with ``step_us``), so W worker processes of E such envs step as
W cores would, and what the pipeline itself costs per step (the main process's policy step and
bookkeeping, waking the workers, waiting) is what keeps the rate below the ideal, W x one such env's
rate (measured in the same interleaved rounds). Exact and ``--double_buffer`` rows at W = 4, 16, 32::

    python benchmarks/bench_scale.py --emulate [--workers 4,16,32] [--envs_per_worker 16] [--step_us 150]

``--parts`` measures the parts of a many-core host's rollout step here (the main process's serial time, one
hand-over, one process's policy rows and books, one process stepping E envs, one env alone) and prints the
efficiency they predict at 16 x 16 and 64 x 16 envs, exact (sharded and central) and ``--double_buffer``
(``benchmarks/bench_parts.py``)::

    python benchmarks/bench_scale.py --parts [--env_ids Reacher-v5]

``--main_step`` measures the main process's own work per rollout step, in parts, at 64, 256 and 1024
envs of ``--env_ids``' first env (its ``time/*`` figures: policy, bookkeeping before the next step,
bookkeeping overlapped with the workers' stepping), beside the floor of its policy part: the same
policy step replayed alone on the step's observations, one thread::

    python benchmarks/bench_scale.py --main_step [--env_ids Reacher-v5] [--envs 64,256,1024]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import textwrap
import time
import warnings
from typing import Optional

import numpy as np
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv  # noqa: E402

from benchmarks.bench import ours_config, ours_contender, raw_env, sb3_contender  # noqa: E402
from benchmarks.harness import (  # noqa: E402
    Contender,
    Table,
    add_log_flags,
    interleave,
    log_path,
    machine_line,
    machine_times,
    ratio_text,
)
from ppo_dict.core.config import physical_cores  # noqa: E402
from ppo_dict.core.machine import usable_cpus  # noqa: E402

MODES = {"exact": {}, "double_buffer": {"double_buffer": True}}
DEFAULT = -1  # in --workers: the layout ppo_dict chooses itself ("default")


def default_workers() -> str:
    """1, 2, 4, ... below the physical cores, one less than them (the main process takes one), and the
    layout ppo_dict chooses."""
    cores = physical_cores()
    counts = [w for w in (1, 2, 4, 8, 16, 32, 64) if w < cores] + [max(1, cores - 1)]
    return ",".join(str(w) for w in sorted(set(counts))) + ",default"


def layout(n_envs: int, workers: int) -> int:
    """The env count nearest ``n_envs`` that ``workers`` divide (at least one env each)."""
    return workers * max(1, round(n_envs / workers))


def measure(
    table: Table, env_id: str, n_envs: int, workers: list[int], modes: list[str], sb3: bool, rounds: int, n_steps: int
) -> tuple[float, dict[str, list[tuple[int, float]]]]:
    """The rows of one env id and env count; returns the raw rate and ``{mode: [(workers, steps/s)]}`` for the plot.
    The raw env runs in the same interleaved rounds as the rest, so a busy minute lowers both."""
    raw = raw_env(n_steps * 16, env_id)
    contenders: list[tuple[Optional[str], int, Contender]] = [("raw", 0, raw)]
    for mode in modes:
        for w in workers:
            if w == DEFAULT:  # the layout ppo_dict chooses for n_envs on this host, against every usable CPU
                cfg = ours_config(n_envs, None, "cpu", env_id=env_id, n_steps=n_steps, **MODES[mode])  # type: ignore[arg-type]
                name = f"ppo_dict, default layout ({cfg.layout().text()}), {mode}"
                contenders.append((mode, usable_cpus(), ours_contender(name, cfg, training=False)))
                continue
            n = layout(n_envs, w)
            cfg = ours_config(n, w, "cpu", env_id=env_id, n_steps=n_steps, **MODES[mode])
            contenders.append(
                (
                    mode,
                    w,
                    ours_contender(f"ppo_dict, {w} worker{'s' if w > 1 else ''} x {n // w} envs, {mode}", cfg, training=False),
                )
            )
    if sb3:
        for name, cls in (("sb3 DummyVecEnv", DummyVecEnv), ("sb3 SubprocVecEnv (one process per env)", SubprocVecEnv)):
            contenders.append(
                (None, 0, sb3_contender(name, cls, n_envs, "cpu", training=False, env_id=env_id, n_steps=n_steps))
            )
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
            table.row(
                setting,
                f"rollout, {c.name}",
                f"{c.rate:.0f} steps/s, {c.cpu:.0f} CPU-us/step; efficiency {c.rate / linear:.2f} "
                f"({w} x raw {raw_rate:.0f} steps/s = {linear:.0f})",
                f"vs {best_sb3.name}" if best_sb3 else "",
                ratio_text(c, best_sb3) if best_sb3 else "",
            )
    finally:
        for _, _, c in contenders:
            c.close()
    return raw_rate, curves


def emulated(
    table: Table, workers: list[int], envs_per_worker: int, step_us: float, modes: list[str], rounds: int, n_steps: int
) -> None:
    """The emulated-scale rows: W workers x ``envs_per_worker`` sleeping envs, exact and double-buffered,
    each against W x one such env's rate, with the main process's work per step (its time/* figures)."""
    from ppo_dict.envs import zero_work

    kwargs = dict(obs_dim=11, action_dim=2, episode_length=50, step_us=step_us)  # Reacher-v5's sizes and time limit
    env = zero_work.ZeroWorkEnv(**kwargs)
    env.reset(seed=0)
    action = np.zeros(env.action_space.shape, np.float32)

    def one_env() -> int:
        for _ in range(n_steps * 4):
            if env.step(action)[3]:
                env.reset()
        return n_steps * 4

    raw = Contender(f"one env asleep {step_us:g} us a step, in this process", one_env)
    contenders: list[tuple[str, int, Contender]] = []
    for mode in modes:
        for w in workers:
            cfg = ours_config(
                w * envs_per_worker,
                w,
                "cpu",
                env_id=zero_work.GYM_ID,
                n_steps=n_steps,
                gym_packages=(zero_work.MODULE,),
                env_kwargs=kwargs,
                **MODES[mode],
            )
            contenders.append(
                (mode, w, ours_contender(f"ppo_dict, {w} workers x {envs_per_worker} envs, {mode}", cfg, training=False))
            )
    setting = (
        f"emulated cores: envs asleep {step_us:g} us a step (no CPU), obs 11, action 2, episodes of 50, "
        f"MLP 64x64 on the CPU, n_steps {n_steps}, rollouts"
    )
    try:
        interleave([raw] + [c for _, _, c in contenders], rounds, warmup=True)
        table.row(setting, raw.name, f"{raw.rate:.0f} steps/s ({1e6 / raw.rate:.0f} us a step)")
        for mode, w, c in contenders:
            model = c.model  # type: ignore[attr-defined]
            logs, ideal = model.timing.logs(model.pool.num_envs), w * raw.rate
            processes = model.pool.layout.processes
            # a step's commands (double-buffered: two, one per half) over every round, its warm-up and reset included
            sending = model.pool.sending * 1e6 / max(model.timing.steps, 1)
            table.row(
                setting,
                f"rollout, {c.name}",
                f"{c.rate:.0f} steps/s, {c.cpu:.1f} CPU-us/step; efficiency {c.rate / ideal:.2f} ({w} x {raw.rate:.0f} "
                f"= {ideal:.0f}); main process per step: policy {logs['time/policy_us']:.0f} us + bookkeeping "
                f"{logs['time/bookkeeping_us']:.0f} us (+ {logs['time/overlapped_us']:.0f} us overlapped), "
                f"envs and waiting {logs['time/envs_us']:.0f} us, of which handing the step to {processes} worker "
                f"processes {sending:.0f} us ({sending / max(processes, 1):.0f} us each)",
            )
    finally:
        env.close()
        for _, _, c in contenders:
            c.close()


def policy_floor(model, rounds: int, evict: Optional[np.ndarray] = None) -> float:
    """Microseconds of one exact policy step replayed alone (:class:`~ppo_dict.algo.rollout.rollout_step.PolicyStep`
    on the rollout's first observations, writing into the storage's rows, as a rollout step does): the
    median over ``rounds`` rounds of 50 calls. ``evict``: an array written over before each call (its
    data caches cold, as after stepping envs), each call timed alone."""
    collector = model.collector
    step, obs = collector.policy_steps[collector.n_envs], collector.step_obs(0)
    out = tuple(rows[0] for rows in collector.out)
    times, clock = [], time.perf_counter
    for _ in range(rounds):
        spent = 0.0
        for _ in range(50):
            if evict is not None:
                evict += 1.0
            started = clock()
            step(obs, out=out)
            spent += clock() - started
        times.append(spent / 50 * 1e6)
    return statistics.median(times)


#: Bytes written over before each call of the data-cold policy floor: more than a core's L2 cache.
EVICT_BYTES = 8 << 20


def main_step(table: Table, env_id: str, env_counts: list[int], rounds: int, n_steps: int) -> None:
    """The main process's own work per rollout step at each env count (exact rollouts on the default
    layout), in parts, beside the floor of its policy part; the floor is measured in the same rounds."""
    for n_envs in env_counts:
        cfg = ours_config(n_envs, None, "cpu", env_id=env_id, n_steps=n_steps)  # type: ignore[arg-type]
        c = ours_contender(f"ppo_dict, {n_envs} envs, exact, default layout", cfg, training=False)
        floors: list[float] = []
        cold: list[float] = []
        evict = np.zeros(EVICT_BYTES // 8)
        try:
            c.run()
            timing = c.model.timing  # type: ignore[attr-defined]
            for _ in range(rounds):
                for name in ("policy", "envs", "bookkeeping", "overlapped", "steps"):
                    setattr(timing, name, 0)
                c.once()
                floors.append(policy_floor(c.model, 3))  # type: ignore[attr-defined]
                cold.append(policy_floor(c.model, 3, evict))  # type: ignore[attr-defined]
            logs, floor = timing.logs(n_envs), statistics.median(floors)
            serial = logs["time/policy_us"] + logs["time/bookkeeping_us"]
            table.row(
                f"{env_id}, {n_envs} envs ({cfg.layout().processes} worker processes), MLP 64x64, n_steps {n_steps}, "
                "exact rollouts",
                "the main process per step: policy + bookkeeping before the next step (+ bookkeeping overlapped with "
                "the workers' step)",
                f"{serial:.0f} us = {logs['time/policy_us']:.0f} + {logs['time/bookkeeping_us']:.0f} (+ "
                f"{logs['time/overlapped_us']:.0f}); envs and waiting {logs['time/envs_us']:.0f} us; "
                f"{c.rate:.0f} steps/s",
                f"the policy step replayed alone: {floor:.0f} us (after writing {EVICT_BYTES >> 20} MB: "
                f"{statistics.median(cold):.0f} us)",
                f"{serial / floor:.2f}x the floor, target <= 1.25",
            )
        finally:
            c.close()


def plot(
    path: str, title: str, raw_rates: dict[str, float], curves: dict[tuple[str, int, str], list[tuple[int, float]]]
) -> None:
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
        ax.plot(
            [0, largest], [0, largest * raw_rates[env_id]], color="gray", linestyle=":", label="linear: workers x one raw env"
        )
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
    parser.add_argument(
        "--workers",
        default=default_workers(),
        help="worker counts, comma-separated, or 'default' for the layout ppo_dict "
        "chooses (default: 1, 2, 4, ..., the physical cores - 1, and default)",
    )
    parser.add_argument(
        "--modes", default="exact,double_buffer", help=f"rollout modes, comma-separated, of {', '.join(MODES)}"
    )
    parser.add_argument("--sb3", action="store_true", help="also sb3's PPO on DummyVecEnv and SubprocVecEnv at each env count")
    parser.add_argument("--n_steps", type=int, default=128, help="rollout length per env")
    parser.add_argument("--plot", default=os.path.join(ROOT, "perf_scale.png"), help="the PNG of throughput against workers")
    parser.add_argument(
        "--emulate",
        action="store_true",
        help="emulated cores: envs that sleep --step_us a step (W workers x --envs_per_worker)",
    )
    parser.add_argument("--envs_per_worker", type=int, default=16, help="with --emulate: envs each worker steps")
    parser.add_argument("--step_us", type=float, default=150.0, help="with --emulate: microseconds each env step sleeps")
    parser.add_argument(
        "--main_step",
        action="store_true",
        help="the main process's work per step in parts at --envs (default 64,256,1024), beside its floor",
    )
    parser.add_argument(
        "--parts",
        action="store_true",
        help="the parts model: a many-core host's efficiency predicted from parts measured here",
    )
    args = parser.parse_args()
    modes = args.modes.split(",")
    if not all(w == "default" or w.lstrip("-").isdigit() for w in args.workers.split(",")):
        parser.error(f"--workers {args.workers}: worker counts or 'default', comma-separated")
    workers = [DEFAULT if w == "default" else int(w) for w in args.workers.split(",")]
    problems = [f"--modes {m}: one of {', '.join(MODES)}" for m in modes if m not in MODES]
    problems += [f"--workers {w}: at least 1" for w in workers if w < 1 and w != DEFAULT] + (
        ["--n_steps: at least 2"] if args.n_steps < 2 else []
    )
    if problems:
        parser.error("; ".join(problems))
    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)
    rounds = 1 if args.quick else 3
    started, table = machine_times(), Table()
    command = "python benchmarks/bench_scale.py " + " ".join(sys.argv[1:])
    if args.emulate or args.main_step or args.parts:
        if args.parts:
            from benchmarks.bench_parts import parts

            parts(table, args.env_ids.split(",")[0], rounds)
        if args.emulate:
            emulated(
                table,
                [4, 16, 32] if "--workers" not in sys.argv else workers,
                args.envs_per_worker,
                args.step_us,
                modes,
                rounds,
                64,
            )
        if args.main_step:
            envs = [64, 256, 1024] if "--envs" not in sys.argv else [int(n) for n in args.envs.split(",")]
            main_step(table, args.env_ids.split(",")[0], envs, rounds, 64)
        table.write("bench_scale", command.strip(), started, log=log_path(args))
        return
    raw_rates: dict[str, list[float]] = {}
    curves: dict[tuple[str, int, str], list[tuple[int, float]]] = {}
    for env_id in args.env_ids.split(","):
        for n_envs in (int(n) for n in args.envs.split(",")):
            raw_rate, by_mode = measure(table, env_id, n_envs, workers, modes, args.sb3, rounds, args.n_steps)
            raw_rates.setdefault(env_id, []).append(raw_rate)
            for mode, points in by_mode.items():
                curves[(env_id, n_envs, mode)] = points
    table.write("bench_scale", command.strip(), started, log=log_path(args))
    if args.plot:
        plot(
            args.plot,
            f"{command.strip()}: {machine_line()}",
            {env: statistics.median(rates) for env, rates in raw_rates.items()},
            curves,
        )


if __name__ == "__main__":
    main()
