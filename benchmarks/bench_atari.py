"""Atari throughput: Breakout with the CNN, ppo_dict against sb3 with the same wrappers, side by side.

The envs are sb3's recipe on both sides: ``make_atari_env`` (AtariWrapper, Monitor beneath it) +
``VecFrameStack(4)`` + ``CnnPolicy`` for sb3 (its ``SubprocVecEnv`` and its ``DummyVecEnv``), and
``--atari_wrapper True --frame_stack 4 --model cnn`` for ppo_dict (its worker pool, 2 processes,
the main process stepping worker 0's envs). rl-zoo's atari hyperparameters: n_steps 128, batch 256,
4 epochs. For 8 and 32 envs, in interleaved rounds (every side once per round, so that a noisy
neighbour hurts all sides alike):

  1. rollout: ppo_dict's ``PPO.collect_rollout`` against sb3's ``collect_rollouts`` (steps/s);
  2. training: one iteration of ``learn`` (rollout, GAE, 4 epochs of updates), steps/s;
  3. CPU seconds per 1000 env steps during the rollouts, the main process and its env processes.

Each row gives the median over rounds of the per-round ratio (ppo_dict / sb3), with the range.
Appends its rows to perf_log.md.

    python benchmarks/bench_atari.py [--rounds 3] [--training_rounds 1] [--quick] [--no_log]

The defaults take about 4 minutes on 2 cores; the update (identical arithmetic on both sides)
dominates a training iteration, so more training rounds mostly cost time.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import ale_py  # noqa: E402  (registers the Atari ids for sb3's gym.make)
import stable_baselines3  # noqa: E402
from stable_baselines3 import PPO as SB3PPO  # noqa: E402
from stable_baselines3.common.env_util import make_atari_env  # noqa: E402
from stable_baselines3.common.utils import LinearSchedule  # noqa: E402
from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv, VecFrameStack  # noqa: E402

from benchmarks.bench_pixels import cpu_times, machine_line, steal_share  # noqa: E402
from ppo_dict.config import Config  # noqa: E402
from ppo_dict.ppo import PPO  # noqa: E402
from ppo_dict.vec import make_env_pool  # noqa: E402

GAME = "BreakoutNoFrameskip-v4"
#: rl-zoo's atari entry (hyperparams/ppo.yml)
ZOO = dict(n_steps=128, batch_size=256, n_epochs=4, ent_coef=0.01, vf_coef=0.5)
NUM_WORKERS = 2


def process_cpu_seconds(pids: list[int]) -> float:
    """User + system CPU seconds so far of ``pids`` (``/proc/<pid>/stat`` fields 14 and 15)."""
    total = 0
    for pid in pids:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


@dataclass
class Side:
    """One trainer on one vec env: ``rollout()`` and ``iteration()`` return the env steps they took."""

    name: str
    rollout: Callable[[], int]
    iteration: Callable[[], int]
    pids: list[int]
    close: Callable[[], None]
    rates: dict[str, list[float]] = field(default_factory=lambda: {"rollout": [], "training": [], "cpu": []})


def ours_side(n_envs: int) -> Side:
    cfg = Config(env=f"gym_{GAME}", atari_wrapper=True, frame_stack=4, model="cnn", n_envs=n_envs, num_workers=NUM_WORKERS, seed=0,
                 verbose=0, device="cpu", learning_rate="lin_2.5e-4", clip_range="lin_0.1", total_timesteps=10**9, **ZOO)
    pool = make_env_pool(cfg)
    model = PPO(cfg, pool)
    model.start_envs()

    def rollout() -> int:
        model.collect_rollout()
        model.storage.carry_over()
        return cfg.rollout_size

    def iteration() -> int:
        before = model.num_timesteps
        model.learn(total_timesteps=before + cfg.rollout_size)
        return model.num_timesteps - before

    return Side(f"ppo_dict ShmEnvPool ({NUM_WORKERS} workers)", rollout, iteration, [os.getpid(), *pool.pids], pool.close)


def sb3_side(n_envs: int, vec_env_cls: Any) -> Side:
    venv = VecFrameStack(make_atari_env(GAME, n_envs=n_envs, seed=0, vec_env_cls=vec_env_cls), 4)
    model = SB3PPO("CnnPolicy", venv, seed=0, verbose=0, device="cpu", learning_rate=LinearSchedule(2.5e-4, 0.0, 1.0),
                   clip_range=LinearSchedule(0.1, 0.0, 1.0), **ZOO)
    _, callback = model._setup_learn(10**9, None)
    callback.on_training_start(locals(), globals())
    size = ZOO["n_steps"] * n_envs

    def rollout() -> int:
        model.collect_rollouts(model.env, callback, model.rollout_buffer, n_rollout_steps=ZOO["n_steps"])
        return size

    def iteration() -> int:
        before = model.num_timesteps
        model.learn(size, reset_num_timesteps=False)
        return model.num_timesteps - before

    pids = [os.getpid()] + [p.pid for p in getattr(venv.venv, "processes", [])]
    return Side(f"sb3 {vec_env_cls.__name__}", rollout, iteration, pids, venv.close)


def timed(side: Side, what: str) -> None:
    """Run ``side``'s rollout or iteration once; record steps/s (and CPU s per 1000 steps for rollouts)."""
    cpu0, start = process_cpu_seconds(side.pids), time.perf_counter()
    steps = side.rollout() if what == "rollout" else side.iteration()
    seconds = time.perf_counter() - start
    side.rates[what].append(steps / seconds)
    if what == "rollout":
        side.rates["cpu"].append(1000 * (process_cpu_seconds(side.pids) - cpu0) / steps)


