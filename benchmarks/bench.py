"""Throughput benchmark: ppo_dict's shared-memory workers against sb3 and gymnasium, side by side.

In one process on one machine (torch single-threaded in this process for every side):
  1. raw single-core Reacher-v5 steps/s (gym.make, random actions, no policy);
  2. rollout throughput with the same MLP policy (sb3's, 64x64 tanh), Reacher-v5, 8 and 32 envs:
     sb3 DummyVecEnv and SubprocVecEnv through sb3's own ``collect_rollouts``, gymnasium
     ``AsyncVectorEnv(shared_memory=True)`` through a plain policy->clip->step loop, and ppo_dict's
     ``PPO.collect_rollout`` on ShmEnvPool (2 workers);
  3. end-to-end training fps at n_steps 256, batch = rollout/4, 10 epochs: sb3 with its fastest
     vec env from (2) against ppo_dict;
  4. pure env stepping through ShmEnvPool with 1 and 2 worker processes (16 envs each): scaling;
  5. a soak: 1M env steps of rollouts, resident memory and open fds of main + workers along the way.
Prints the ratios against the targets and appends the table to perf_log.md.

    python benchmarks/bench.py [--quick] [--no_log]
"""
from __future__ import annotations

import argparse
import os
import sys
import time
import warnings
from typing import Callable

import gymnasium as gym
import numpy as np
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import stable_baselines3  # noqa: E402
from stable_baselines3 import PPO as SB3PPO  # noqa: E402
from stable_baselines3.common.env_util import make_vec_env  # noqa: E402
from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv  # noqa: E402

from benchmarks.bench_pixels import cpu_times, machine_line, steal_share  # noqa: E402
from ppo_dict.config import Config  # noqa: E402
from ppo_dict.vec import make_env_pool  # noqa: E402
from ppo_dict.ppo import PPO  # noqa: E402

ENV_ID = "Reacher-v5"
N_STEPS = 256
NUM_WORKERS = 2


def best_rate(run: Callable[[], int], repeats: int) -> float:
    """Highest steps/s over ``repeats`` timed calls of ``run`` (which returns its step count):
    the machine is shared, so the best run is the least disturbed one."""
    rates = []
    for _ in range(repeats):
        start = time.perf_counter()
        steps = run()
        rates.append(steps / (time.perf_counter() - start))
    return max(rates)


# ------------------------------------------------------------------------------ 1. raw env
def raw_step_rate(steps: int) -> float:
    env = gym.make(ENV_ID)
    env.reset(seed=0)
    actions = np.random.default_rng(0).uniform(-1, 1, size=(steps, 2)).astype(np.float32)

    def run() -> int:
        for action in actions:
            _, _, terminated, truncated, _ = env.step(action)
            if terminated or truncated:
                env.reset()
        return steps

    rate = best_rate(run, 3)
    env.close()
    return rate


