"""Train PPO on the Godot demo game, envs stepped from this process (before the worker pool runs Godot).

    PYTHONPATH=. python -m envs.godot.train_demo --total_timesteps 150000

Prints the deterministic evaluation return of the untrained and the trained policy (on games
seeded apart from training), how often it reaches the goal, and agent steps per second for the
env alone and for training. One Godot process runs ``--n_agents`` agents; ``--n_envs`` of them
train, so ``n_envs / n_agents`` processes.
"""
from __future__ import annotations

import argparse
import time
from typing import Any

import numpy as np
import torch
from gymnasium import spaces

from envs.godot.game import GodotGame
from envs.godot.pool import GodotInProcessPool, godot_spec
from ppo_dict.config import Config
from ppo_dict.logger import Logger
from ppo_dict.policy import ActorCritic
from ppo_dict.ppo import PPO
from ppo_dict.storage import obs_to_tensor

#: Evaluation games are seeded this far from training (as ppo_dict's EVAL_SEED_OFFSET).
EVAL_SEED_OFFSET = 1_000_000


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


def env_steps_per_second(pool: GodotInProcessPool, steps: int = 500) -> float:
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
    p.add_argument("--total_timesteps", type=int, default=150_000, help="agent steps to train for")
    p.add_argument("--n_envs", type=int, default=8, help="agents trained (a multiple of --n_agents)")
    p.add_argument("--n_agents", type=int, default=4, help="agents per Godot process")
    p.add_argument("--action_type", default="continuous", choices=("continuous", "discrete"))
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--eval_episodes", type=int, default=200)
    args = p.parse_args()

    torch.set_num_threads(1)
    game_kwargs = {"game_args": {"n_agents": args.n_agents, "action_type": args.action_type}}
    cfg = Config(
        env="godot_demo", n_envs=args.n_envs, num_workers=0, seed=args.seed, total_timesteps=args.total_timesteps,
        n_steps=128, batch_size=256, n_epochs=10, learning_rate=3e-4, gamma=0.98, gae_lambda=0.95, ent_coef=0.0,
        device="cpu", verbose=0,
    )
    pool = GodotInProcessPool(godot_spec(seed=args.seed, **game_kwargs), cfg.n_envs, cfg.n_steps)
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
    print(f"godot_demo ({args.action_type}), {len(pool.games)} Godot processes x {pool.n_agents} agents, seed {args.seed}")
    print(f"env alone (random actions):  {env_rate:,.0f} agent steps/s")
    print(f"training:                     {model.num_timesteps:,} agent steps in {seconds:.1f} s = {model.num_timesteps / seconds:,.0f} agent steps/s")
    for name, result in (("before", before), ("after", after)):
        print(f"{name:>6}: return {result['return']:7.3f}  reached goal {result['success']:6.1%}  "
              f"episode length {result['length']:5.1f}  ({args.eval_episodes} deterministic episodes)")


if __name__ == "__main__":
    main()
