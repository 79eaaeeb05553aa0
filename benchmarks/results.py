"""Returns reached on standard tasks with rl-zoo's hyperparameters: ppo_dict beside sb3, for the results page.

Each run trains one env id with the installed rl_zoo3's ``ppo.yml`` entry (its ``n_envs``,
``n_timesteps`` and PPO settings; ``lin_<x>`` schedules as rl-zoo reads them), once with
``stable_baselines3.PPO`` and once with ``ppo_dict.PPO`` (the import changed, nothing else: the envs
are made from the id as sb3's ``make_vec_env`` makes them, in ppo_dict's worker pool), records
``rollout/ep_rew_mean`` after every rollout, then evaluates the final policy deterministically for
``--eval_episodes`` episodes on a fresh env (sb3's ``evaluate_policy``), as rl-zoo's benchmark does.

Rows go to ``--out`` (default ``benchmarks/results/learning/``): ``final.csv`` (one row a run: the
evaluation's mean and std, the last ``ep_rew_mean``, wall seconds, the commit and host) and
``curves.csv`` (one row a rollout); ``--plot`` draws ``docs/img/results.png`` from them. Rows are
appended, so runs on several machines or days add up; each carries its commit.

    python benchmarks/results.py --envs CartPole-v1 --seeds 0,1,2
    python benchmarks/results.py --envs Pendulum-v1 --seeds 0 --libs ppo_dict
    python benchmarks/results.py --plot
"""
from __future__ import annotations

import argparse
import csv
import os
import platform
import subprocess
import sys
import time
from typing import Any, Callable

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

OUT = os.path.join(ROOT, "benchmarks", "results", "learning")
PLOT = os.path.join(ROOT, "docs", "img", "results.png")
#: rl-zoo's published PPO scores (its benchmark.md: one trained agent each, deterministic evaluation
#: over about 150k steps): env id -> (mean, std, its n_timesteps)
ZOO_SCORES = {
    "CartPole-v1": (500.000, 0.000, "100k"),
    "Pendulum-v1": (-172.225, 104.159, "100k"),
    "Acrobot-v1": (-73.506, 18.201, "1M"),
    "LunarLander-v2": (242.119, 31.823, "1M"),
    "HalfCheetah-v3": (5819.099, 663.530, "1M"),
    "Hopper-v3": (2410.435, 10.026, "1M"),
    "BreakoutNoFrameskip-v4": (398.033, 33.328, "10M"),
}
FINAL_FIELDS = ["env", "lib", "seed", "timesteps", "eval_mean", "eval_std", "eval_episodes", "last_ep_rew_mean", "wall_s",
                "commit", "host", "date"]
CURVE_FIELDS = ["env", "lib", "seed", "commit", "timesteps", "ep_rew_mean"]


def zoo_entry(env_id: str) -> dict[str, Any]:
    """The installed rl_zoo3's ``ppo.yml`` entry for ``env_id``, as written there."""
    import rl_zoo3
    import yaml

    with open(os.path.join(os.path.dirname(rl_zoo3.__file__), "hyperparams", "ppo.yml")) as f:
        entries = yaml.safe_load(f)
    if env_id not in entries:
        raise SystemExit(f"rl_zoo3's ppo.yml has no entry for {env_id}")
    return entries[env_id]


def ppo_kwargs(entry: dict[str, Any]) -> tuple[dict[str, Any], int, int]:
    """``(PPO keyword arguments, n_envs, n_timesteps)`` of an rl-zoo entry: ``lin_<x>`` read as rl-zoo's
    linear schedule. Entries that need more (normalisation, env wrappers, frame stacks) are refused:
    this script does not reproduce rl-zoo's env setup for them."""
    from rl_zoo3.utils import linear_schedule

    entry = dict(entry)
    n_envs, n_timesteps = int(entry.pop("n_envs", 1)), int(entry.pop("n_timesteps"))
    policy = entry.pop("policy")
    unsupported = sorted(set(entry) & {"normalize", "env_wrapper", "frame_stack", "policy_kwargs", "vec_env_wrapper",
                                       "callback"})
    if policy != "MlpPolicy" or unsupported:
        raise SystemExit(f"this script runs MlpPolicy entries without {unsupported or policy}")
    for key in ("learning_rate", "clip_range"):
        if isinstance(entry.get(key), str) and entry[key].startswith("lin_"):
            entry[key] = linear_schedule(float(entry[key][4:]))
    return entry, n_envs, n_timesteps


def commit() -> str:
    """The repository's commit, with ``+`` when the tree has changes."""
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT, capture_output=True, text=True).stdout
    return head + ("+" if dirty.strip() else "")