# ------------------------------------------------------------------------------ 2. rollouts
def sb3_model(venv, n_envs: int) -> SB3PPO:
    return SB3PPO("MlpPolicy", venv, n_steps=N_STEPS, batch_size=N_STEPS * n_envs // 4, n_epochs=10, seed=0, verbose=0, device="cpu")


def sb3_rollout_rate(vec_env_cls, n_envs: int, repeats: int) -> float:
    venv = make_vec_env(ENV_ID, n_envs=n_envs, seed=0, vec_env_cls=vec_env_cls)
    try:
        model = sb3_model(venv, n_envs)
        _, callback = model._setup_learn(10**9, None)
        callback.on_training_start(locals(), globals())

        def run() -> int:
            model.collect_rollouts(model.env, callback, model.rollout_buffer, n_rollout_steps=N_STEPS)
            return N_STEPS * n_envs

        run()  # warm-up
        return best_rate(run, repeats)
    finally:
        venv.close()


def gym_async_rollout_rate(n_envs: int, repeats: int) -> float:
    """AsyncVectorEnv (one process per env, shared-memory obs) driven by the same sb3 policy."""
    venv = gym.vector.AsyncVectorEnv(
        [lambda: gym.make(ENV_ID)] * n_envs, shared_memory=True, autoreset_mode=gym.vector.AutoresetMode.SAME_STEP
    )
    try:
        policy = sb3_model(make_vec_env(ENV_ID, n_envs=1), 1).policy
        low, high = venv.single_action_space.low, venv.single_action_space.high
        obs, _ = venv.reset(seed=0)

        @torch.no_grad()
        def run() -> int:
            nonlocal obs
            for _ in range(N_STEPS):
                actions, _, _ = policy(torch.as_tensor(obs))
                obs, *_ = venv.step(np.clip(actions.numpy(), low, high))
            return N_STEPS * n_envs

        run()
        return best_rate(run, repeats)
    finally:
        venv.close()


def ours_config(n_envs: int, total_timesteps: int = 10**9) -> Config:
    return Config(
        env=f"gym_{ENV_ID}", n_envs=n_envs, num_workers=NUM_WORKERS, envs_per_worker=n_envs // NUM_WORKERS, n_steps=N_STEPS,
        batch_size=N_STEPS * n_envs // 4, n_epochs=10, seed=0, verbose=0, device="cpu", total_timesteps=total_timesteps,
    )


def ours_rollout_rate(n_envs: int, repeats: int, in_process: bool = False) -> float:
    cfg = ours_config(n_envs)
    if in_process:
        cfg = cfg.replace(num_workers=0, envs_per_worker=None)
    pool = make_env_pool(cfg)
    try:
        model = PPO(cfg, pool)
        model.start_envs()

        def run() -> int:
            model.collect_rollout()
            return N_STEPS * n_envs

        run()
        return best_rate(run, repeats)
    finally:
        pool.close()


# ------------------------------------------------------------------------------ 3. training
def sb3_training_fps(vec_env_cls, n_envs: int, iterations: int) -> float:
    venv = make_vec_env(ENV_ID, n_envs=n_envs, seed=0, vec_env_cls=vec_env_cls)
    try:
        model = sb3_model(venv, n_envs)
        return best_rate(lambda: model.learn(iterations * N_STEPS * n_envs).num_timesteps, 1)
    finally:
        venv.close()


def ours_training_fps(n_envs: int, iterations: int) -> float:
    cfg = ours_config(n_envs, total_timesteps=iterations * N_STEPS * n_envs)
    pool = make_env_pool(cfg)
    try:
        model = PPO(cfg, pool)
        return best_rate(lambda: model.learn().num_timesteps, 1)
    finally:
        pool.close()


# ------------------------------------------------------------------------------ 4. scaling
def pool_stepping_rate(num_workers: int, envs_per_worker: int, steps: int) -> float:
    """Env steps/s through ShmEnvPool with fixed actions, no policy: the workers' ceiling."""
    cfg = Config(env=f"gym_{ENV_ID}", n_envs=num_workers * envs_per_worker, num_workers=num_workers, envs_per_worker=envs_per_worker,
                 n_steps=steps, seed=0, verbose=0, main_steps_envs=False)  # worker processes only: their scaling
    pool = make_env_pool(cfg)
    try:
        pool.reset(0)
        pool.storage.env_actions[...] = 0.1

        def run() -> int:
            for t in range(steps):
                pool.step(t)
            return steps * pool.num_envs

        run()
        return best_rate(run, 3)
    finally:
        pool.close()


# ------------------------------------------------------------------------------ 5. soak
def process_footprint(pids: list[int]) -> tuple[float, int]:
    """(resident MB, open fds) summed over ``pids`` (this process and the workers)."""
    rss_kb, fds = 0, 0
    for pid in pids:
        with open(f"/proc/{pid}/status") as f:
            rss_kb += next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))
        fds += len(os.listdir(f"/proc/{pid}/fd"))
    return rss_kb / 1024, fds


