"""CPU time of recurrent training: masks, GRU cells and the fast path beside sb3-contrib's RecurrentPPO.

PPODictKeyDoor-v0 with ``all_valid=True`` (every action valid: the masks change no choice), 8 envs in this
process, n_steps 128, batch 256, 4 epochs, LSTM/GRU 64 wide, one torch thread; each row trains 4 rollouts
(4,096 env steps) and reports the CPU seconds of ``learn`` (``time.process_time``), per round, and the least.
sb3-contrib's RecurrentPPO (no masks: it has none) runs on sb3's DummyVecEnv of the same envs.

    python benchmarks/speed_masked_recurrent.py [--rounds 2] [--note "taken under contention"] [--no_log]

The table is printed, and its ledger rows (issue 61's comparisons: masked exact against RecurrentPPO, whose CPU time
it should stay within 10% of; GRU against LSTM on the fast path) appended to perf_log.md (``--no_log``: printed only).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import ppo_dict.envs.key_door  # noqa: E402,F401  (registers PPODictKeyDoor-v0)
from benchmarks.harness import Table, add_log_flags, log_path, machine_times  # noqa: E402
from ppo_dict.core.config import Config  # noqa: E402

STEPS = 8 * 128 * 4
BASE = dict(
    env="gym_PPODictKeyDoor-v0",
    gym_packages=("ppo_dict.envs.key_door",),
    env_kwargs=dict(all_valid=True),
    model="mlp_lstm",
    lstm_hidden_size=64,
    n_envs=8,
    n_steps=128,
    batch_size=256,
    n_epochs=4,
    seed=0,
    num_workers=0,
    verbose=0,
    device="cpu",
    total_timesteps=STEPS,
)
ROWS = {
    "ppo_dict LSTM, no masks": {},
    "ppo_dict LSTM, masks": dict(action_masks=True),
    "sb3-contrib RecurrentPPO (no masks)": None,
    "ppo_dict GRU, masks": dict(action_masks=True, rnn_type="gru"),
    "ppo_dict LSTM, masks, fast path": dict(action_masks=True, lstm_fast_path=True),
    "ppo_dict GRU, masks, fast path": dict(action_masks=True, rnn_type="gru", lstm_fast_path=True),
}


def cpu_seconds(settings) -> float:
    if settings is None:
        from tests.parity.sides import make_recurrent

        model = make_recurrent(Config(**BASE))
    else:
        from ppo_dict.algo.ppo import PPO
        from ppo_dict.run.run_plan import build_env_pool

        cfg = Config(**BASE, **settings)
        model = PPO(cfg, build_env_pool(cfg))
    started = time.process_time()
    try:
        model.learn(STEPS)
    finally:
        (model.get_env() if settings is None else model.pool).close()
    return time.process_time() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--note", default="", help="said after the ledger section's title (e.g. how busy the machine was)")
    add_log_flags(parser)
    args = parser.parse_args()
    torch.set_num_threads(1)
    warnings.simplefilter("ignore")
    started = machine_times()
    times: dict[str, list[float]] = {name: [] for name in ROWS}
    for _ in range(args.rounds):  # interleaved: each round runs every row once
        for name, settings in ROWS.items():
            times[name].append(cpu_seconds(settings))
    print(f"| training, {STEPS} env steps | CPU s per round | least |\n| --- | --- | --- |")
    for name, ts in times.items():
        print(f"| {name} | {', '.join(f'{t:.2f}' for t in ts)} | {min(ts):.2f} |")
    ledger(times, args, started)


def ledger(times: dict[str, list[float]], args: argparse.Namespace, started: list[int]) -> None:
    """The perf_log.md rows: each comparison of the least CPU seconds of its two rows."""
    least = {name: min(ts) for name, ts in times.items()}
    setting = (
        f"PPODictKeyDoor-v0 all_valid, 8 envs, n_steps 128, batch 256, 4 epochs, width 64, 1 thread, {args.rounds} rounds"
    )
    table = Table()
    for what, ours, other, target in (
        ("masked LSTM, exact", "ppo_dict LSTM, masks", "sb3-contrib RecurrentPPO (no masks)", 1.10),
        ("masked LSTM, exact", "ppo_dict LSTM, masks", "ppo_dict LSTM, no masks", None),
        ("masked GRU, fast path", "ppo_dict GRU, masks, fast path", "ppo_dict LSTM, masks, fast path", None),
        ("masked GRU, fast path", "ppo_dict GRU, masks, fast path", "ppo_dict GRU, masks", None),
    ):
        ratio = least[ours] / least[other]
        judged = "" if target is None else f" (target <= {target:.2f}: {'met' if ratio <= target else 'NOT met'})"
        table.row(
            setting,
            f"{what}: CPU s of learn, {STEPS} steps (least)",
            f"{least[ours]:.2f} s",
            f"{other}: {least[other]:.2f} s",
            f"{ratio:.2f}x{judged}",
        )
    flags = f"--rounds {args.rounds}" + (f" --note {args.note!r}" if args.note else "")
    title = "speed_masked_recurrent" + (f", {args.note}" if args.note else "")
    table.write(title, f"python benchmarks/speed_masked_recurrent.py {flags}", started, log=log_path(args))


if __name__ == "__main__":
    main()
