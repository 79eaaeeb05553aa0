"""Throughput of ppo_dict against sb3, side by side in one run, in interleaved rounds.

Reacher-v5 with sb3's MLP (64x64 tanh), the configuration PPO users train with: n_steps 256,
4 minibatches, 10 epochs. For each env count:
  1. the ceiling: one Reacher-v5 stepped in this process with fixed actions (raw steps/s);
  2. rollouts (collection and GAE): sb3's ``collect_rollouts`` on DummyVecEnv and SubprocVecEnv
     against ppo_dict's exact rollouts on the worker pool (the main process stepping
     a worker's share; again with ``--spin_wait_us 0``), double-buffered ones, and the in-process pool; the main
     process's own work per step (policy and bookkeeping) from ppo_dict's time/* figures;
  3. training (rollouts and updates): sb3 on DummyVecEnv against ppo_dict, exact and double-buffered;
then pure env stepping through the pool with 1 and 2 worker processes, a 1M-step soak (resident
memory and open fds of main and workers), and the pipeline's own cost: an env that does no work
through the pool and through sb3's DummyVecEnv at 64 and 256 envs (``bench_pipeline.py``). Every
comparison is the median of per-round ratios; CPU time per env step sums this process and its workers. Rows are appended
to perf_log.md.

    python benchmarks/bench.py [--quick] [--no_log] [--envs 8,32] [--device cpu|cuda]
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings

import gymnasium as gym
import numpy as np
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from stable_baselines3 import PPO as SB3PPO  # noqa: E402
from stable_baselines3.common.env_util import make_vec_env  # noqa: E402
from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv  # noqa: E402

from benchmarks.bench_pipeline import run_pipeline  # noqa: E402
from benchmarks.harness import (  # noqa: E402
    Contender,
    Table,
    add_bench_flags,
    interleave,
    log_path,
    machine_times,
    ppo_dict_contender,
    ratio_text,
    sb3_model_contender,
)
from ppo_dict.algo.ppo import PPO  # noqa: E402
from ppo_dict.core.config import Config  # noqa: E402
from ppo_dict.run.run_plan import build_env_pool  # noqa: E402

ENV_ID = "Reacher-v5"
N_STEPS = 256
PIPELINE_ENVS = [64, 256]


def raw_env(steps: int, env_id: str = ENV_ID) -> Contender:
    """One ``env_id`` stepped in this process with fixed actions: the ceiling a core can reach."""
    env = gym.make(env_id)
    env.reset(seed=0)
    action = np.zeros(env.action_space.shape, np.float32)

    def run() -> int:
        for _ in range(steps):
            _, _, terminated, truncated, _ = env.step(action)
            if terminated or truncated:
                env.reset()
        return steps

    return Contender(f"one {env_id} in this process, no policy", run, close=env.close)


def sb3_contender(
    name: str, vec_env_cls, n_envs: int, device: str, training: bool, env_id: str = ENV_ID, n_steps: int = N_STEPS
) -> Contender:
    venv = make_vec_env(env_id, n_envs=n_envs, seed=0, vec_env_cls=vec_env_cls)
    model = SB3PPO(
        "MlpPolicy", venv, n_steps=n_steps, batch_size=n_steps * n_envs // 4, n_epochs=10, seed=0, verbose=0, device=device
    )
    return sb3_model_contender(name, model, training)


def ours_config(n_envs: int, num_workers: int, device: str, env_id: str = ENV_ID, n_steps: int = N_STEPS, **changes) -> Config:
    return Config(
        env=f"gym_{env_id}",
        n_envs=n_envs,
        num_workers=num_workers,
        n_steps=n_steps,
        batch_size=n_steps * n_envs // 4,
        n_epochs=10,
        seed=0,
        verbose=0,
        device=device,
        total_timesteps=10**12,
        **changes,
    )


def ours_contender(name: str, cfg: Config, training: bool) -> Contender:
    return ppo_dict_contender(name, cfg, training, iterations=2)


def rollouts(table: Table, n_envs: int, workers: int, device: str, rounds: int) -> None:
    setting = f"{ENV_ID}, {n_envs} envs, MLP 64x64, n_steps {N_STEPS}"
    raw = raw_env(N_STEPS * n_envs // 2)
    dummy = sb3_contender("sb3 DummyVecEnv", DummyVecEnv, n_envs, device, training=False)
    subproc = sb3_contender("sb3 SubprocVecEnv (one process per env)", SubprocVecEnv, n_envs, device, training=False)
    exact = ours_contender(f"ppo_dict, {workers} workers, exact", ours_config(n_envs, workers, device), training=False)
    asleep = ours_contender(
        f"ppo_dict, {workers} workers, exact, --spin_wait_us 0",
        ours_config(n_envs, workers, device, spin_wait_us=0.0),
        training=False,
    )
    double = ours_contender(
        f"ppo_dict, {workers} workers, --double_buffer",
        ours_config(n_envs, workers, device, double_buffer=True),
        training=False,
    )
    in_process = ours_contender("ppo_dict in-process (--num_workers 0)", ours_config(n_envs, 0, device), training=False)
    contenders = [raw, dummy, subproc, exact, asleep, double, in_process]
    try:
        interleave(contenders, rounds)
        for c in contenders[1:]:
            table.row(
                setting,
                f"rollout, {c.name}",
                f"{c.rate:.0f} steps/s, {c.cpu:.0f} CPU-us/step",
                "vs sb3 DummyVecEnv" if c is not dummy else "",
                ratio_text(c, dummy, 2.0 if c is exact else None) if c is not dummy else "",
            )
        table.row(
            setting,
            f"ppo_dict exact: waits that look for {exact.model.pool.spin * 1e6:g} us before they sleep (the "
            "default here) vs sleeping at once",
            f"{exact.rate:.0f} vs {asleep.rate:.0f} steps/s; {exact.cpu:.0f} vs {asleep.cpu:.0f} CPU-us/step",
            "",
            ratio_text(exact, asleep),
        )
        cores = workers * raw.rate
        table.row(
            setting,
            f"rollout, ppo_dict exact vs {workers} cores x raw Reacher-v5 ({raw.rate:.0f} steps/s each)",
            f"{exact.rate:.0f} of {cores:.0f} steps/s",
            "",
            f"**{exact.rate / cores:.2f}** (target >= 0.75: {'met' if exact.rate >= 0.75 * cores else 'NOT met'})",
        )
        logs = exact.model.timing.logs(n_envs)
        pool = exact.model.pool
        table.row(
            setting,
            "ppo_dict exact: the main process's own work per step (policy + bookkeeping)",
            f"{logs['time/policy_us'] + logs['time/bookkeeping_us']:.0f} us ({logs['time/policy_us']:.0f} + "
            f"{logs['time/bookkeeping_us']:.0f})",
            f"env stepping and waiting {logs['time/envs_us']:.0f} us; main steps {getattr(pool, 'main_envs', 0)} of "
            f"{n_envs} envs",
            "target <= 150 us",
        )
    finally:
        for c in contenders:
            c.close()


def training(table: Table, n_envs: int, workers: int, device: str, rounds: int) -> None:
    setting = f"{ENV_ID}, {n_envs} envs, n_steps {N_STEPS}, batch {N_STEPS * n_envs // 4}, 10 epochs"
    sb3 = sb3_contender("sb3 DummyVecEnv", DummyVecEnv, n_envs, device, training=True)
    exact = ours_contender("ppo_dict exact", ours_config(n_envs, workers, device), training=True)
    double = ours_contender(
        "ppo_dict --double_buffer", ours_config(n_envs, workers, device, double_buffer=True), training=True
    )
    try:
        interleave([sb3, exact, double], rounds)
        for c in (exact, double):
            timing = c.model.timing
            table.row(
                setting,
                f"training fps, {c.name} (update threads {timing.update_threads})",
                f"{c.rate:.0f} vs sb3 {sb3.rate:.0f} steps/s; {c.cpu:.0f} vs {sb3.cpu:.0f} CPU-us/step",
                f"time in the last 2 iterations: rollouts {timing.rollout:.2f} s, updates {timing.update:.2f} s",
                ratio_text(c, sb3, 2.0 if c is exact else None),
            )
    finally:
        for c in (sb3, exact, double):
            c.close()


def scaling(table: Table, rounds: int, steps: int) -> None:
    """Env steps/s through the pool with fixed actions, no policy: 1 and 2 worker processes of 16 envs."""
    contenders = []
    for workers in (1, 2):
        cfg = Config(
            env=f"gym_{ENV_ID}",
            n_envs=16 * workers,
            num_workers=workers,
            n_steps=steps,
            seed=0,
            verbose=0,
            main_steps_envs=False,
        )
        pool = build_env_pool(cfg)
        pool.reset(0)
        pool.storage.env_actions[...] = 0.1

        def run(pool=pool) -> int:
            for t in range(steps):
                pool.step(t)
            return steps * pool.num_envs

        contenders.append(Contender(f"{workers} workers", run, lambda pool=pool: [os.getpid(), *pool.pids], pool.close))
    try:
        interleave(contenders, rounds)
        one, two = contenders
        table.row(
            f"{ENV_ID}, 16 envs per worker, no policy",
            "pure env stepping through the pool",
            f"1 worker {one.rate:.0f}, 2 workers {two.rate:.0f} steps/s",
            f"{one.cpu:.0f} and {two.cpu:.0f} CPU-us/step",
            f"1 -> 2 workers {ratio_text(two, one, 1.8)}",
        )
    finally:
        for c in contenders:
            c.close()


def process_footprint(pids: list[int]) -> tuple[float, int]:
    """(resident MB, open fds) summed over ``pids``."""
    rss_kb, fds = 0, 0
    for pid in pids:
        with open(f"/proc/{pid}/status") as f:
            rss_kb += next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))
        fds += len(os.listdir(f"/proc/{pid}/fd"))
    return rss_kb / 1024, fds


def soak(table: Table, total_steps: int, workers: int) -> None:
    """Rollouts (the per-step path) for ``total_steps`` env steps: resident memory and fds along the way."""
    cfg = ours_config(32, workers, "cpu")
    with PPO(cfg, build_env_pool(cfg)) as model:
        model.start_envs()
        model.collect_rollout()  # warm-up: caches and allocator pools fill once
        model.storage.carry_over()
        pids = [os.getpid(), *model.pool.pids]
        samples = [(model.num_timesteps, *process_footprint(pids))]
        while model.num_timesteps < total_steps:
            model.collect_rollout()
            model.compute_advantages()
            model.storage.carry_over()
            samples.append((model.num_timesteps, *process_footprint(pids)))
    (steps0, rss0, fds0), (steps1, rss1, fds1) = samples[0], samples[-1]
    table.row(
        f"{ENV_ID}, 32 envs, rollouts only",
        f"RSS and open fds (main + workers) over {steps1 - steps0:,} env steps",
        f"RSS {rss0:.0f} -> {rss1:.0f} MB, fds {fds0} -> {fds1}",
        f"max RSS {max(r for _, r, _ in samples):.0f} MB",
        f"RSS growth {rss1 - rss0:+.1f} MB, fds {fds1 - fds0:+d}",
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_bench_flags(parser, "fewer rounds and a short soak (a smoke run)")
    parser.add_argument("--device", default="cpu", help="torch device for both sides (cuda on a GPU machine)")
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)
    rounds, train_rounds, soak_steps = (2, 1, 100_000) if args.quick else (7, 3, 1_000_000)
    started, table = machine_times(), Table()
    for n_envs in (int(n) for n in args.envs.split(",")):
        rollouts(table, n_envs, args.workers, args.device, rounds)
        training(table, n_envs, args.workers, args.device, train_rounds)
    scaling(table, rounds, 100 if args.quick else 400)
    soak(table, soak_steps, args.workers)
    run_pipeline(table, PIPELINE_ENVS, args.workers, args.quick)  # the pipeline's own cost: an env that does no work
    flags = " ".join(
        f
        for f in (
            args.quick and "--quick",
            args.device != "cpu" and f"--device {args.device}",
            args.envs != "8,32" and f"--envs {args.envs}",
        )
        if f
    )
    table.write("bench", f"python benchmarks/bench.py {flags}".strip(), started, log=log_path(args))


if __name__ == "__main__":
    main()
