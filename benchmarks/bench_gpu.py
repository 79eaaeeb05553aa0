"""The CUDA path against the CPU and against sb3 on CUDA, side by side in one run (issue 40's rows and targets).

In interleaved rounds on one host:
  1. Reacher-v5 rollouts at 64 and 256 envs: ``--device cpu`` against ``--device cuda`` and
     ``--device cuda --cuda_graphs`` (targets: cuda >= cpu at 64 envs, >= 1.5x at 256);
  2. Reacher-v5 training at 8 envs, n_steps 256, with sb3's default minibatch (64) and 10 epochs: cpu against cuda
     (the update loop without host work per minibatch) and against sb3 on cuda (targets: >= cpu, >= 2x sb3);
  3. test_dummy 84x84x3 + cnn at 32 envs: cuda rollouts against the NatureCNN policy step alone at that
     batch (target >= 0.8), and training (4 epochs, minibatch 1024) against sb3 on cuda with the same
     settings (target >= 3x); the cpu's rollouts beside;
  4. ``--learning`` (not in the 8 minutes): rl-zoo's CartPole settings on cpu and cuda over 3 seeds.
Appends its rows to perf_log.md. ``--device cpu`` runs every line with the CPU in the cuda column (a dry run).

    python benchmarks/bench_gpu.py [--quick] [--device cuda|cpu] [--learning] [--no_log]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import warnings

import numpy as np
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from stable_baselines3 import PPO as SB3PPO  # noqa: E402
from stable_baselines3.common.env_util import make_vec_env  # noqa: E402

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
from ppo_dict.algo.ppo import PPO  # noqa: E402
from ppo_dict.algo.rollout.rollout_step import PolicyStep  # noqa: E402
from ppo_dict.core.config import Config, physical_cores  # noqa: E402
from ppo_dict.envs.make import make_env  # noqa: E402
from ppo_dict.run.run_plan import build_env_pool  # noqa: E402
from ppo_dict.vec import env_spec  # noqa: E402


def graphs(cfg: Config) -> Config:
    """``cfg`` with ``--cuda_graphs`` (device auto where the dry run's device is the cpu: eager, with its line)."""
    return cfg.replace(cuda_graphs=True, device="auto" if cfg.device == "cpu" else cfg.device)


def close_all(contenders: list[Contender]) -> None:
    for contender in contenders:
        contender.close()


def reacher_rollouts(table: Table, gpu: str, workers: int, rounds: int, n_steps: int) -> None:
    for n_envs, target in ((64, 1.0), (256, 1.5)):
        cfg = Config(
            env="gym_Reacher-v5", n_envs=n_envs, num_workers=workers, n_steps=n_steps, seed=0, verbose=0, device="cpu"
        )
        contenders = [
            ppo_dict_contender("cpu", cfg, training=False),
            ppo_dict_contender(gpu, cfg.replace(device=gpu), training=False),
            ppo_dict_contender(f"{gpu} + graphs", graphs(cfg.replace(device=gpu)), training=False),
        ]
        try:
            interleave(contenders, rounds)
            cpu, cuda, graphed = contenders
            setting = f"Reacher-v5, {n_envs} envs, {workers} workers, n_steps {n_steps}"
            table.row(
                setting,
                f"rollout steps/s, --device {gpu}",
                f"{cuda.rate:.0f}",
                f"--device cpu: {cpu.rate:.0f}",
                ratio_text(cuda, cpu, target),
            )
            table.row(
                setting,
                f"rollout steps/s, --device {gpu} --cuda_graphs",
                f"{graphed.rate:.0f}",
                f"--device cpu: {cpu.rate:.0f}",
                ratio_text(graphed, cpu, target),
            )
            for contender in contenders:  # where a step's time goes: the trainer's own time/* figures, us per rollout step
                logs = contender.model.timing.logs(n_envs)  # type: ignore[attr-defined]
                table.row(
                    setting,
                    f"us per rollout step, {contender.name}",
                    ", ".join(
                        f"{key}: {logs[f'time/{key}_us']:.0f}" for key in ("policy", "envs", "bookkeeping", "overlapped")
                    ),
                )
        finally:
            close_all(contenders)


def reacher_training(table: Table, gpu: str, workers: int, rounds: int, n_steps: int) -> None:
    """8 envs, minibatch 64 (n_steps 256: 32 minibatches per epoch), 10 epochs."""
    cfg = Config(
        env="gym_Reacher-v5",
        n_envs=8,
        num_workers=min(workers, 8),
        n_steps=n_steps,
        batch_size=64,
        n_epochs=10,
        seed=0,
        verbose=0,
        device="cpu",
    )
    sb3 = SB3PPO(
        "MlpPolicy",
        make_vec_env("Reacher-v5", n_envs=8, seed=0),
        n_steps=n_steps,
        batch_size=64,
        n_epochs=10,
        seed=0,
        device=gpu,
        verbose=0,
    )
    contenders = [
        ppo_dict_contender("cpu", cfg, training=True),
        ppo_dict_contender(gpu, cfg.replace(device=gpu), training=True),
        sb3_model_contender(f"sb3 {gpu}", sb3, training=True),
    ]
    try:
        interleave(contenders, rounds)
        cpu, cuda, theirs = contenders
        setting = f"Reacher-v5, 8 envs, n_steps {n_steps}, minibatch 64, 10 epochs"
        table.row(
            setting,
            f"training steps/s (rollout + update), --device {gpu}",
            f"{cuda.rate:.0f}",
            f"--device cpu: {cpu.rate:.0f}",
            ratio_text(cuda, cpu, 1.0),
        )
        table.row(
            setting,
            f"training steps/s (rollout + update), --device {gpu}",
            f"{cuda.rate:.0f}",
            f"sb3 on {gpu}: {theirs.rate:.0f}",
            ratio_text(cuda, theirs, 2.0),
        )
    finally:
        close_all(contenders)


def pixels(table: Table, gpu: str, workers: int, rounds: int, n_steps: int) -> None:
    """test_dummy + NatureCNN, 32 envs: rollouts against the policy step alone; training against sb3."""
    cfg = Config(
        env="test_dummy",
        model="cnn",
        n_envs=32,
        num_workers=workers,
        n_steps=n_steps,
        batch_size=1024,
        n_epochs=4,
        seed=0,
        verbose=0,
        device=gpu,
    )
    rollouts = [
        ppo_dict_contender("cpu", cfg.replace(device="cpu"), training=False),
        ppo_dict_contender(gpu, cfg, training=False),
        ppo_dict_contender(f"{gpu} + graphs", graphs(cfg), training=False),
    ]
    model = rollouts[1].model  # type: ignore[attr-defined]
    step, obs = PolicyStep(model.policy, 32), model.collector.step_obs(0)

    def alone() -> int:
        for _ in range(n_steps):
            for output in step(obs):
                output.cpu()  # as a rollout step reads them
        return n_steps * 32

    rollouts.append(Contender(f"NatureCNN policy step alone, batch 32, {gpu}", alone))
    try:
        interleave(rollouts, rounds)
        cpu, cuda, graphed, policy_step = rollouts
        setting = f"test_dummy 84x84x3 + cnn, 32 envs, {workers} workers, n_steps {n_steps}"
        table.row(
            setting,
            f"rollout steps/s, --device {gpu}",
            f"{cuda.rate:.0f}",
            f"the policy step alone: {policy_step.rate:.0f}",
            ratio_text(cuda, policy_step, 0.8),
        )
        table.row(
            setting,
            f"rollout steps/s, --device {gpu} --cuda_graphs",
            f"{graphed.rate:.0f}",
            f"the policy step alone: {policy_step.rate:.0f}",
            ratio_text(graphed, policy_step, 0.8),
        )
        table.row(
            setting,
            f"rollout steps/s, --device {gpu}",
            f"{cuda.rate:.0f}",
            f"--device cpu: {cpu.rate:.0f}",
            ratio_text(cuda, cpu),
        )
    finally:
        close_all(rollouts)
    spec = env_spec(cfg)
    sb3 = SB3PPO(
        "CnnPolicy",
        make_vec_env(lambda: make_env(spec), n_envs=32, seed=0),
        n_steps=n_steps,
        batch_size=1024,
        n_epochs=4,
        seed=0,
        device=gpu,
        verbose=0,
    )
    training = [ppo_dict_contender(gpu, cfg, training=True), sb3_model_contender(f"sb3 {gpu}", sb3, training=True)]
    try:
        interleave(training, max(1, rounds // 2))
        ours, theirs = training
        update_s = training[0].model.timing.update / max(1, training[0].model.iteration)  # type: ignore[attr-defined]
        table.row(
            f"test_dummy 84x84x3 + cnn, 32 envs, n_steps {n_steps}, minibatch 1024, 4 epochs",
            f"training steps/s, --device {gpu}",
            f"{ours.rate:.0f} (one update {update_s:.2f} s)",
            f"sb3 on {gpu}: {theirs.rate:.0f}",
            ratio_text(ours, theirs, 3.0),
        )
    finally:
        close_all(training)


def learning(table: Table, gpu: str, workers: int, timesteps: int) -> None:
    """rl-zoo's CartPole-v1 settings, 3 seeds, cpu and the gpu: the mean return of the last 100 episodes."""
    results = {}
    for device in ("cpu", gpu):
        returns = []
        for seed in range(3):
            cfg = Config(
                env="gym_CartPole-v1",
                n_envs=8,
                num_workers=min(workers, 8),
                n_steps=32,
                batch_size=256,
                gae_lambda=0.8,
                gamma=0.98,
                n_epochs=20,
                ent_coef=0.0,
                learning_rate="lin_0.001",
                clip_range="lin_0.2",
                total_timesteps=timesteps,
                seed=seed,
                verbose=0,
                device=device,
            )
            with PPO(cfg, build_env_pool(cfg)) as model:
                model.learn()
                returns.append(model.ep_rew_mean)
        results[device] = returns
        table.row(
            f"CartPole-v1, rl-zoo settings, {timesteps} steps, seeds 0-2",
            f"return of the last 100 episodes, --device {device}",
            ", ".join(f"{r:.0f}" for r in returns),
            "",
            f"mean {statistics.mean(returns):.0f}",
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer rounds and shorter rollouts (the dry run's)")
    parser.add_argument("--device", default="cuda", help="the accelerator's column (cpu: a dry run of every line on the CPU)")
    parser.add_argument(
        "--workers", type=int, default=physical_cores(), help="ppo_dict's worker processes (default: the physical cores)"
    )
    parser.add_argument(
        "--learning", action="store_true", help="also the CartPole learning rows (3 seeds x 2 devices, minutes)"
    )
    add_log_flags(parser)
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)
    np.random.seed(0)
    rounds, n_steps = (1, 16) if args.quick else (5, 128)  # n_steps of the rollout rows; training: 64 (quick) or 256
    started, table = machine_times(), Table()
    reacher_rollouts(table, args.device, args.workers, rounds, n_steps)
    reacher_training(table, args.device, args.workers, rounds, 4 * n_steps if args.quick else 2 * n_steps)
    pixels(table, args.device, args.workers, rounds, n_steps)
    if args.learning:
        learning(table, args.device, args.workers, 512 if args.quick else 100_000)
    flags = " ".join(f for f in (args.quick and "--quick", f"--device {args.device}", args.learning and "--learning") if f)
    table.write("bench_gpu", f"python benchmarks/bench_gpu.py {flags}", started, log=log_path(args))


if __name__ == "__main__":
    main()