def soak(total_steps: int, n_envs: int = 32) -> list[tuple[int, float, int]]:
    """Rollouts (the per-step path) for ``total_steps`` env steps: ``(steps, RSS MB, fds)`` along the way."""
    cfg = ours_config(n_envs)
    pool = make_env_pool(cfg)
    try:
        model = PPO(cfg, pool)
        model.start_envs()
        model.collect_rollout()  # warm-up: caches and allocator pools fill once
        samples = []
        pids = [os.getpid(), *pool.pids]
        for i in range(total_steps // (N_STEPS * n_envs)):
            model.collect_rollout()
            if i % 20 == 0:
                samples.append((model.num_timesteps, *process_footprint(pids)))
        samples.append((model.num_timesteps, *process_footprint(pids)))
        return samples
    finally:
        pool.close()


# ------------------------------------------------------------------------------ report
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer repeats (a smoke run)")
    parser.add_argument("--no_log", action="store_true", help="print only; do not append to perf_log.md")
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)
    repeats, iterations = (1, 2) if args.quick else (3, 3)
    started, started_cpu = time.perf_counter(), cpu_times()
    rows: list[str] = []

    def row(setting: str, what: str, measured: str, compared: str = "", ratio: str = "") -> None:
        rows.append(f"| {setting} | {what} | {measured} | {compared} | {ratio} |")
        print(rows[-1], flush=True)

    def verdict(value: float, target: float) -> str:
        return f"**{value:.2f}x** (target >= {target}: {'met' if value >= target else 'NOT met'})"

    raw = raw_step_rate(4000 if args.quick else 20000)
    row(f"{ENV_ID}, 1 env, this process", "raw env steps/s, no policy", f"{raw:.0f} steps/s")

    fastest_sb3: dict[int, tuple[str, type]] = {}
    for n_envs in (8, 32):
        rates = {
            "sb3 DummyVecEnv": sb3_rollout_rate(DummyVecEnv, n_envs, repeats),
            "sb3 SubprocVecEnv": sb3_rollout_rate(SubprocVecEnv, n_envs, repeats),
            "gymnasium AsyncVectorEnv(shared_memory)": gym_async_rollout_rate(n_envs, repeats),
            f"ppo_dict ShmEnvPool, {NUM_WORKERS} workers": ours_rollout_rate(n_envs, repeats),
            "ppo_dict in-process (--num_workers 0)": ours_rollout_rate(n_envs, repeats, in_process=True),
        }
        ours = rates.pop(f"ppo_dict ShmEnvPool, {NUM_WORKERS} workers")
        for name, rate in rates.items():
            row(f"{ENV_ID}, {n_envs} envs, MLP 64x64", f"rollout, {name}", f"{rate:.0f} steps/s", f"ppo_dict / this: {ours / rate:.2f}x")
        dummy = rates["sb3 DummyVecEnv"]
        ceiling = NUM_WORKERS * raw
        row(f"{ENV_ID}, {n_envs} envs, MLP 64x64", f"rollout, ppo_dict ShmEnvPool ({NUM_WORKERS} workers, main steps worker 0's envs)",
            f"{ours:.0f} steps/s",
            f"vs sb3 DummyVecEnv: {verdict(ours / dummy, 2.0) if n_envs == 32 else f'{ours / dummy:.2f}x'}",
            f"vs {NUM_WORKERS} cores x raw: {verdict(ours / ceiling, 0.75) if n_envs == 32 else f'{ours / ceiling:.2f}x'}")
        sb3_rates = {"DummyVecEnv": (rates["sb3 DummyVecEnv"], DummyVecEnv), "SubprocVecEnv": (rates["sb3 SubprocVecEnv"], SubprocVecEnv)}
        name = max(sb3_rates, key=lambda k: sb3_rates[k][0])
        fastest_sb3[n_envs] = (name, sb3_rates[name][1])

    for n_envs in (8, 32):
        name, cls = fastest_sb3[n_envs]
        sb3_fps = sb3_training_fps(cls, n_envs, iterations)
        ours_fps = ours_training_fps(n_envs, iterations)
        row(f"{ENV_ID}, {n_envs} envs, n_steps {N_STEPS}, batch {N_STEPS * n_envs // 4}, 10 epochs", f"training fps, {iterations} iterations",
            f"ppo_dict {ours_fps:.0f}", f"sb3 ({name}, its fastest here) {sb3_fps:.0f}", verdict(ours_fps / sb3_fps, 2.0))

    steps = 100 if args.quick else 400
    one, two = pool_stepping_rate(1, 16, steps), pool_stepping_rate(2, 16, steps)
    row(f"{ENV_ID}, 16 envs per worker", "pure env stepping through ShmEnvPool", f"1 worker {one:.0f}, 2 workers {two:.0f} steps/s",
        f"per worker vs raw: {one / raw:.2f}, {two / 2 / raw:.2f}", f"1->2 workers {verdict(two / one, 1.8)}")

    samples = soak(100_000 if args.quick else 1_000_000)
    (steps0, rss0, fds0), (steps1, rss1, fds1) = samples[0], samples[-1]
    row(f"{ENV_ID}, 32 envs, rollouts only", f"RSS and open fds (main + workers) over {steps1 - steps0:,} env steps",
        f"RSS {rss0:.0f} -> {rss1:.0f} MB, fds {fds0} -> {fds1}", f"max RSS {max(r for _, r, _ in samples):.0f} MB",
        f"RSS growth {rss1 - rss0:+.1f} MB, fds {fds1 - fds0:+d}")

    command = f"python benchmarks/bench.py{' --quick' if args.quick else ''}"
    header = (
        f"\n### bench: {machine_line()}, stable-baselines3 {stable_baselines3.__version__}, python {sys.version.split()[0]}\n\n"
        f"command: `{command}` ({time.perf_counter() - started:.0f} s; machine load average at the end: "
        f"{', '.join(f'{x:.1f}' for x in os.getloadavg())}; {steal_share(started_cpu)})\n\n"
    )
    table = "| setting | what | measured | compared with | ratio |\n| --- | --- | --- | --- | --- |\n" + "\n".join(rows) + "\n"
    print(header + table)
    if not args.no_log:
        path = os.path.join(ROOT, "perf_log.md")
        if not os.path.exists(path):
            with open(path, "w") as f:
                f.write("# perf_log\n\nMeasured throughput, appended by the benchmarks in `benchmarks/` (never edited by hand).\n")
        with open(path, "a") as f:
            f.write(header + table)


if __name__ == "__main__":
    main()
