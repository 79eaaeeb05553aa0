"""Side-by-side measurement that survives a noisy machine.

Every contender runs once per round, the rounds interleaved (A B C, B C A, ...), so a slow minute
hits every side alike; a comparison is the median of per-round ratios. Besides wall time each run
reports CPU seconds summed over the contender's processes (this one and its workers) from the
kernel's own accounting (``/proc/<pid>/schedstat``: nanoseconds on a CPU), which contention from
other programs cannot fake.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Callable, Optional

import numpy as np
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def cpu_seconds(pids: list[int]) -> float:
    """CPU seconds spent so far by ``pids`` (all their threads), from /proc/<pid>/schedstat."""
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/schedstat") as f:
                total += int(f.read().split()[0])
        except (OSError, ValueError, IndexError):
            pass
    return total / 1e9


@dataclass
class Contender:
    """Something to time: ``run()`` does one round's work and returns its env steps; ``pids()`` are
    the processes whose CPU time counts (this one and its workers). With ``workers`` (the worker
    processes' pids) each round also records this process's and the workers' CPU apart."""

    name: str
    run: Callable[[], int]
    pids: Callable[[], list[int]] = lambda: [os.getpid()]
    close: Callable[[], None] = lambda: None
    workers: Optional[Callable[[], list[int]]] = None
    rates: list[float] = field(default_factory=list)
    cpu_us_per_step: list[float] = field(default_factory=list)
    cpu_main_us: list[float] = field(default_factory=list)  # per round, with ``workers``: this process
    cpu_workers_us: list[float] = field(default_factory=list)  # per round, with ``workers``: the workers

    def once(self) -> None:
        pids = self.pids()
        worker_pids = self.workers() if self.workers is not None else []
        cpu, wall = cpu_seconds(pids), time.perf_counter()
        main, workers = cpu_seconds([os.getpid()]), cpu_seconds(worker_pids)
        steps = self.run()
        wall, cpu = time.perf_counter() - wall, cpu_seconds(pids) - cpu
        self.rates.append(steps / wall)
        self.cpu_us_per_step.append(cpu / steps * 1e6)
        if self.workers is not None:
            self.cpu_main_us.append((cpu_seconds([os.getpid()]) - main) / steps * 1e6)
            self.cpu_workers_us.append((cpu_seconds(worker_pids) - workers) / steps * 1e6)

    @property
    def rate(self) -> float:
        return statistics.median(self.rates)

    @property
    def cpu(self) -> float:
        return statistics.median(self.cpu_us_per_step)


def ppo_dict_contender(name: str, cfg, training: bool, iterations: int = 1) -> Contender:
    """ppo_dict's PPO on the env pool it trains with: per round ``iterations`` training iterations
    (``training``), else one rollout with its GAE. ``.model`` is the PPO (its ``timing``)."""
    from ppo_dict.algo.ppo import PPO
    from ppo_dict.run.run_plan import build_env_pool

    model = PPO(cfg, build_env_pool(cfg))
    model.start_envs()
    rollout = cfg.rollout_size
    if training:

        def run() -> int:
            model.learn(model.num_timesteps + iterations * rollout)
            return iterations * rollout
    else:

        def run() -> int:
            model.collect_rollout()
            model.compute_advantages()
            model.storage.carry_over()
            return rollout

    contender = Contender(name, run, lambda: [os.getpid(), *getattr(model.pool, "pids", [])], model.close)
    contender.model = model  # type: ignore[attr-defined]
    return contender


def sb3_model_contender(name: str, model, training: bool) -> Contender:
    """An sb3 (or sb3-contrib) on-policy ``model`` on its vec env: per round two training iterations
    (``training``), else one ``collect_rollouts`` (GAE included)."""
    venv, n_steps = model.env, model.n_steps
    rollout = n_steps * venv.num_envs
    if training:

        def run() -> int:
            model.learn(2 * rollout, reset_num_timesteps=False)
            return 2 * rollout
    else:
        _, callback = model._setup_learn(10**12, None)
        callback.on_training_start(locals(), globals())

        def run() -> int:
            model.collect_rollouts(model.env, callback, model.rollout_buffer, n_rollout_steps=n_steps)
            return rollout

    pids = (lambda: [os.getpid(), *(p.pid for p in venv.processes)]) if hasattr(venv, "processes") else (lambda: [os.getpid()])
    return Contender(name, run, pids, venv.close)


def interleave(contenders: list[Contender], rounds: int, warmup: bool = True) -> None:
    """``rounds`` rounds, each contender once per round, the order rotating round to round."""
    if warmup:
        for c in contenders:
            c.run()
    for r in range(rounds):
        for c in contenders[r % len(contenders) :] + contenders[: r % len(contenders)]:
            c.once()


def ratio(a: Contender, b: Contender) -> tuple[float, float, float]:
    """Median, min and max of the per-round ratios ``a / b`` of steps per second."""
    ratios = [x / y for x, y in zip(a.rates, b.rates)]
    return statistics.median(ratios), min(ratios), max(ratios)


def ratio_text(a: Contender, b: Contender, target: Optional[float] = None) -> str:
    med, lo, hi = ratio(a, b)
    text = f"**{med:.2f}x** ({lo:.2f}-{hi:.2f} over {len(a.rates)} rounds)"
    if target is not None:
        text += f", target >= {target}: {'met' if med >= target else 'NOT met'}"
    return text


def machine_times() -> list[int]:
    """The machine's cumulative CPU ticks: user nice system idle iowait irq softirq steal."""
    with open("/proc/stat") as f:
        return [int(x) for x in f.readline().split()[1:9]]


def load_line(start: list[int]) -> str:
    """How busy the machine was besides: CPU steal and the load average, since ``start``."""
    delta = [b - a for a, b in zip(start, machine_times())]
    steal = 100 * delta[7] / max(1, sum(delta))
    return f"CPU steal {steal:.1f}%, load average at the end {', '.join(f'{x:.1f}' for x in os.getloadavg())}"


def cpu_name() -> str:
    """The CPU's model name, as /proc/cpuinfo gives it."""
    try:
        with open("/proc/cpuinfo") as f:
            return next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        return "unknown CPU"


def machine_line() -> str:
    """Date, commit, CPU, core count and the versions that decide the numbers."""
    cpu = cpu_name()
    # BENCH_COMMIT names the commit where the checkout's git metadata is not this tree's (a copied working tree)
    commit = (
        os.environ.get("BENCH_COMMIT")
        or subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT).stdout.strip()
        or "?"
    )
    import gymnasium

    versions = f"torch {torch.__version__}, gymnasium {gymnasium.__version__}, numpy {np.__version__}"
    try:
        import stable_baselines3

        versions += f", stable-baselines3 {stable_baselines3.__version__}"
    except ImportError:
        pass
    gpu = f", {torch.cuda.get_device_name(0)}" if torch.cuda.is_available() else ""
    allowed = len(os.sched_getaffinity(0))
    cpus = f"{os.cpu_count()} cpus" + (f" ({allowed} allowed by the affinity mask)" if allowed < (os.cpu_count() or 1) else "")
    return f"{time.strftime('%Y-%m-%d')} | commit {commit} | {cpu}, {cpus}{gpu} | {versions}, python {sys.version.split()[0]}"


