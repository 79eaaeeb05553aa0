"""Throughput with invalid-action masks: ppo_dict ``--action_masks`` against sb3-contrib's MaskablePPO.

``PPODictMaskedJump-v0`` (Discrete(12), most actions invalid, ``ppo_dict.envs.masked``) with sb3's
MLP (64x64 tanh), n_steps 256, 4 minibatches, 10 epochs. For each env count, in interleaved
rounds: rollouts (collection and GAE) of MaskablePPO on DummyVecEnv and SubprocVecEnv (which ask
every env for its mask through ``env_method`` at every step) against ppo_dict's exact rollouts on
the worker pool (masks written by the workers beside the observation) and in-process; then
training (rollouts and updates), MaskablePPO on its faster vec env against ppo_dict exact. Both
sides update with one torch thread. Rows are appended to perf_log.md.

    python benchmarks/bench_masked.py [--quick] [--no_log] [--envs 8,32]
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from sb3_contrib import MaskablePPO  # noqa: E402
from stable_baselines3.common.env_util import make_vec_env  # noqa: E402
from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv  # noqa: E402

from benchmarks.harness import (  # noqa: E402
    Contender,
    Table,
    add_bench_flags,
    interleave,
    log_path,
    machine_times,
    ppo_dict_contender,
    ratio_text,
    sb3_model_contender,
)
from ppo_dict.core.config import Config  # noqa: E402

#: "module:id" makes gymnasium import the module (and so register the id) in sb3's subprocesses too
SB3_ENV_ID = "ppo_dict.envs.masked:PPODictMaskedJump-v0"
N_STEPS = 256


def maskable_contender(name: str, vec_env_cls, n_envs: int, training: bool) -> Contender:
    venv = make_vec_env(SB3_ENV_ID, n_envs=n_envs, seed=0, vec_env_cls=vec_env_cls)
    model = MaskablePPO(
        "MlpPolicy", venv, n_steps=N_STEPS, batch_size=N_STEPS * n_envs // 4, n_epochs=10, seed=0, verbose=0, device="cpu"
    )
    return sb3_model_contender(name, model, training)  # MaskablePPO's collect_rollouts asks for the masks


def ours_config(n_envs: int, num_workers: int) -> Config:
    # one update thread, as the sb3-contrib side has (torch.set_num_threads(1)): on a shared 2-core
    # machine two update threads wait on each other for whole time slices (60 s instead of 1 s)
    return Config(
        update_threads=1,
        env="gym_PPODictMaskedJump-v0",
        gym_packages="ppo_dict.envs.masked",
        action_masks=True,
        n_envs=n_envs,
        num_workers=num_workers,
        n_steps=N_STEPS,
        batch_size=N_STEPS * n_envs // 4,
        n_epochs=10,
        seed=0,
        verbose=0,
        device="cpu",
        total_timesteps=10**12,
    )


def rollouts(table: Table, n_envs: int, workers: int, rounds: int) -> float:
    """The rollout rows; returns the faster MaskablePPO's steps/s (its vec env is then used for training)."""
    setting = f"PPODictMaskedJump-v0 (Discrete 12, masks), {n_envs} envs, MLP 64x64, n_steps {N_STEPS}"
    dummy = maskable_contender("MaskablePPO DummyVecEnv", DummyVecEnv, n_envs, training=False)
    subproc = maskable_contender("MaskablePPO SubprocVecEnv (one process per env)", SubprocVecEnv, n_envs, training=False)
    exact = ppo_dict_contender(
        f"ppo_dict --action_masks, {workers} workers, exact", ours_config(n_envs, workers), False, iterations=2
    )
    in_process = ppo_dict_contender(
        "ppo_dict --action_masks in-process (--num_workers 0)", ours_config(n_envs, 0), False, iterations=2
    )
    contenders = [dummy, subproc, exact, in_process]
    try:
        interleave(contenders, rounds)
        best = max((dummy, subproc), key=lambda c: c.rate)
        for c in contenders:
            ours = c in (exact, in_process)
            table.row(
                setting,
                f"rollout, {c.name}",
                f"{c.rate:.0f} steps/s, {c.cpu:.0f} CPU-us/step",
                f"vs {best.name}" if ours else "",
                ratio_text(c, best, 2.0 if c is exact else None) if ours else "",
            )
        return DummyVecEnv if best is dummy else SubprocVecEnv
    finally:
        for c in contenders:
            c.close()


def training(table: Table, n_envs: int, workers: int, rounds: int, vec_env_cls) -> None:
    setting = f"PPODictMaskedJump-v0 (masks), {n_envs} envs, n_steps {N_STEPS}, batch {N_STEPS * n_envs // 4}, 10 epochs"
    sb3 = maskable_contender(f"MaskablePPO {vec_env_cls.__name__}", vec_env_cls, n_envs, training=True)
    exact = ppo_dict_contender("ppo_dict --action_masks exact", ours_config(n_envs, workers), True, iterations=2)
    try:
        interleave([sb3, exact], rounds)
        timing = exact.model.timing
        table.row(
            setting,
            f"training fps, ppo_dict exact (update threads {timing.update_threads}) vs {sb3.name}",
            f"{exact.rate:.0f} vs {sb3.rate:.0f} steps/s; {exact.cpu:.0f} vs {sb3.cpu:.0f} CPU-us/step",
            f"time in the last 2 iterations: rollouts {timing.rollout:.2f} s, updates {timing.update:.2f} s",
            ratio_text(exact, sb3, 2.0),
        )
    finally:
        for c in (sb3, exact):
            c.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_bench_flags(parser, "fewer rounds (a smoke run)")
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)
    rounds, train_rounds = (2, 1) if args.quick else (5, 3)
    started, table = machine_times(), Table()
    for n_envs in (int(n) for n in args.envs.split(",")):
        best = rollouts(table, n_envs, args.workers, rounds)
        training(table, n_envs, args.workers, train_rounds, best)
    flags = " ".join(f for f in (args.quick and "--quick", args.envs != "8,32" and f"--envs {args.envs}") if f)
    table.write("bench_masked", f"python benchmarks/bench_masked.py {flags}".strip(), started, log=log_path(args))


if __name__ == "__main__":
    main()
