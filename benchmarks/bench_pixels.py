"""Pixel pipeline benchmark: is the pipeline the bottleneck, and how does rendering scale?

In one run on one machine:
  1. test_dummy (84x84x3 uint8) + cnn: rollout throughput of PPO.collect_rollout through the
     worker pool, against pure NatureCNN policy inference on the same batch size (target >= 0.8).
  2. pixel Reacher (rendered MuJoCo, 84x84): env steps/s through the pool with 1 and 2 workers,
     for each GL backend that works here (each backend in its own subprocess, since the backend
     is fixed when a process first renders).
Appends its rows to perf_log.md.

    python benchmarks/bench_pixels.py [--quick]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from ppo_dict.config import Config  # noqa: E402
from ppo_dict.vec import make_env_pool  # noqa: E402
from ppo_dict.ppo import PPO  # noqa: E402


def cnn_rollout_vs_inference(n_envs: int, n_steps: int, repeats: int) -> dict[str, float]:
    """Steps/s of collect_rollout (workers stepping test_dummy) vs the policy's forward alone."""
    cfg = Config(env="test_dummy", model="cnn", n_envs=n_envs, num_workers=2, n_steps=n_steps, seed=0, verbose=0)
    pool = make_env_pool(cfg)
    try:
        model = PPO(cfg, pool)
        model.start_envs()
        model.collect_rollout()  # warm-up
        start = time.perf_counter()
        for _ in range(repeats):
            model.collect_rollout()
        rollout = repeats * n_steps * n_envs / (time.perf_counter() - start)

        obs = torch.as_tensor(model.storage.obs["obs"][0])
        with torch.no_grad():
            model.policy(obs)
            start = time.perf_counter()
            for _ in range(repeats * n_steps):
                model.policy(obs)
        inference = repeats * n_steps * n_envs / (time.perf_counter() - start)
    finally:
        pool.close()
    return {"rollout_steps_per_s": rollout, "inference_steps_per_s": inference, "ratio": rollout / inference}


def pixel_env_stepping(num_workers: int, envs_per_worker: int, steps: int) -> float:
    """Rendered Reacher env steps/s through the pool, random actions, no policy."""
    cfg = Config(env="gym_Reacher-v2", pixel_obs_wrapper=True, model="cnn", num_workers=num_workers, envs_per_worker=envs_per_worker,
                 n_steps=64, seed=0, verbose=0, main_steps_envs=False)  # worker processes only: their scaling
    pool = make_env_pool(cfg)
    try:
        s = pool.storage
        rng = np.random.default_rng(0)
        pool.reset(0)
        actions = rng.uniform(-1, 1, size=(steps, *s.env_actions.shape)).astype(s.env_actions.dtype)
        start = time.perf_counter()
        for i in range(steps):
            t = i % s.n_steps
            if t == 0 and i:
                s.carry_over()
            s.env_actions[...] = actions[i]
            pool.step(t)
        return steps * pool.num_envs / (time.perf_counter() - start)
    finally:
        pool.close()


def backend_rows(backend: str, steps: int) -> dict[str, float]:
    """Run pixel_env_stepping for 1 and 2 workers in a subprocess with MUJOCO_GL=backend."""
    env = {**os.environ, "MUJOCO_GL": backend, "PYTHONPATH": ROOT}
    prefix: list[str] = []
    if backend == "glfw":
        env.pop("DISPLAY", None)
        prefix = ["xvfb-run", "-a", "-s", "-screen 0 1400x900x24"]
    code = (
        "import json, sys; sys.path.insert(0, %r); from benchmarks.bench_pixels import pixel_env_stepping as f; "
        "print(json.dumps({'w1': f(1, 2, %d), 'w2': f(2, 2, %d)}))" % (ROOT, steps, steps)
    )
    proc = subprocess.run([*prefix, sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=900)
    if proc.returncode != 0:
        return {"error": proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else f"exit {proc.returncode}"}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def cpu_times() -> list[int]:
    """The machine's cumulative CPU ticks: user nice system idle iowait irq softirq steal."""
    with open("/proc/stat") as f:
        return [int(x) for x in f.readline().split()[1:9]]


def steal_share(start: list[int]) -> str:
    """Share of CPU time the hypervisor took from this machine since ``start`` (noisy neighbours)."""
    delta = [b - a for a, b in zip(start, cpu_times())]
    return f"CPU steal during the run: {100 * delta[7] / max(1, sum(delta)):.1f}%"


def machine_line() -> str:
    cpu = "unknown CPU"
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT).stdout.strip()
    import gymnasium
    import mujoco

    return (f"{time.strftime('%Y-%m-%d')} | commit {commit} | {cpu}, {os.cpu_count()} cpus | torch {torch.__version__}, "
            f"gymnasium {gymnasium.__version__}, mujoco {mujoco.__version__}, numpy {np.__version__}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer repeats (a smoke run)")
    parser.add_argument("--no_log", action="store_true", help="print only; do not append to perf_log.md")
    args = parser.parse_args()
    torch.set_num_threads(1)
    repeats, steps = (2, 100) if args.quick else (8, 400)

    started = cpu_times()
    cnn = cnn_rollout_vs_inference(n_envs=8, n_steps=64, repeats=repeats)
    rows = [
        "| test_dummy 84x84x3 + cnn, 8 envs, 2 workers (main steps worker 0's envs) | rollout (collect_rollout) | "
        f"{cnn['rollout_steps_per_s']:.0f} steps/s | vs NatureCNN policy inference alone at batch 8: "
        f"{cnn['inference_steps_per_s']:.0f} steps/s | ratio **{cnn['ratio']:.2f}** (target >= 0.8) |",
    ]
    for backend in ("egl", "osmesa", "glfw"):
        r = backend_rows(backend, steps)
        if "error" in r:
            rows.append(f"| pixel Reacher-v5 84x84, MUJOCO_GL={backend} | env stepping | failed: {r['error']} | | |")
            continue
        rows.append(
            f"| pixel Reacher-v5 84x84, MUJOCO_GL={backend}{' (xvfb-run)' if backend == 'glfw' else ''} | env stepping, no policy | "
            f"1 worker x 2 envs: {r['w1']:.0f} steps/s | 2 workers x 2 envs: {r['w2']:.0f} steps/s | "
            f"per worker {r['w2'] / 2:.0f} steps/s, scaling 1->2 workers **{r['w2'] / r['w1']:.2f}x** |"
        )
    header = (f"\n### bench_pixels: {machine_line()}\n\ncommand: `python benchmarks/bench_pixels.py{' --quick' if args.quick else ''}` "
              f"({steal_share(started)})\n\n")
    table = "| setting | what | measured | compared with | ratio |\n| --- | --- | --- | --- | --- |\n" + "\n".join(rows) + "\n"
    print(header + table)
    if not args.no_log:
        with open(os.path.join(ROOT, "perf_log.md"), "a") as f:
            f.write(header + table)


if __name__ == "__main__":
    main()
