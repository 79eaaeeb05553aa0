"""Training beside other work: ppo_dict and sb3 on a machine whose CPUs other processes keep busy.

A shared machine is what many users have. With ``--burners N`` processes spinning on the CPUs (started before
either trainer is built, as a user starts a run on a busy machine), each setting trains in interleaved rounds
with sb3's PPO on ``DummyVecEnv`` and with ppo_dict on its default layout (which looks at the CPUs' load at start,
``ppo_dict.core.load``), and the same without the burners first. Settings: rl-zoo's CartPole-v1 (8 envs, n_steps
32, batch 256, 20 epochs) and Reacher-v5 at 8 envs (n_steps 256, 4 minibatches, 10 epochs)::

    python benchmarks/bench_load.py [--burners 2] [--quick]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import sys
import time
import warnings

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from stable_baselines3 import PPO as SB3PPO  # noqa: E402
from stable_baselines3.common.env_util import make_vec_env  # noqa: E402

from benchmarks.harness import (  # noqa: E402
    Table,
    add_log_flags,
    interleave,
    log_path,
    machine_times,
    ppo_dict_contender,
    ratio_text,
    sb3_model_contender,
)
from ppo_dict.core import load  # noqa: E402
from ppo_dict.core.config import Config  # noqa: E402

#: env id -> (sb3's PPO keywords, ppo_dict's Config keywords); rl-zoo's CartPole entry, and make bench's Reacher at 8 envs
SETTINGS = {
    "CartPole-v1": (
        dict(
            n_steps=32,
            batch_size=256,
            gae_lambda=0.8,
            gamma=0.98,
            n_epochs=20,
            ent_coef=0.0,
            learning_rate=lambda p: p * 1e-3,
            clip_range=lambda p: p * 0.2,
        ),
        dict(
            n_steps=32,
            batch_size=256,
            gae_lambda=0.8,
            gamma=0.98,
            n_epochs=20,
            ent_coef=0.0,
            learning_rate="lin_1e-3",
            clip_range="lin_0.2",
        ),
    ),
    "Reacher-v5": (dict(n_steps=256, batch_size=512, n_epochs=10), dict(n_steps=256, batch_size=512, n_epochs=10)),
}
N_ENVS = 8


def burn(stop_at: float) -> None:
    """Spin until ``stop_at`` (time.monotonic()): a CPU kept busy by another program."""
    while time.monotonic() < stop_at:
        pass


def contenders(env_id: str) -> list:
    sb3_kwargs, ours = SETTINGS[env_id]
    venv = make_vec_env(env_id, n_envs=N_ENVS, seed=0)
    sb3 = sb3_model_contender(
        "sb3 DummyVecEnv", SB3PPO("MlpPolicy", venv, seed=0, verbose=0, device="cpu", **sb3_kwargs), training=True
    )
    cfg = Config(env=f"gym_{env_id}", n_envs=N_ENVS, seed=0, verbose=0, device="cpu", total_timesteps=10**12, **ours)
    load._at_start = None  # the layout looks at the CPUs now, as a run started now would
    return [sb3, ppo_dict_contender(f"ppo_dict, default layout ({cfg.layout().text()})", cfg, training=True, iterations=2)]


def measure(table: Table, burners: int, rounds: int) -> None:
    ctx = multiprocessing.get_context("fork")
    for loaded in (False, True):
        for env_id in SETTINGS:
            procs = [
                ctx.Process(target=burn, args=(time.monotonic() + 3600,), daemon=True) for _ in range(burners if loaded else 0)
            ]
            for p in procs:
                p.start()
            sides = []
            try:
                time.sleep(0.5 if procs else 0)
                sides = contenders(env_id)
                interleave(sides, rounds)
                sb3, ours = sides
                where = f"beside {burners} CPU burners" if loaded else "quiet"
                setting = f"{env_id}, {N_ENVS} envs, training, {where}"
                table.row(
                    setting,
                    f"training, {ours.name}",
                    f"{ours.rate:.0f} steps/s, {ours.cpu:.0f} CPU-us/step",
                    f"vs {sb3.name}: {sb3.rate:.0f} steps/s",
                    ratio_text(ours, sb3, 1.0 if loaded else None),
                )
            finally:
                for c in sides:
                    c.close()
                for p in procs:
                    p.kill()
                    p.join()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_log_flags(parser)
    parser.add_argument("--quick", action="store_true", help="one round instead of five")
    parser.add_argument("--burners", type=int, default=2, help="processes spinning on the CPUs (default 2)")
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)
    started, table = machine_times(), Table()
    measure(table, args.burners, 1 if args.quick else 5)
    table.write("bench_load", "python benchmarks/bench_load.py " + " ".join(sys.argv[1:]), started, log=log_path(args))


if __name__ == "__main__":
    main()