def measure(n_envs: int, rounds: int, training_rounds: int) -> list[Side]:
    """Every side once per round, rollouts then training iterations; the sides live through all rounds."""
    sides = [ours_side(n_envs), sb3_side(n_envs, SubprocVecEnv), sb3_side(n_envs, DummyVecEnv)]
    try:
        for side in sides:
            side.rollout()  # warm-up: envs started, caches and allocator pools filled
        for r in range(rounds):
            for side in sides:
                timed(side, "rollout")
            if r < training_rounds:
                for side in sides:
                    timed(side, "training")
            print(f"  {n_envs} envs, round {r + 1}/{rounds}: " + ", ".join(
                f"{s.name} {s.rates['rollout'][-1]:.0f}" for s in sides), flush=True)
        return sides
    finally:
        for side in sides:
            side.close()


def ratio_text(ours: list[float], theirs: list[float], lower_is_better: bool = False) -> str:
    """Median of the per-round ratios ours / theirs (theirs / ours for costs), with their range."""
    ratios = [(b / a) if lower_is_better else (a / b) for a, b in zip(ours, theirs)]
    spread = f"{min(ratios):.2f}-{max(ratios):.2f} over {len(ratios)} rounds" if len(ratios) > 1 else "1 round"
    return f"**{statistics.median(ratios):.2f}x** ({spread})"


def rows_for(n_envs: int, sides: list[Side]) -> list[str]:
    ours, others = sides[0], sides[1:]
    setting = f"{GAME} + AtariWrapper + 4 frames, NatureCNN, {n_envs} envs"
    rows = []
    for what, unit in (("rollout", "steps/s"), ("training", "steps/s")):
        label = "rollout (n_steps 128)" if what == "rollout" else "training, 1 iteration (rollout + 4 epochs, batch 256)"
        for other in others:
            rows.append(f"| {setting} | {label}, vs {other.name} | ppo_dict {statistics.median(ours.rates[what]):.0f} {unit} | "
                        f"{other.name} {statistics.median(other.rates[what]):.0f} {unit} | {ratio_text(ours.rates[what], other.rates[what])} |")
    cpu = ", ".join(f"{s.name} {statistics.median(s.rates['cpu']):.2f}" for s in others)
    rows.append(f"| {setting} | CPU s per 1000 env steps in rollouts (main + env processes) | ppo_dict "
                f"{statistics.median(ours.rates['cpu']):.2f} | {cpu} | saving vs SubprocVecEnv "
                f"{ratio_text(ours.rates['cpu'], others[0].rates['cpu'], lower_is_better=True)} |")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3, help="rollout rounds (training: --training_rounds)")
    parser.add_argument("--training_rounds", type=int, default=1,
                        help="rounds that also time a training iteration (~35 s per side at 32 envs on 2 cores)")
    parser.add_argument("--quick", action="store_true", help="one round, 8 envs only (a smoke run)")
    parser.add_argument("--no_log", action="store_true", help="print only; do not append to perf_log.md")
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)
    rounds, training_rounds = (1, 1) if args.quick else (args.rounds, min(args.training_rounds, args.rounds))
    started, started_cpu = time.perf_counter(), cpu_times()
    rows = []
    for n_envs in (8,) if args.quick else (8, 32):
        rows += rows_for(n_envs, measure(n_envs, rounds, training_rounds))
    command = f"python benchmarks/bench_atari.py{' --quick' if args.quick else ''}"
    header = (
        f"\n### bench_atari: {machine_line()}, stable-baselines3 {stable_baselines3.__version__}, ale-py {ale_py.__version__}\n\n"
        f"command: `{command}` ({time.perf_counter() - started:.0f} s; machine load average at the end: "
        f"{', '.join(f'{x:.1f}' for x in os.getloadavg())}; {steal_share(started_cpu)})\n\n"
    )
    table = "| setting | what | measured | compared with | ratio (median of per-round ratios) |\n| --- | --- | --- | --- | --- |\n"
    table += "\n".join(rows) + "\n"
    print(header + table)
    if not args.no_log:
        with open(os.path.join(ROOT, "perf_log.md"), "a") as f:
            f.write(header + table)


if __name__ == "__main__":
    main()
