"""How many envs the main process should step itself: exact rollouts of Reacher-v5 on the worker
pool with the main process stepping k envs, for k around its default share, in interleaved rounds.

Exact rollouts sample every action before any env steps, so no worker steps while the main process
evaluates the policy or keeps the books it cannot defer; it then wakes each worker and steps its own
envs, doing the books it owes while it waits; a step ends when the slowest process has stepped its
envs. The default share (``--main_envs`` unset: :func:`~ppo_dict.core.layout.main_share`) is
compared with shares a sixteenth, an eighth and a quarter smaller and a sixteenth larger (the median
of per-round ratios of steps per second). Rows are appended to perf_log.md.

    python benchmarks/bench_share.py [--quick] [--no_log] [--envs 8,32,256] [--workers N]

``--workers``: ``--num_workers`` (this process counted as one; default: the default layout's).
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings
from typing import Optional

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from benchmarks.bench import ENV_ID, N_STEPS, ours_config  # noqa: E402
from benchmarks.harness import (  # noqa: E402
    Table,
    add_bench_flags,
    interleave,
    log_path,
    machine_times,
    ppo_dict_contender,
    ratio_text,
)


def shares(n_envs: int, workers: Optional[int]) -> tuple[list[int], int]:
    """The default share first (:meth:`Config.layout` for ``--num_workers workers``, this process counted as
    one; None: the default layout's), then fewer and more envs in the main process, in steps of about a
    sixteenth of it; and the worker processes beside it."""
    layout = ours_config(n_envs, workers, "cpu").layout()
    share, step = layout.main, max(1, layout.main // 16)
    others = [share + d * step for d in (-4, -2, -1, 1)]
    return [share] + [k for k in others if 1 <= k <= n_envs - layout.processes and k != share], layout.processes


def compare(table: Table, n_envs: int, workers: Optional[int], rounds: int) -> None:
    ks, processes = shares(n_envs, workers)
    if not ks[0]:
        print(f"skipping {n_envs} envs: the main process steps none of them there", flush=True)
        return
    setting = f"{ENV_ID}, {n_envs} envs, {processes} worker processes, MLP 64x64, n_steps {N_STEPS}, exact rollouts"
    contenders = []
    for k in ks:
        cfg = ours_config(n_envs, processes + 1, "cpu", main_envs=k)
        contenders.append(ppo_dict_contender(f"main process steps {k} of {n_envs} envs", cfg, training=False))
    try:
        interleave(contenders, rounds)
    finally:
        for c in contenders:
            c.close()
    default = contenders[0]
    table.row(
        setting, f"rollout, {default.name} (the default share)", f"{default.rate:.0f} steps/s, {default.cpu:.0f} CPU-us/step"
    )
    for c in contenders[1:]:
        table.row(
            setting,
            f"rollout, {c.name}",
            f"{c.rate:.0f} steps/s, {c.cpu:.0f} CPU-us/step",
            "vs the default share",
            ratio_text(c, default),
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_bench_flags(parser, "3 rounds instead of 11 (a smoke run)")
    parser.set_defaults(envs="8,32,256", workers=None)
    args = parser.parse_args()
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore")
    if args.workers is not None and args.workers < 1:
        parser.error("the main process steps a share only beside at least one worker process: --workers >= 1")
    started, table = machine_times(), Table()
    for n_envs in (int(n) for n in args.envs.split(",")):
        compare(table, n_envs, args.workers, 3 if args.quick else 11)
    table.write("bench_share", "python benchmarks/bench_share.py" + " ".join(["", *sys.argv[1:]]), started, log_path(args))


if __name__ == "__main__":
    main()
