"""Atari throughput: Breakout with the CNN, ppo_dict against sb3 with the same wrappers, side by side.

Both sides run sb3's recipe: for sb3, ``make_atari_env`` (AtariWrapper, Monitor beneath it) +
``VecFrameStack(4)`` + ``CnnPolicy`` on its ``DummyVecEnv`` and its ``SubprocVecEnv`` (one process
per env); for ppo_dict, ``--atari_wrapper True --frame_stack 4 --model cnn`` on its worker pool,
exact (bit for bit sb3's numbers) and ``--double_buffer``. rl-zoo's atari hyperparameters:
n_steps 128, batch 256, 4 epochs. For 8 and 32 envs, in interleaved rounds (``harness.py``):
  1. rollouts (collection and GAE), steps/s and CPU time per env step of this process and its
     env processes;
  2. training (rollout, GAE and 4 epochs of updates: one iteration per round), steps/s.
Every comparison is the median of per-round ratios. Rows are appended to perf_log.md.

    python benchmarks/bench_atari.py [--quick] [--no_log | --log FILE] [--envs 8,32] [--rounds 3] [--train_rounds 1]

The defaults take 5-10 minutes on 2 cores; a training iteration of 32 envs (4096 steps, 64
minibatches of NatureCNN) takes half a minute per contender there, most of it the update.
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import ale_py  # noqa: E402  (registers the Atari ids for sb3's gym.make)
from stable_baselines3 import PPO as SB3PPO  # noqa: E402
from stable_baselines3.common.env_util import make_atari_env  # noqa: E402
from stable_baselines3.common.utils import LinearSchedule  # noqa: E402
from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv, VecFrameStack  # noqa: E402

from benchmarks.harness import (  # noqa: E402
    Contender,
    Table,
    add_bench_flags,
    interleave,
    log_path,
    machine_times,
    ppo_dict_contender,
    ratio_text,
)
from ppo_dict.core.config import Config  # noqa: E402

GAME = "BreakoutNoFrameskip-v4"
#: rl-zoo's atari entry (hyperparams/ppo.yml), linear schedules apart
ZOO = dict(n_steps=128, batch_size=256, n_epochs=4, ent_coef=0.01, vf_coef=0.5)


def sb3_contender(name: str, vec_env_cls, n_envs: int, training: bool) -> Contender:
    venv = VecFrameStack(make_atari_env(GAME, n_envs=n_envs, seed=0, vec_env_cls=vec_env_cls), 4)
    model = SB3PPO(
        "CnnPolicy",
        venv,
        seed=0,
        verbose=0,
        device="cpu",
        learning_rate=LinearSchedule(2.5e-4, 0.0, 1.0),
        clip_range=LinearSchedule(0.1, 0.0, 1.0),
        **ZOO,
    )
    rollout = ZOO["n_steps"] * n_envs
    if training:

        def run() -> int:
            model.learn(rollout, reset_num_timesteps=False)
            return rollout
    else:
        _, callback = model._setup_learn(10**12, None)
        callback.on_training_start(locals(), globals())

        def run() -> int:
            model.collect_rollouts(model.env, callback, model.rollout_buffer, n_rollout_steps=ZOO["n_steps"])  # GAE included
            return rollout

    processes = getattr(venv.venv, "processes", [])
    return Contender(name, run, lambda: [os.getpid(), *(p.pid for p in processes)], venv.close)


def ours_contender(name: str, n_envs: int, workers: int, training: bool, **changes) -> Contender:
    cfg = Config(
        env=f"gym_{GAME}",
        atari_wrapper=True,
        frame_stack=4,
        model="cnn",
        n_envs=n_envs,
        num_workers=workers,
        seed=0,
        verbose=0,
        device="cpu",
        learning_rate="lin_2.5e-4",
        clip_range="lin_0.1",
        total_timesteps=10**12,
        **ZOO,
        **changes,
    )
    return ppo_dict_contender(name, cfg, training)


def contenders(n_envs: int, workers: int, training: bool) -> list[Contender]:
    """sb3 DummyVecEnv, sb3 SubprocVecEnv, ppo_dict exact, ppo_dict --double_buffer."""
    return [
        sb3_contender("sb3 DummyVecEnv", DummyVecEnv, n_envs, training),
        sb3_contender("sb3 SubprocVecEnv (one process per env)", SubprocVecEnv, n_envs, training),
        ours_contender(f"ppo_dict, {workers} workers, exact", n_envs, workers, training),
        ours_contender(f"ppo_dict, {workers} workers, --double_buffer", n_envs, workers, training, double_buffer=True),
    ]


def compare(table: Table, n_envs: int, workers: int, rounds: int, training: bool) -> None:
    what = "training (1 iteration: rollout + 4 epochs, batch 256)" if training else "rollout (n_steps 128, GAE)"
    setting = f"{GAME} + AtariWrapper + 4 frames, NatureCNN, {n_envs} envs"
    sides = contenders(n_envs, workers, training)
    try:
        interleave(sides, rounds)
        dummy, subproc = sides[:2]
        for c in sides:
            cpu = f"{c.cpu / 1000:.2f} CPU-s per 1000 env steps"
            if c in (dummy, subproc):
                table.row(setting, f"{what}, {c.name}", f"{c.rate:.0f} steps/s, {cpu}")
                continue
            table.row(
                setting,
                f"{what}, {c.name}",
                f"{c.rate:.0f} steps/s, {cpu}",
                f"vs sb3 SubprocVecEnv {ratio_text(c, subproc)}",
                f"vs sb3 DummyVecEnv {ratio_text(c, dummy)}",
            )
    finally:
        for c in sides:
            c.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_bench_flags(parser, "8 envs, one round (a smoke run)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of rollouts")
    parser.add_argument("--train_rounds", type=int, default=1, help="rounds of training iterations")
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)
    envs, rounds, train_rounds = ("8", 1, 1) if args.quick else (args.envs, args.rounds, args.train_rounds)
    started, table = machine_times(), Table()
    for n_envs in (int(n) for n in envs.split(",")):
        compare(table, n_envs, args.workers, rounds, training=False)
        compare(table, n_envs, args.workers, train_rounds, training=True)
    flags = " ".join(
        f
        for f in (
            args.quick and "--quick",
            args.envs != "8,32" and f"--envs {args.envs}",
            args.rounds != 3 and f"--rounds {args.rounds}",
            args.train_rounds != 1 and f"--train_rounds {args.train_rounds}",
        )
        if f
    )
    table.write(
        f"bench_atari (ale-py {ale_py.__version__})",
        f"python benchmarks/bench_atari.py {flags}".strip(),
        started,
        log=log_path(args),
    )


if __name__ == "__main__":
    main()
