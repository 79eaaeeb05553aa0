"""Memory and masks together: PPODictKeyDoor-v0 (``envs/key_door.py``) learnt by four policies, over seeds.

The room shows the key's colour at the first step only; moves into walls are invalid and ``open`` is
valid only on a door (``action_masks()``). Four policies, the same PPO settings otherwise:

* ``masked_lstm``: ``--model mlp_lstm --action_masks True`` (masked recurrent PPO);
* ``masked_gru``: the same with ``--rnn_type gru``;
* ``unmasked_lstm``: ``--model mlp_lstm`` (RecurrentPPO: invalid actions cost 0.05 and do nothing);
* ``masked_mlp``: ``--model mlp --action_masks True`` (MaskablePPO: no memory, so at best it guesses the door).

Each run records ``rollout/ep_rew_mean`` after every update, then plays 100 episodes deterministically
(masks given to the masked policies, the states carried): the share that opens the key's door, and the
mean return (+1 - 0.01 per step at the right door, -1 at the wrong one). One JSON per run under ``--out``;
``--plot`` draws the curves of every run found there into ``docs/img/key_door_learning.png`` and prints
the table.

    python benchmarks/learn_key_door.py --variants masked_lstm,masked_gru,unmasked_lstm,masked_mlp --seeds 0,1,2
    python benchmarks/learn_key_door.py --plot
"""

from __future__ import annotations

import os
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from benchmarks.learn_recurrent import learning_arguments, read_results, train_recording, write_result  # noqa: E402
from ppo_dict.core.config import Config  # noqa: E402

#: the settings every run shares
COMMON = dict(
    env="gym_PPODictKeyDoor-v0",
    gym_packages=("ppo_dict.envs.key_door",),
    n_envs=8,
    n_steps=32,
    batch_size=128,
    n_epochs=4,
    learning_rate=1e-3,
    ent_coef=0.01,
    gamma=0.99,
    num_workers=0,
    verbose=0,
    device="cpu",
)
VARIANTS = {
    "masked_lstm": dict(model="mlp_lstm", lstm_hidden_size=32, action_masks=True),
    "masked_gru": dict(model="mlp_lstm", lstm_hidden_size=32, action_masks=True, rnn_type="gru"),
    "unmasked_lstm": dict(model="mlp_lstm", lstm_hidden_size=32),
    "masked_mlp": dict(model="mlp", action_masks=True),
}
PLOT = os.path.join(ROOT, "docs", "img", "key_door_learning.png")


def evaluate(model, episodes: int = 100) -> tuple[float, float]:
    """``(share of episodes that open the key's door, mean return)`` over ``episodes`` deterministic episodes (seeded
    10_000 + i)."""
    from ppo_dict.envs.key_door import KeyDoorEnv

    env, opened, returns = KeyDoorEnv(), 0, []
    for i in range(episodes):
        obs, _ = env.reset(seed=10_000 + i)
        state, start, total, done = None, True, 0.0, False
        while not done:
            masks = env.action_masks()[None] if model.policy.masked else None
            action, state = model.predict(obs[None], state, np.array([start]), deterministic=True, action_masks=masks)
            obs, reward, terminated, truncated, _ = env.step(int(action[0]))
            total, done, start = total + reward, terminated or truncated, False
            opened += terminated and reward > 0
        returns.append(total)
    return opened / episodes, float(np.mean(returns))


def run(variant: str, seed: int, steps: int, out: str) -> dict:

    model, curve, seconds = train_recording(Config(**COMMON, **VARIANTS[variant], seed=seed, total_timesteps=steps), steps)
    success, mean_return = evaluate(model.model)
    result = dict(
        variant=variant, seed=seed, steps=steps, seconds=seconds, success=success, eval_return=mean_return, curve=curve
    )
    write_result(out, f"{variant}_seed{seed}", result)
    print(
        f"{variant} seed {seed}: {steps} steps in {seconds:.0f} s; opens the key's door in {success:.0%} of 100 episodes "
        f"(mean return {mean_return:.2f})",
        flush=True,
    )
    return result


def plot(out: str) -> None:
    plt, results = read_results(out)
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for i, variant in enumerate(VARIANTS):
        runs = [r for r in results if r["variant"] == variant]
        if not runs:
            continue
        grid = np.linspace(0, max(r["steps"] for r in runs), 200)
        curves = []
        for r in runs:
            steps, values = np.array(r["curve"], dtype=float).T
            ax.plot(steps, values, color=f"C{i}", lw=0.6, alpha=0.35)
            curves.append(np.interp(grid, steps, values, left=np.nan))
        success = np.mean([r["success"] for r in runs])
        ax.plot(
            grid,
            np.nanmean(curves, axis=0),
            color=f"C{i}",
            lw=2,
            label=f"{variant} ({len(runs)} seeds; right door {success:.0%})",
        )
    ax.set_xlabel("env steps")
    ax.set_ylabel("rollout/ep_rew_mean")
    ax.set_title("PPODictKeyDoor-v0: memory and masks (mean of seeds, each seed faint)")
    ax.legend(fontsize=8, loc="lower right")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(PLOT, dpi=90)
    print(f"wrote {PLOT}")
    print(
        "| policy | seed | right door (100 deterministic episodes) | mean return | last ep_rew_mean | wall s |\n"
        "| --- | --- | --- | --- | --- | --- |"
    )
    for r in results:
        print(
            f"| {r['variant']} | {r['seed']} | {r['success']:.0%} | {r['eval_return']:.2f} | {r['curve'][-1][1]:.2f} | "
            f"{r['seconds']:.0f} |"
        )


def main() -> None:
    parser, parse = learning_arguments(__doc__, "0,1,2", 30_000, "key_door", plot)
    parser.add_argument("--variants", default=",".join(VARIANTS))
    args = parse()
    if args is None:
        return
    for variant in args.variants.split(","):
        for seed in (int(s) for s in args.seeds.split(",")):
            run(variant, seed, args.steps, args.out)


if __name__ == "__main__":
    main()