class Table:
    """Rows of the perf_log.md table, printed as they come."""

    def __init__(self) -> None:
        self.rows: list[str] = []

    def row(self, setting: str, what: str, measured: str, compared: str = "", ratio: str = "") -> None:
        self.rows.append(f"| {setting} | {what} | {measured} | {compared} | {ratio} |")
        print(self.rows[-1], flush=True)

    def write(self, title: str, command: str, started: list[int], log: Optional[str]) -> None:
        """Print the table under a header (machine, commit, versions, load) and append both to ``log``."""
        header = f"\n### {title}: {machine_line()}\n\ncommand: `{command}` ({load_line(started)})\n\n"
        table = (
            ("| setting | what | measured | compared with | ratio |\n| --- | --- | --- | --- | --- |\n")
            + "\n".join(self.rows)
            + "\n"
        )
        print(header + table, flush=True)
        if log:
            with open(log, "a") as f:
                f.write(header + table)


def log_path(args) -> Optional[str]:
    """Where the rows go: ``--log FILE`` (default perf_log.md), none with ``--no_log``."""
    return None if args.no_log else args.log


def add_log_flags(parser) -> None:
    parser.add_argument("--no_log", action="store_true", help="print only; do not append to perf_log.md")
    parser.add_argument("--log", default=os.path.join(ROOT, "perf_log.md"), help="the ledger to append the rows to")


def add_bench_flags(parser, quick_help: str) -> None:
    """The flags every benchmark takes: ``--quick``, the ledger's (:func:`add_log_flags`), ``--envs`` and ``--workers``."""
    from ppo_dict.core.config import physical_cores

    parser.add_argument("--quick", action="store_true", help=quick_help)
    add_log_flags(parser)
    parser.add_argument("--envs", default="8,32", help="env counts to compare, comma-separated")
    parser.add_argument(
        "--workers", type=int, default=physical_cores(), help="ppo_dict's worker count (default: the physical cores)"
    )
