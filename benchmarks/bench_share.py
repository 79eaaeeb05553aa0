"""How many envs the main process should step itself: exact rollouts of Reacher-v5 on the worker
pool with the main process stepping k envs, for k around one worker's share, in interleaved rounds.

Exact rollouts sample every action before any env steps, so no worker steps while the main process
evaluates the policy or keeps its books; a step ends when the slowest process has stepped its
envs. The default share (``--main_envs`` unset) is one worker's, ``envs_per_worker``; each other k is
compared with it (the median of per-round ratios of steps per second). Rows are appended to perf_log.md.

    python benchmarks/bench_share.py [--quick] [--no_log] [--envs 8,32,128] [--workers N]
"""
from __future__ import annotations

import argparse
import os
import sys
import warnings

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from benchmarks.bench import ENV_ID, N_STEPS, ours_config  # noqa: E402
from benchmarks.harness import Table, add_bench_flags, interleave, log_path, machine_times, ppo_dict_contender, ratio_text  # noqa: E402


def shares(n_envs: int, workers: int) -> list[int]:
    """The default share first, then fewer and more envs in the main process (within the layout)."""
    share = n_envs // workers
    return [share] + [k for k in (share - 2, share - 1, share + 1, share + 2) if 0 <= k <= n_envs - (workers - 1)]


def compare(table: Table, n_envs: int, workers: int, rounds: int) -> None:
    setting = f"{ENV_ID}, {n_envs} envs, {workers} workers, MLP 64x64, n_steps {N_STEPS}, exact rollouts"
    contenders = []
    for k in shares(n_envs, workers):
        cfg = ours_config(n_envs, workers, "cpu", main_envs=k)
        contenders.append(ppo_dict_contender(f"main process steps {k} of {n_envs} envs", cfg, training=False))
    try:
        interleave(contenders, rounds)
    finally:
        for c in contenders:
            c.close()
    default = contenders[0]
    table.row(setting, f"rollout, {default.name} (the default: a worker's share)", f"{default.rate:.0f} steps/s, {default.cpu:.0f} CPU-us/step")
    for c in contenders[1:]:
        table.row(setting, f"rollout, {c.name}", f"{c.rate:.0f} steps/s, {c.cpu:.0f} CPU-us/step", "vs the default share", ratio_text(c, default))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_bench_flags(parser, "3 rounds instead of 11 (a smoke run)")
    parser.set_defaults(envs="8,32,128")
    args = parser.parse_args()
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore")
    if args.workers < 2:
        parser.error("the main process steps a share only beside at least one worker: --workers >= 2")
    started, table = machine_times(), Table()
    for n_envs in (int(n) for n in args.envs.split(",")):
        if n_envs % args.workers:
            print(f"skipping {n_envs} envs: not a multiple of {args.workers} workers", flush=True)
            continue
        compare(table, n_envs, args.workers, 3 if args.quick else 11)
    table.write("bench_share", "python benchmarks/bench_share.py" + " ".join(["", *sys.argv[1:]]), started, log_path(args))


if __name__ == "__main__":
    main()
