"""sb3's Python API: a documentation-style script under both imports, and the command line's run of the same config.

Training (rollouts and updates), side by side in one process, interleaved rounds, torch at one
thread on every side (as the process has it: neither API sets it):

  1. the issue's example: Pendulum-v1, one env, n_steps 1024, gamma 0.9, gSDE;
  2. Reacher-v5, 8 envs, n_steps 256, 4 minibatches, 10 epochs (bench.py's training config).

Contenders: ``stable_baselines3.PPO`` on sb3's ``make_vec_env``; ``ppo_dict.PPO`` with only the import
changed (an id: ppo_dict's pool; sb3's ``make_vec_env``: stepped as sb3 steps it); ``ppo_dict.PPO`` on
``ppo_dict.make_vec_env`` (the trainer's worker pool); and ppo_dict's trainer built as the command
line builds it from the same config (``plan_run``). Every comparison is the median of per-round
ratios; CPU time per env step sums this process and its workers. Rows are appended to perf_log.md.

    python benchmarks/bench_api.py [--quick] [--no_log]
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from stable_baselines3 import PPO as SB3PPO  # noqa: E402
from stable_baselines3.common.env_util import make_vec_env as sb3_make_vec_env  # noqa: E402

import ppo_dict  # noqa: E402
from benchmarks.harness import (  # noqa: E402
    Contender,
    Table,
    add_log_flags,
    interleave,
    log_path,
    machine_times,
    ppo_dict_contender,
    ratio_text,
    sb3_model_contender,
)
from ppo_dict.core.config import Config  # noqa: E402

#: (setting, env id, n_envs, sb3's keyword arguments)
SETTINGS = [
    (
        "the issue's example: Pendulum-v1, 1 env, n_steps 1024, gamma 0.9, gSDE",
        "Pendulum-v1",
        1,
        dict(n_steps=1024, gamma=0.9, use_sde=True),
    ),
    (
        "Reacher-v5, 8 envs, MLP 64x64, n_steps 256, 4 minibatches, 10 epochs",
        "Reacher-v5",
        8,
        dict(n_steps=256, batch_size=512, n_epochs=10),
    ),
]


def api_contender(name: str, model, iterations: int = 2) -> Contender:
    """``ppo_dict.PPO`` (sb3's API): per round ``iterations`` training iterations, as sb3's contender runs."""
    rollout = model.n_steps * model.n_envs

    def run() -> int:
        model.learn(iterations * rollout, reset_num_timesteps=False)
        return iterations * rollout

    return Contender(name, run, lambda: [os.getpid(), *model.trainer.pool.pids], model.close)


def command_line_config(env_id: str, n_envs: int, kwargs: dict) -> Config:
    """The command line's config for sb3's keyword arguments (``--torch_threads 1 --update_threads 1``, as the process
    runs)."""
    return Config(
        env=f"gym_{env_id}",
        n_envs=n_envs,
        seed=0,
        verbose=0,
        device="cpu",
        total_timesteps=10**12,
        torch_threads=1,
        update_threads=1,
        **kwargs,
    )


def compare(table: Table, setting: str, env_id: str, n_envs: int, kwargs: dict, rounds: int) -> None:
    sb3 = sb3_model_contender(
        "stable_baselines3.PPO",
        SB3PPO("MlpPolicy", sb3_make_vec_env(env_id, n_envs=n_envs), seed=0, device="cpu", **kwargs),
        training=True,
    )
    changed = ppo_dict.PPO("MlpPolicy", env_id if n_envs == 1 else sb3_make_vec_env(env_id, n_envs=n_envs), seed=0, **kwargs)
    contenders = [
        sb3,
        api_contender("ppo_dict.PPO, the import changed" + ("" if n_envs == 1 else " (sb3's make_vec_env)"), changed),
    ]
    if n_envs > 1:
        contenders.append(
            api_contender(
                "ppo_dict.PPO on ppo_dict.make_vec_env",
                ppo_dict.PPO("MlpPolicy", ppo_dict.make_vec_env(env_id, n_envs=n_envs), seed=0, **kwargs),
            )
        )
    cli = ppo_dict_contender(
        "ppo_dict's trainer as the command line builds it", command_line_config(env_id, n_envs, kwargs), True, iterations=2
    )
    contenders.append(cli)
    interleave(contenders, rounds)
    for c in contenders:
        table.row(setting, c.name, f"{c.rate:,.0f} steps/s, {c.cpu:.1f} CPU-us/step")
    for c in contenders[1:-1]:
        table.row(setting, f"{c.name} against sb3", "", sb3.name, ratio_text(c, sb3))
        table.row(setting, f"{c.name} against the command line", "", cli.name, ratio_text(c, cli))
    for c in contenders:
        c.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="3 rounds instead of 7")
    add_log_flags(parser)
    args = parser.parse_args()
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore")
    started, table = machine_times(), Table()
    for setting, env_id, n_envs, kwargs in SETTINGS:
        compare(table, setting, env_id, n_envs, kwargs, 3 if args.quick else 7)
    table.write(
        "bench_api.py (sb3's Python API under both imports, and the command line)",
        " ".join(["python benchmarks/bench_api.py", *sys.argv[1:]]),
        started,
        log_path(args),
    )


if __name__ == "__main__":
    main()
