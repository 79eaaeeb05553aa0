"""What the envs' states in checkpoints cost (ppo_dict.run.env_states): the snapshot each runner takes of its envs at
every rollout's step 0, against the rollout it belongs to, and the checkpoint's size and write time with the envs in it.

Per env, in this process: the median time of one env step and of one state taken (``envs.state.env_state``, what a
snapshot takes per env). A snapshot is one state per env per rollout, and a rollout is ``n_steps`` steps of each env,
so its share of the envs' time is ``state / (n_steps x step)`` at any env count (each process snapshots its own envs).
Then every env's state as a checkpoint holds it (one tree, one uint8 tensor of bytes): its size and the time to pack
and ``torch.save`` it, for ``--envs`` envs::

    python benchmarks/bench_env_state.py [--quick]
"""

from __future__ import annotations

import argparse
import io
import os
import sys
import time

import numpy as np
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from benchmarks.harness import Table, add_log_flags, log_path, machine_times  # noqa: E402
from ppo_dict.envs import AtariOptions, make_env, resolve_env_name  # noqa: E402
from ppo_dict.envs.state import env_state  # noqa: E402
from ppo_dict.run.env_states import saved  # noqa: E402

#: label -> (spec, envs in the checkpoint row)
SETTINGS = {
    "Reacher-v5": (lambda: resolve_env_name("Reacher-v5"), 256),
    "PongNoFrameskip-v4, AtariWrapper, 4 frames": (
        lambda: resolve_env_name("PongNoFrameskip-v4", atari=AtariOptions(30, 4, 84, True, True, 0.0), frame_stack=4),
        8,
    ),
}


def median_seconds(call, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        call()
        times.append(time.perf_counter() - started)
    return float(np.median(times))


def measure(table: Table, label: str, spec, n_envs: int, steps: int) -> None:
    env = make_env(spec)
    env.reset(seed=0)
    env.action_space.seed(0)
    actions = [env.action_space.sample() for _ in range(steps)]
    started = time.perf_counter()
    for action in actions:
        *_, terminated, truncated, _ = env.step(action)
        if terminated or truncated:
            env.reset()
    step = (time.perf_counter() - started) / steps
    state = median_seconds(lambda: env_state(env), max(50, steps // 10))
    table.row(
        label, "one env: step / state taken", f"{step * 1e6:.1f} us / {state * 1e6:.1f} us", "", f"{state / step:.2f} steps"
    )
    for n_steps in (2048, 256):
        table.row(label, f"snapshot's share of a rollout, n_steps {n_steps}", f"{100 * state / (n_steps * step):.3f}%")
    states = [{"env": env_state(env), "problem": "", "return": 0.0, "length": 0} for _ in range(n_envs)]
    buffer = io.BytesIO()
    started = time.perf_counter()
    torch.save(saved(states), buffer)
    took = time.perf_counter() - started
    table.row(
        label,
        f"{n_envs} envs' states in a checkpoint: size, pack and save",
        f"{buffer.tell() / 2**20:.2f} MiB, {took * 1e3:.0f} ms",
        "",
        f"{buffer.tell() / n_envs / 1024:.1f} KiB an env",
    )
    env.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer steps (a smoke run)")
    add_log_flags(parser)
    args = parser.parse_args()
    started = machine_times()
    table = Table()
    for label, (spec, n_envs) in SETTINGS.items():
        measure(table, label, spec(), n_envs, 300 if args.quick else 3000)
    table.write("Env states in checkpoints", "python benchmarks/bench_env_state.py", started, log_path(args))


if __name__ == "__main__":
    main()