def run(env_id: str, lib: str, seed: int, eval_episodes: int, steps: int | None) -> tuple[dict[str, Any], list[tuple[int, float]]]:
    """Train and evaluate one run; ``(final row, [(timesteps, ep_rew_mean) per rollout])``."""
    import numpy as np
    import torch
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.evaluation import evaluate_policy

    if lib == "sb3":
        from stable_baselines3 import PPO
    else:
        from ppo_dict import PPO
    torch.set_num_threads(1)  # both sides on one thread: ppo_dict's default, and the same arithmetic
    kwargs, n_envs, n_timesteps = ppo_kwargs(zoo_entry(env_id))
    curve: list[tuple[int, float]] = []

    class Curve(BaseCallback):
        """``rollout/ep_rew_mean`` (the mean of the last 100 episodes' returns) after each rollout."""

        def _on_step(self) -> bool:
            return True

        def _on_rollout_end(self) -> None:
            episodes = self.model.ep_info_buffer
            if episodes:
                curve.append((self.model.num_timesteps, float(np.mean([e["r"] for e in episodes]))))

    start = time.perf_counter()
    model = PPO("MlpPolicy", env_id, n_envs=n_envs, seed=seed, verbose=0, **kwargs) if lib == "ppo_dict" else \
        PPO("MlpPolicy", make_vec_env(env_id, n_envs=n_envs, seed=seed), seed=seed, verbose=0, **kwargs)
    model.learn(total_timesteps=steps or n_timesteps, callback=Curve())
    wall = time.perf_counter() - start
    eval_env = make_vec_env(env_id, n_envs=1, seed=10_000 + seed)
    mean, std = evaluate_policy(model, eval_env, n_eval_episodes=eval_episodes, deterministic=True)
    eval_env.close()
    model.get_env().close()
    row = dict(env=env_id, lib=lib, seed=seed, timesteps=model.num_timesteps, eval_mean=round(float(mean), 3),
               eval_std=round(float(std), 3), eval_episodes=eval_episodes, last_ep_rew_mean=round(curve[-1][1], 3) if curve else "",
               wall_s=round(wall, 1), host=f"{platform.processor() or platform.machine()}, {os.cpu_count()} cpus",
               date=time.strftime("%Y-%m-%d"))
    return row, curve


def append(path: str, fields: list[str], rows: list[dict[str, Any]]) -> None:
    """Append ``rows`` to the CSV at ``path`` (its header first, when the file is new)."""
    new = not os.path.exists(path)
    with open(path, "a", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields)
        if new:
            writer.writeheader()
        writer.writerows(rows)


def read(path: str) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def plot(out: str, path: str = PLOT) -> None:
    """One panel per env: each run's ``ep_rew_mean`` curve (ppo_dict solid, sb3 dashed), rl-zoo's
    published score as a horizontal line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    curves = read(os.path.join(out, "curves.csv"))
    envs = list(dict.fromkeys(row["env"] for row in curves))
    fig, axes = plt.subplots(1, len(envs), figsize=(5.5 * len(envs), 3.6), squeeze=False)
    for ax, env_id in zip(axes[0], envs):
        runs: dict[tuple[str, str], list[tuple[int, float]]] = {}
        for row in curves:
            if row["env"] == env_id:
                runs.setdefault((row["lib"], row["seed"]), []).append((int(row["timesteps"]), float(row["ep_rew_mean"])))
        for (lib, seed), points in sorted(runs.items()):
            xs, ys = zip(*points)
            ax.plot(xs, ys, linestyle="-" if lib == "ppo_dict" else "--", color="C0" if lib == "ppo_dict" else "C1",
                    alpha=0.8, label=f"{lib}, seed {seed}")
        if env_id in ZOO_SCORES:
            ax.axhline(ZOO_SCORES[env_id][0], color="gray", linestyle=":", label="rl-zoo's published score")
        ax.set_title(env_id)
        ax.set_xlabel("env steps")
        ax.set_ylabel("rollout/ep_rew_mean")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    print(f"wrote {path}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python benchmarks/results.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--envs", default="CartPole-v1", help="gymnasium ids with an rl-zoo ppo.yml entry, comma-separated")
    parser.add_argument("--seeds", default="0,1,2", help="seeds, comma-separated")
    parser.add_argument("--libs", default="ppo_dict,sb3", help="ppo_dict, sb3 or both, comma-separated")
    parser.add_argument("--eval_episodes", type=int, default=10)
    parser.add_argument("--steps", type=int, default=None, help="train this many steps instead of rl-zoo's n_timesteps (a check, not a result)")
    parser.add_argument("--out", default=OUT, help="where final.csv and curves.csv are appended")
    parser.add_argument("--plot", action="store_true", help="draw docs/img/results.png from --out's curves, then exit")
    args = parser.parse_args(argv)
    if args.plot:
        plot(args.out)
        return 0
    os.makedirs(args.out, exist_ok=True)
    head = commit()
    for env_id in args.envs.split(","):
        for seed in (int(s) for s in args.seeds.split(",")):
            for lib in args.libs.split(","):
                row, curve = run(env_id, lib, seed, args.eval_episodes, args.steps)
                row["commit"] = head
                print(", ".join(f"{k}={row[k]}" for k in FINAL_FIELDS), flush=True)
                append(os.path.join(args.out, "final.csv"), FINAL_FIELDS, [row])
                append(os.path.join(args.out, "curves.csv"), CURVE_FIELDS,
                       [dict(env=env_id, lib=lib, seed=seed, commit=head, timesteps=t, ep_rew_mean=round(r, 3)) for t, r in curve])
    return 0


if __name__ == "__main__":
    sys.exit(main())
