"""The pipeline's own cost: an env that does no work (``PPODictZeroWork-v0``) stepped through
ppo_dict's pool and through sb3's DummyVecEnv, in interleaved rounds.

With the env's work at zero, what is left per env step is the stepping machinery itself: sending
the actions, the env wrappers (sb3's Monitor on both sides), writing observations, rewards and
episode ends, resets at episode ends, waiting. For each env count (64 and 256 by default):
  * sb3 DummyVecEnv: ``venv.step(actions)`` with fixed actions;
  * ppo_dict's pool with worker processes, the main process stepping no env itself: the main
    process's CPU is the pool's coordination alone, the workers' CPU the per-env work; again with
    the other setting of ``--spin_wait_us`` (waits that look for 1000 us before they sleep, or sleep at once);
  * ppo_dict in-process (``--num_workers 0``): the same envs stepped in this process.
Steps/s, wall microseconds per env step and CPU microseconds per env step (main process and
workers apart, from /proc/<pid>/schedstat) are the medians over the rounds. Targets (issue 21):
>= 3x sb3 at both sizes, <= 5 us of worker CPU per env step, <= 2 us of main-process work per
env at 256 envs. Rows are appended to perf_log.md.

    python benchmarks/bench_pipeline.py [--quick] [--no_log] [--envs 64,256] [--workers N]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import warnings
from typing import Optional

import numpy as np
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from stable_baselines3.common.env_util import make_vec_env  # noqa: E402
from stable_baselines3.common.vec_env import DummyVecEnv  # noqa: E402

from benchmarks.harness import Contender, Table, add_bench_flags, interleave, log_path, machine_times, ratio_text  # noqa: E402
from ppo_dict.core.config import Config  # noqa: E402
from ppo_dict.envs import zero_work  # noqa: E402
from ppo_dict.run.run_plan import build_env_pool  # noqa: E402
from ppo_dict.vec.group import SPIN_WAIT  # noqa: E402

ENV = f"gym_{zero_work.GYM_ID}"


def sb3_dummy(n_envs: int, steps: int) -> Contender:
    venv = make_vec_env(zero_work.GYM_ID, n_envs=n_envs, seed=0, vec_env_cls=DummyVecEnv)
    venv.reset()
    actions = np.full((n_envs, *venv.action_space.shape), 0.1, np.float32)

    def run() -> int:
        for _ in range(steps):
            venv.step(actions)
        return steps * n_envs

    return Contender("sb3 DummyVecEnv", run, close=venv.close, workers=lambda: [])


def ours(name: str, n_envs: int, num_workers: Optional[int], steps: int, **changes) -> Contender:
    """ppo_dict's pool (``num_workers`` None: the default layout, else that many workers beside a main process stepping
    no env)."""
    if num_workers is not None:
        changes.setdefault("main_steps_envs", False)
    cfg = Config(
        env=ENV,
        gym_packages=(zero_work.MODULE,),
        n_envs=n_envs,
        num_workers=num_workers,
        n_steps=steps,
        seed=0,
        verbose=0,
        **changes,
    )
    pool = build_env_pool(cfg)
    pool.reset(0)
    if num_workers is None:  # the layout the machine's CPUs gave (in this process alone, where the load left one CPU)
        name += f" ({cfg.layout().text().split(';')[0]})"
    pool.storage.env_actions[...] = 0.1

    def run() -> int:
        for t in range(steps):
            pool.step(t)
        return steps * n_envs

    workers = lambda: list(getattr(pool, "pids", []))  # noqa: E731  (none in-process)
    contender = Contender(name, run, lambda: [os.getpid(), *workers()], pool.close, workers=workers)
    contender.pool = pool  # type: ignore[attr-defined]
    return contender


def median(values: list[float]) -> float:
    return statistics.median(values)


def pipeline(table: Table, n_envs: int, workers: int, rounds: int, steps: int) -> None:
    """The rows of one env count: each contender's rate and CPU, ppo_dict against sb3, the targets."""
    setting = f"{zero_work.GYM_ID} (no work; obs float32[4], Box(1) action), {n_envs} envs"
    sb3 = sb3_dummy(n_envs, steps)
    pool = ours(f"ppo_dict pool, {workers} workers, main steps no env", n_envs, workers, steps)
    default_us = pool.pool.spin * 1e6
    pool.name += f" (waits look {default_us:g} us by default here)"
    other_us = 0.0 if default_us else SPIN_WAIT * 1e6
    other = ours(
        f"ppo_dict pool, {workers} workers, main steps no env, --spin_wait_us {other_us:g}",
        n_envs,
        workers,
        steps,
        spin_wait_us=other_us,
    )
    looks, sleeps = (pool, other) if default_us else (other, pool)
    in_process = ours("ppo_dict in-process (--num_workers 0)", n_envs, 0, steps)
    default = ours("ppo_dict pool, default layout", n_envs, None, steps)
    contenders = [sb3, pool, other, in_process, default]
    try:
        interleave(contenders, rounds)
        for c in contenders:
            cpu = f"main {median(c.cpu_main_us):.2f} + workers {median(c.cpu_workers_us):.2f} CPU-us/env step"
            table.row(
                setting,
                f"env stepping, {c.name}",
                f"{c.rate:.0f} steps/s ({1e6 / c.rate:.2f} us/env step); {cpu}",
                "vs sb3 DummyVecEnv" if c is not sb3 else "",
                ratio_text(c, sb3, 3.0 if c in (pool, default) else None) if c is not sb3 else "",
            )
        table.row(
            setting,
            f"ppo_dict pool: waits that look for {SPIN_WAIT * 1e6:g} us before they sleep vs sleeping at once",
            f"{looks.rate:.0f} vs {sleeps.rate:.0f} steps/s",
            "",
            ratio_text(looks, sleeps),
        )
        worker_us, main_us = median(pool.cpu_workers_us), median(pool.cpu_main_us)
        table.row(
            setting,
            f"ppo_dict pool ({workers} workers): CPU per env step",
            f"workers {worker_us:.2f} us, main process {main_us:.2f} us",
            "targets: workers <= 5 us, main <= 2 us per env (at 256 envs)",
            f"workers {'met' if worker_us <= 5 else 'NOT met'}, main {'met' if main_us <= 2 else 'NOT met'}",
        )
    finally:
        for c in contenders:
            c.close()


def run_pipeline(table: Table, envs: list[int], workers: int, quick: bool) -> None:
    """Every env count of ``envs`` (called by bench.py too)."""
    rounds = 3 if quick else 7
    for n_envs in envs:
        steps = max(20, (4000 if quick else 20000) // n_envs)  # about the same env steps per round at every size
        pipeline(table, n_envs, workers, rounds, steps)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_bench_flags(parser, "fewer rounds and steps (a smoke run)")
    parser.set_defaults(envs="64,256")
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)
    started, table = machine_times(), Table()
    run_pipeline(table, [int(n) for n in args.envs.split(",")], args.workers, args.quick)
    flags = " ".join(f for f in (args.quick and "--quick", args.envs != "64,256" and f"--envs {args.envs}") if f)
    table.write("bench_pipeline", f"python benchmarks/bench_pipeline.py {flags}".strip(), started, log=log_path(args))


if __name__ == "__main__":
    main()
