"""Train PPO on the Godot demo game through the worker pool (or in this process) and measure it.

    python benchmarks/bench_godot.py --total_timesteps 150000 [--perf_log]

Prints the deterministic evaluation return of the untrained and the trained policy (on games
seeded apart from training), how often it reaches the goal, and agent steps per second for the
env alone and for training; ``--perf_log`` appends them to perf_log.md. ``--n_envs`` agents train
in ``--num_workers`` workers, each owning whole Godot processes of ``--n_agents`` agents (default:
one process per worker); ``--num_workers 0`` steps the games in this process.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from typing import Any

import numpy as np
import torch
from gymnasium import spaces

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from ppo_dict.algo.networks.policy import ActorCritic  # noqa: E402
from ppo_dict.algo.ppo import PPO  # noqa: E402
from ppo_dict.core.config import Config  # noqa: E402
from ppo_dict.core.logger import Logger  # noqa: E402
from ppo_dict.data.storage import obs_to_tensor  # noqa: E402
from ppo_dict.envs.godot.game import DEFAULT_BINARY, GodotGame  # noqa: E402
from ppo_dict.main_ppo_godot import DEMO_DEFAULTS, DEMO_LAYOUT  # noqa: E402
from ppo_dict.run.evaluation import EVAL_SEED_OFFSET  # noqa: E402
from ppo_dict.vec import EnvPool, make_env_pool  # noqa: E402


@torch.no_grad()
def evaluate(policy: ActorCritic, game_kwargs: dict[str, Any], episodes: int, seed: int) -> dict[str, float]:
    """Deterministic episodes on a fresh game until ``episodes`` have ended.

    Returns mean episode return, the fraction that reached the goal (terminated rather than
    truncated) and mean episode length in decisions.
    """
    returns, successes, lengths = [], [], []
    with GodotGame(seed=seed, **game_kwargs) as game:
        obs = game.reset(seed=seed)
        running, steps = np.zeros(game.n_agents), np.zeros(game.n_agents, dtype=np.int64)
        box = isinstance(game.action_space, spaces.Box)
        while len(returns) < episodes:
            actions, _, _ = policy(obs_to_tensor(obs, torch.device("cpu")), deterministic=True)
            actions = actions.numpy()
            reply = game.step(np.clip(actions, game.action_space.low, game.action_space.high) if box else actions)
            running += reply.rewards
            steps += 1
            for a in np.flatnonzero(reply.terminated | reply.truncated):
                returns.append(running[a]), successes.append(bool(reply.terminated[a])), lengths.append(steps[a])
                running[a], steps[a] = 0.0, 0
            obs = reply.obs
    return {"return": float(np.mean(returns)), "success": float(np.mean(successes)), "length": float(np.mean(lengths))}


def env_steps_per_second(pool: EnvPool, steps: int = 500) -> float:
    """Agent steps per second of the pool alone, with random actions (no policy)."""
    rng = np.random.default_rng(0)
    pool.reset(seed=123)
    actions = rng.uniform(-1, 1, (steps, *pool.storage.env_actions.shape)).astype(np.float32)
    start = time.perf_counter()
    for i in range(steps):
        pool.storage.env_actions[...] = actions[i]
        pool.step(i % pool.storage.n_steps)
    return steps * pool.num_envs / (time.perf_counter() - start)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--total_timesteps", type=int, default=DEMO_DEFAULTS["total_timesteps"], help="agent steps to train for")
    p.add_argument("--n_envs", type=int, default=DEMO_LAYOUT["n_envs"], help="agents trained (a multiple of --n_agents)")
    p.add_argument(
        "--num_workers",
        type=int,
        default=DEMO_LAYOUT["num_workers"],
        help="env worker processes (0: step the games in this process)",
    )
    p.add_argument("--n_agents", type=int, default=None, help="agents per Godot process (default: n_envs / num_workers)")
    p.add_argument("--action_type", default="continuous", choices=("continuous", "discrete"))
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--eval_episodes", type=int, default=200)
    p.add_argument("--perf_log", action="store_true", help="append the measurements to perf_log.md")
    args = p.parse_args()

    torch.set_num_threads(1)
    game_args = {"action_type": args.action_type, **({} if args.n_agents is None else {"n_agents": args.n_agents})}
    cfg = Config(
        **{
            **DEMO_DEFAULTS,
            "env_kwargs": {"seed": args.seed, "game_args": game_args},
            "n_envs": args.n_envs,
            "num_workers": args.num_workers,
            "seed": args.seed,
            "total_timesteps": args.total_timesteps,
            "verbose": 0,
        }
    )
    game_kwargs = {"game_args": {"action_type": args.action_type}}
    pool = make_env_pool(cfg)
    try:
        env_rate = env_steps_per_second(pool)
        model = PPO(cfg, pool, Logger(verbose=0))
        eval_seed = args.seed + EVAL_SEED_OFFSET
        before = evaluate(model.policy, game_kwargs, args.eval_episodes, eval_seed)
        start = time.perf_counter()
        model.learn()
        seconds = time.perf_counter() - start
        after = evaluate(model.policy, game_kwargs, args.eval_episodes, eval_seed)
    finally:
        pool.close()
    n_agents = pool.backend.spec.kwargs["game_args"]["n_agents"]
    where = f"{args.num_workers} workers" if args.num_workers else "this process"
    setting = (
        f"godot_demo ({args.action_type}), {cfg.n_envs} agents = {cfg.n_envs // n_agents} Godot processes x "
        f"{n_agents}, in {where}, seed {args.seed}"
    )
    rows = [
        (setting, "env alone, random actions", f"{env_rate:.0f} agent steps/s"),
        (
            setting,
            "training fps, n_steps 128, batch 256, 10 epochs",
            f"{model.num_timesteps / seconds:.0f} agent steps/s ({model.num_timesteps} in {seconds:.1f} s)",
        ),
    ]
    rows += [
        (
            setting,
            f"deterministic return {name} training ({args.eval_episodes} episodes)",
            f"{result['return']:.3f}, reached goal {result['success']:.1%}, episode length {result['length']:.1f}",
        )
        for name, result in (("before", before), ("after", after))
    ]
    table = "| setting | what | measured | compared with | ratio |\n| --- | --- | --- | --- | --- |\n"
    table += "".join(f"| {a} | {b} | {c} |  |  |\n" for a, b, c in rows)
    print(table)
    if args.perf_log:
        append_perf_log(table, " ".join(["python benchmarks/bench_godot.py", *sys.argv[1:]]))


def append_perf_log(table: str, command: str) -> None:
    """Append ``table`` under a header naming date, commit, CPU and versions (perf_log.md's format)."""
    import gymnasium

    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT).stdout.strip()
    with open("/proc/cpuinfo") as f:
        cpu = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), "unknown CPU")
    godot = subprocess.run([DEFAULT_BINARY, "--version"], capture_output=True, text=True).stdout.strip().splitlines()[-1]
    header = (
        f"\n### godot demo: {time.strftime('%Y-%m-%d')} | commit {commit} | {cpu}, "
        f"{os.cpu_count()} cpus | torch {torch.__version__}, gymnasium {gymnasium.__version__}, numpy {np.__version__}, "
        f"godot {godot}, python {sys.version.split()[0]}\n\n"
        f"command: `{command}` (machine load average at the end: {', '.join(f'{x:.1f}' for x in os.getloadavg())})\n\n"
    )
    with open(os.path.join(ROOT, "perf_log.md"), "a") as f:
        f.write(header + table)


if __name__ == "__main__":
    main()
