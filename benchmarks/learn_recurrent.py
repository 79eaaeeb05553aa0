"""Learning of rl-zoo's CartPoleNoVel-v1 ``ppo_lstm`` entry, exact mode and the fast path, over seeds.

Each run trains 1e5 steps with rl-zoo's hyperparameters (``hyperparams/ppo_lstm.yml`` in the installed
rl_zoo3: normalize, 8 envs, n_steps 32, batch 256, gae_lambda 0.8, gamma 0.98, 20 epochs, lr lin_1e-3,
clip lin_0.2, ReLU, LSTM 64, pi/vf [64], no orthogonal init), records ``rollout/ep_rew_mean`` after
every update, then plays 10 episodes deterministically (the LSTM states carried across steps and
zeroed at each episode's start, observations normalised with the run's final statistics, as rl-zoo's
evaluation does). One JSON per run under ``--out``; ``--plot`` draws the curves of every run found
there (mean and each seed, exact beside fast) into ``docs/img/recurrent_learning.png``.

    python benchmarks/learn_recurrent.py --mode exact --seeds 0,1,2,3,4 [--out DIR] [--steps 100000]
    python benchmarks/learn_recurrent.py --plot [--out DIR]
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import sys
import time
from typing import Any

import numpy as np
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from ppo_dict.core.config import Config  # noqa: E402

GYM_ID = "CartPoleNoVel-v1"
#: rl-zoo's ppo_lstm.yml entry for CartPoleNoVel-v1, as ppo_dict's flags
ZOO = dict(
    gym_packages=("rl_zoo3.import_envs",),
    normalize=True,
    n_envs=8,
    n_steps=32,
    batch_size=256,
    gae_lambda=0.8,
    gamma=0.98,
    n_epochs=20,
    ent_coef=0.0,
    learning_rate="lin_0.001",
    clip_range="lin_0.2",
    ortho_init=False,
    activation_fn="relu",
    lstm_hidden_size=64,
    enable_critic_lstm=True,
    net_arch=dict(pi=[64], vf=[64]),
)
PLOT = os.path.join(ROOT, "docs", "img", "recurrent_learning.png")


def check_zoo_entry() -> None:
    """The installed rl_zoo3's entry is the one written here (a newer rl_zoo3 would change the runs)."""
    import yaml
    import rl_zoo3

    with open(os.path.join(os.path.dirname(rl_zoo3.__file__), "hyperparams", "ppo_lstm.yml")) as f:
        entry = yaml.safe_load(f)[GYM_ID]
    wanted = {
        k: ZOO[k]
        for k in (
            "normalize",
            "n_envs",
            "n_steps",
            "batch_size",
            "gae_lambda",
            "gamma",
            "n_epochs",
            "ent_coef",
            "learning_rate",
            "clip_range",
        )
    }
    differing = {k: (entry.get(k), v) for k, v in wanted.items() if entry.get(k) != v}
    if differing or entry["n_timesteps"] != 1e5 or "lstm_hidden_size=64" not in entry["policy_kwargs"].replace(" ", ""):
        raise SystemExit(f"rl_zoo3's {GYM_ID} entry differs from this script's: {differing or entry}")


def evaluate(model, episodes: int = 10) -> list[float]:
    """``episodes`` deterministic episodes on a fresh env (seeded 10_000 + i), states carried, normalised observations."""
    import gymnasium as gym

    policy, normalizer = model.policy, model.normalizer
    env = gym.make(GYM_ID)
    returns = []
    with torch.no_grad():
        for i in range(episodes):
            obs, _ = env.reset(seed=10_000 + i)
            states, start, total, done = policy.initial_states(1), torch.ones(1), 0.0, False
            while not done:
                o = (
                    normalizer.normalize_obs({"obs": obs[None]})["obs"]
                    if normalizer is not None
                    else obs[None].astype(np.float32)
                )
                actions, _, _, states = policy(torch.as_tensor(o), states, start, deterministic=True)
                obs, reward, terminated, truncated, _ = env.step(int(actions[0]))
                total, done, start = total + float(reward), terminated or truncated, torch.zeros(1)
            returns.append(total)
    env.close()
    return returns


def train_recording(cfg: Config, steps: int):
    """Train ``cfg`` for ``steps`` env steps; ``(the trained PPO, [(steps, rollout/ep_rew_mean)] after each update, wall
    seconds)``."""
    from ppo_dict.algo.ppo import PPO
    from ppo_dict.run.run_plan import build_env_pool

    model = PPO(cfg, build_env_pool(cfg))
    curve: list[tuple[int, float]] = []

    def record(ppo) -> None:
        logs = ppo.episodes.logs()
        if "rollout/ep_rew_mean" in logs:
            curve.append((ppo.num_timesteps, logs["rollout/ep_rew_mean"]))

    started = time.perf_counter()
    try:
        model.learn(steps, after_update=record)
    finally:
        model.pool.close()
    return model, curve, time.perf_counter() - started


