"""Pixel pipeline benchmark: is the pipeline the bottleneck, and how does rendering scale?

In one run on one machine, in interleaved rounds:
  1. test_dummy (84x84x3 uint8) + cnn: rollout throughput of exact and double-buffered rollouts
     through the worker pool, against the NatureCNN policy step alone on a batch of the same size
     (double-buffered target >= 0.95: the envs and the bookkeeping hide behind the policy).
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

from benchmarks.harness import Contender, Table, add_log_flags, interleave, log_path, machine_times, ratio_text  # noqa: E402
from ppo_dict.algo.ppo import PPO  # noqa: E402
from ppo_dict.algo.rollout.rollout_step import PolicyStep  # noqa: E402
from ppo_dict.core.config import Config, physical_cores  # noqa: E402
from ppo_dict.run.run_plan import build_env_pool  # noqa: E402
from ppo_dict.vec import make_env_pool  # noqa: E402


def cnn_rollout_vs_inference(table: Table, n_envs: int, workers: int, device: str, n_steps: int, rounds: int) -> None:
    """test_dummy + NatureCNN: exact and double-buffered rollouts through the worker pool against the
    policy step alone on a batch of the same size (n_envs, and n_envs / 2 for the double-buffered halves)."""
    contenders, models = [], []
    for double_buffer in (False, True):
        cfg = Config(
            env="test_dummy",
            model="cnn",
            n_envs=n_envs,
            num_workers=workers,
            n_steps=n_steps,
            seed=0,
            verbose=0,
            device=device,
            double_buffer=double_buffer,
        )
        model = PPO(cfg, build_env_pool(cfg))
        model.start_envs()
        models.append(model)

        def run(model=model) -> int:
            model.collect_rollout()
            model.storage.carry_over()
            return model.storage.n_steps * model.n_envs

        contenders.append(
            Contender(
                "--double_buffer" if double_buffer else "exact", run, lambda m=model: [os.getpid(), *m.pool.pids], model.close
            )
        )
    model = models[0]  # the exact run's policy and observations feed the inference rows
    for batch in (n_envs, n_envs // 2):
        step = PolicyStep(model.policy, batch)
        obs = model.collector.step_obs(0)[:batch]

        def infer(step=step, obs=obs, batch=batch) -> int:
            for _ in range(n_steps):
                step(obs)
            return n_steps * batch

        contenders.append(Contender(f"NatureCNN policy step alone, batch {batch}", infer))
    try:
        interleave(contenders, rounds)
        exact, double, full, half = contenders
        setting = f"test_dummy 84x84x3 + cnn, {n_envs} envs, {workers} workers, device {device}"
        table.row(
            setting,
            "rollout, exact (one batch of all envs per step)",
            f"{exact.rate:.0f} steps/s, {exact.cpu:.0f} CPU-us/step",
            f"vs the policy step alone at batch {n_envs}: {full.rate:.0f} steps/s",
            ratio_text(exact, full),
        )
        table.row(
            setting,
            "rollout, --double_buffer (halves of the envs alternate)",
            f"{double.rate:.0f} steps/s, {double.cpu:.0f} CPU-us/step",
            f"vs the policy step alone at batch {n_envs // 2}: {half.rate:.0f} steps/s",
            ratio_text(double, half, 0.95),
        )
    finally:
        for c in contenders:
            c.close()


def pixel_env_stepping(num_workers: int, envs_per_worker: int, steps: int) -> float:
    """Rendered Reacher env steps/s through the pool, random actions, no policy."""
    cfg = Config(
        env="gym_Reacher-v2",
        pixel_obs_wrapper=True,
        model="cnn",
        num_workers=num_workers,
        envs_per_worker=envs_per_worker,
        n_steps=64,
        seed=0,
        verbose=0,
        main_steps_envs=False,
    )  # worker processes only: their scaling
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer rounds (a smoke run)")
    add_log_flags(parser)
    parser.add_argument("--workers", type=int, default=physical_cores(), help="worker processes (default: the physical cores)")
    parser.add_argument("--n_envs", type=int, default=8, help="test_dummy envs")
    parser.add_argument("--device", default="cpu", help="torch device (cuda on a GPU machine)")
    parser.add_argument("--no_render", action="store_true", help="skip the rendered-Reacher rows (no GL here)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    rounds, steps = (2, 100) if args.quick else (5, 400)
    started, table = machine_times(), Table()
    cnn_rollout_vs_inference(table, args.n_envs, args.workers, args.device, n_steps=32 if args.quick else 64, rounds=rounds)
    for backend in () if args.no_render else ("egl", "osmesa", "glfw"):
        r = backend_rows(backend, steps)
        if "error" in r:
            table.row(f"pixel Reacher-v5 84x84, MUJOCO_GL={backend}", "env stepping", f"failed: {r['error']}")
            continue
        table.row(
            f"pixel Reacher-v5 84x84, MUJOCO_GL={backend}{' (xvfb-run)' if backend == 'glfw' else ''}",
            "env stepping, no policy",
            f"1 worker x 2 envs: {r['w1']:.0f} steps/s",
            f"2 workers x 2 envs: {r['w2']:.0f} steps/s",
            f"per worker {r['w2'] / 2:.0f} steps/s, scaling 1->2 workers **{r['w2'] / r['w1']:.2f}x**",
        )
    flags = " ".join(f for f in (args.quick and "--quick", args.device != "cpu" and f"--device {args.device}") if f)
    table.write("bench_pixels", f"python benchmarks/bench_pixels.py {flags}".strip(), started, log=log_path(args))


if __name__ == "__main__":
    main()
