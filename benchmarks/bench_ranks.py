"""What training over ranks costs on one host: 2 ranks (gloo, this host) against one process with the same workers.

For each env count, the same run twice: one process with ``--workers`` worker processes, and two ranks
(``ppo_dict.algo.ranks``) with half of them each, each rank pinned to its half of the CPUs as torchrun's ranks
pin themselves (``ppo_dict.run.ranks.join_ranks``). Both train ``--iterations`` iterations after one warm-up iteration;
the rows give the rollout's time per vectorised step and the update's time per update, and, for the ranks, the
time spent inside the collectives (rank 0's clock; it includes waiting for the other rank): the per-step gather of
``VecNormalize``'s batch and the rollout's episodes (per rollout step), the update's gather and per-minibatch sums (per
update). Rows are appended to perf_log.md.

    python benchmarks/bench_ranks.py [--envs 8,64] [--workers 2] [--iterations 5] [--quick] [--no_log]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import socket
import sys
import time
from collections import defaultdict
from typing import Any, Iterator

import torch
import torch.multiprocessing as mp

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from benchmarks.harness import Table, add_log_flags, log_path, machine_times  # noqa: E402
from ppo_dict.algo.ranks import Ranks  # noqa: E402
from ppo_dict.algo.ppo import PPO  # noqa: E402
from ppo_dict.core.config import Config  # noqa: E402
from ppo_dict.core.logger import Logger  # noqa: E402
from ppo_dict.run.ranks import join_ranks  # noqa: E402
from ppo_dict.vec import make_env_pool  # noqa: E402

#: what a collective's ``what`` names, by phase
UPDATE_WHATS = ("the update's gather of the buffer", "the update's minibatch figures", "the update's gradient sum")


class TimedRanks(Ranks):
    """:class:`Ranks` that adds up the seconds spent in each kind of collective."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.seconds: dict[str, float] = defaultdict(float)

    @contextlib.contextmanager
    def collective(self, what: str) -> Iterator[None]:
        started = time.perf_counter()
        with super().collective(what):
            yield
        self.seconds[what] += time.perf_counter() - started


def config(n_envs: int, workers: int, iterations: int) -> Config:
    """Reacher-v5 with bench.py's training settings, ``workers`` worker processes (the main process steps none)."""
    return Config(
        env="gym_Reacher-v2",
        model="mlp",
        n_envs=n_envs,
        n_steps=64,
        batch_size=64 * n_envs // 4,
        n_epochs=10,
        seed=0,
        normalize=True,
        num_workers=workers,
        main_steps_envs=False,
        verbose=0,
        device="cpu",
        torch_threads=1,
        update_threads=1,
        total_timesteps=64 * n_envs * (iterations + 1),
    )


def train(ppo: PPO, iterations: int) -> dict[str, float]:
    """One warm-up iteration, then ``iterations`` timed: seconds of rollout and update."""
    ppo.learn(ppo.cfg.rollout_size, log_interval=None)
    ranks = ppo.ranks
    if isinstance(ranks, TimedRanks):
        ranks.seconds.clear()
    ppo.learn(ppo.cfg.rollout_size * (iterations + 1), log_interval=None)  # learn() starts its own Timing
    return {"rollout": ppo.timing.rollout, "update": ppo.timing.update}


def _rank(rank: int, n_envs: int, workers: int, iterations: int, port: int, out: Any) -> None:
    environ = {
        "RANK": str(rank),
        "WORLD_SIZE": "2",
        "LOCAL_RANK": str(rank),
        "LOCAL_WORLD_SIZE": "2",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port),
    }
    os.environ.update(environ)
    info = join_ranks(environ)
    cfg = config(n_envs, workers // 2, iterations)
    ranks = TimedRanks(info, cfg.num_envs)
    pool = make_env_pool(cfg, None, cfg.layout(rank=info))
    with PPO(cfg, pool, Logger(verbose=0), ranks=ranks) as ppo:
        times = train(ppo, iterations)
    if rank == 0:
        out.put({**times, "collectives": dict(ranks.seconds)})
    torch.distributed.destroy_process_group()


def two_ranks(n_envs: int, workers: int, iterations: int) -> dict[str, Any]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    context = mp.get_context("spawn")
    out = context.Queue()
    mp.start_processes(_rank, args=(n_envs, workers, iterations, port, out), nprocs=2, join=True, start_method="spawn")
    return out.get()


def one_process(n_envs: int, workers: int, iterations: int) -> dict[str, float]:
    cfg = config(n_envs, workers, iterations)
    with PPO(cfg, make_env_pool(cfg), Logger(verbose=0)) as ppo:
        return train(ppo, iterations)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--envs", default="8,64", help="env counts, comma-separated")
    parser.add_argument("--workers", type=int, default=2, help="worker processes in all (each rank takes half)")
    parser.add_argument("--iterations", type=int, default=5, help="timed training iterations per run")
    parser.add_argument("--quick", action="store_true", help="one timed iteration")
    add_log_flags(parser)
    args = parser.parse_args()
    iterations = 1 if args.quick else args.iterations
    table, started = Table(), machine_times()
    for n_envs in (int(n) for n in args.envs.split(",")):
        setting = (
            f"Reacher-v5, {n_envs} envs, MLP 64x64, n_steps 64, 4 minibatches, 10 epochs, --normalize, "
            f"{args.workers} workers in all"
        )
        single, ranks = one_process(n_envs, args.workers, iterations), two_ranks(n_envs, args.workers, iterations)
        steps, updates = 64 * iterations, iterations
        seconds = ranks["collectives"]
        in_update = sum(v for k, v in seconds.items() if k in UPDATE_WHATS)
        in_rollout = sum(v for k, v in seconds.items() if k not in UPDATE_WHATS and k != "the stop check")
        table.row(setting, "rollout step, 1 process", f"{1e6 * single['rollout'] / steps:.0f} us")
        table.row(
            setting,
            "rollout step, 2 ranks",
            f"{1e6 * ranks['rollout'] / steps:.0f} us, of which collectives {1e6 * in_rollout / steps:.0f} us",
            "1 process",
            f"**{single['rollout'] / ranks['rollout']:.2f}x**",
        )
        table.row(setting, "update, 1 process", f"{1e3 * single['update'] / updates:.0f} ms")
        table.row(
            setting,
            "update, 2 ranks",
            f"{1e3 * ranks['update'] / updates:.0f} ms, of which collectives {1e3 * in_update / updates:.0f} ms",
            "1 process",
            f"**{single['update'] / ranks['update']:.2f}x**",
        )
    table.write("bench_ranks", "python benchmarks/bench_ranks.py " + " ".join(sys.argv[1:]), started, log_path(args))


if __name__ == "__main__":
    main()