def write_result(out: str, name: str, result: dict) -> None:
    with open(os.path.join(out, f"{name}.json"), "w") as f:
        json.dump(result, f)


def read_results(out: str):
    """``(matplotlib's pyplot on the Agg backend, every run's result found in out)``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt, [json.load(open(p)) for p in sorted(glob.glob(os.path.join(out, "*_seed*.json")))]


def run(mode: str, seed: int, steps: int, out: str) -> dict:
    cfg = Config(
        env=f"gym_{GYM_ID}",
        model="mlp_lstm",
        seed=seed,
        verbose=0,
        device="cpu",
        total_timesteps=steps,
        lstm_fast_path=mode == "fast",
        **ZOO,
    )
    model, curve, seconds = train_recording(cfg, steps)
    returns = evaluate(model)
    result = dict(
        mode=mode,
        seed=seed,
        steps=steps,
        seconds=seconds,
        eval_returns=returns,
        eval_mean=float(np.mean(returns)),
        curve=curve,
        torch=torch.__version__,
    )
    write_result(out, f"{mode}_seed{seed}", result)
    print(
        f"{mode} seed {seed}: {steps} steps in {seconds:.0f} s, final deterministic evaluation {np.mean(returns):.1f} "
        f"({', '.join(f'{r:.0f}' for r in returns)})",
        flush=True,
    )
    return result


def plot(out: str) -> None:
    plt, results = read_results(out)
    fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
    for ax, mode in zip(axes, ("exact", "fast")):
        runs = [r for r in results if r["mode"] == mode]
        grid = np.linspace(0, max((r["steps"] for r in runs), default=1), 200)
        curves = []
        for r in runs:
            steps, values = np.array(r["curve"], dtype=float).T if r["curve"] else (np.zeros(1), np.zeros(1))
            ax.plot(steps, values, lw=0.8, alpha=0.5, label=f"seed {r['seed']}: eval {r['eval_mean']:.0f}")
            curves.append(np.interp(grid, steps, values, left=np.nan))
        if curves:
            ax.plot(grid, np.nanmean(curves, axis=0), color="black", lw=2, label="mean")
        else:
            ax.text(0.5, 0.5, f"no {mode} runs in {os.path.basename(out)}", ha="center", transform=ax.transAxes)
        solved = sum(r["eval_mean"] >= 500 for r in runs)
        ax.set_title(
            f"{'exact (RecurrentPPO bits)' if mode == 'exact' else '--lstm_fast_path True'}: "
            f"{solved} of {len(runs)} seeds at 500"
        )
        ax.set_xlabel("env steps")
        ax.legend(fontsize=7, loc="lower right")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("rollout/ep_rew_mean")
    fig.suptitle(f"{GYM_ID}, rl-zoo's ppo_lstm hyperparameters, 1e5 steps (final: 10 deterministic episodes)")
    fig.tight_layout()
    fig.savefig(PLOT, dpi=90)
    print(f"wrote {PLOT}")
    print(
        "| mode | seed | final evaluation (10 episodes, deterministic) | last ep_rew_mean | wall s |\n"
        "| --- | --- | --- | --- | --- |"
    )
    for r in results:
        last = r["curve"][-1][1] if r["curve"] else float("nan")
        print(f"| {r['mode']} | {r['seed']} | {r['eval_mean']:.1f} | {last:.1f} | {r['seconds']:.0f} |")


def learning_arguments(doc: str, seeds: str, steps: int, out: str, plot_runs) -> tuple[argparse.ArgumentParser, Any]:
    """``(the parser, a function that parses the command line)`` of a learning benchmark: ``--seeds``, ``--steps``, ``--out``,
    ``--plot`` (then ``plot_runs(out)`` and the function returns None); add more arguments to the parser before calling it."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", default=seeds)
    parser.add_argument("--steps", type=int, default=steps)
    parser.add_argument("--out", default=os.path.join(ROOT, "benchmarks", "results", out))
    parser.add_argument("--plot", action="store_true", help="draw the runs found in --out")

    def parse() -> Any:
        args = parser.parse_args()
        os.makedirs(args.out, exist_ok=True)
        if args.plot:
            plot_runs(args.out)
            return None
        torch.set_num_threads(1)
        return args

    return parser, parse


def main() -> None:
    parser, parse = learning_arguments(__doc__, "0,1,2,3,4", 100_000, "recurrent_learning", plot)
    parser.add_argument("--mode", choices=("exact", "fast"), default="exact")
    args = parse()
    if args is None:
        return
    check_zoo_entry()
    for seed in (int(s) for s in args.seeds.split(",")):
        run(args.mode, seed, args.steps, args.out)


if __name__ == "__main__":
    main()
