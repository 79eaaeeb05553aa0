"""Throughput of recurrent training: ppo_dict ``--model mlp_lstm`` (exact, and ``--lstm_fast_path True``)
against sb3-contrib's RecurrentPPO.

Two settings, each at 8 and 32 envs: rl-zoo's CartPoleNoVel-v1 entry of ``ppo_lstm.yml`` (VecNormalize,
n_steps 32, batch 256, 20 epochs, LSTM 64, ReLU, pi/vf [64]) and Reacher-v5 with MlpLstmPolicy's
defaults (LSTM 256, n_steps 128, batch 128, 10 epochs). In interleaved rounds: rollouts (collection
and GAE) of RecurrentPPO on DummyVecEnv against ppo_dict's exact rollouts on the worker pool (the
fast path's rollouts are these: it changes the update only), then training (rollouts and updates) of
RecurrentPPO, ppo_dict exact and ppo_dict's fast path in the same rounds. Every side runs one torch
thread. Ratios are medians of per-round ratios of env steps per second. Then, once per setting, where an
update's time goes: each side's update in CPU seconds; the oneDNN LSTM calls (``mkldnn_rnn_layer``
forward, ``mkldnn_rnn_layer_backward``) that an exact update must make, as RecurrentPPO makes them
(the same calls on the same shapes: exactness needs them), replayed alone: RecurrentPPO's update over
that time is the most an exact update can gain; the same for the fast path's calls; and with
``--torch_profile``, torch's profiler over one update of each side. Rows are appended to perf_log.md.

    python benchmarks/bench_recurrent.py [--quick] [--no_log] [--envs 8,32] [--settings cartpole,reacher] [--no_profile]
        [--torch_profile]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import warnings

import numpy as np
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import rl_zoo3.import_envs  # noqa: E402,F401 (registers CartPoleNoVel-v1 with rl-zoo's velocity mask)
from sb3_contrib import RecurrentPPO  # noqa: E402
from stable_baselines3.common.env_util import make_vec_env  # noqa: E402
from stable_baselines3.common.vec_env import VecNormalize  # noqa: E402

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
from ppo_dict.interop.sb3 import recurrent_ppo_kwargs  # noqa: E402

#: name: (gymnasium id, the settings besides n_envs, VecNormalize)
SETTINGS = {
    "cartpole": (
        "CartPoleNoVel-v1",
        dict(
            gym_packages=("rl_zoo3.import_envs",),
            n_steps=32,
            batch_size=256,
            gae_lambda=0.8,
            gamma=0.98,
            n_epochs=20,
            learning_rate="lin_0.001",
            clip_range="lin_0.2",
            ortho_init=False,
            activation_fn="relu",
            lstm_hidden_size=64,
            enable_critic_lstm=True,
            net_arch=dict(pi=[64], vf=[64]),
        ),
        True,
    ),
    "reacher": ("Reacher-v5", dict(), False),
}


def config(setting: str, n_envs: int, workers: int) -> Config:
    gym_id, settings, normalize = SETTINGS[setting]
    return Config(
        env=f"gym_{gym_id}",
        model="mlp_lstm",
        normalize=normalize,
        n_envs=n_envs,
        num_workers=workers,
        seed=0,
        verbose=0,
        device="cpu",
        total_timesteps=10**12,
        **settings,
    )


def recurrent_contender(name: str, cfg: Config, training: bool) -> Contender:
    """RecurrentPPO on DummyVecEnv (faster than its SubprocVecEnv here): per round one training iteration, or one rollout."""
    venv = make_vec_env(SETTINGS[_setting_of(cfg)][0], n_envs=cfg.num_envs, seed=0)
    if cfg.normalize:
        venv = VecNormalize(venv, gamma=cfg.gamma)
    model = RecurrentPPO("MlpLstmPolicy", venv, verbose=0, **{**recurrent_ppo_kwargs(cfg), "seed": 0})
    rollout = cfg.rollout_size
    if training:

        def run() -> int:
            model.learn(rollout, reset_num_timesteps=False)
            return rollout
    else:
        _, callback = model._setup_learn(10**12, None)
        callback.on_training_start(locals(), globals())

        def run() -> int:
            model.collect_rollouts(model.env, callback, model.rollout_buffer, n_rollout_steps=cfg.n_steps)
            return rollout

    contender = Contender(name, run, close=venv.close)
    contender.model = model  # type: ignore[attr-defined]
    return contender


def _setting_of(cfg: Config) -> str:
    return next(name for name, (gym_id, _, _) in SETTINGS.items() if cfg.env == f"gym_{gym_id}")


def update_profile(update) -> tuple[float, float, float]:
    """``(seconds, oneDNN LSTM forward seconds, oneDNN LSTM backward seconds)`` of one call of ``update``, from torch's
    profiler."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        started = time.perf_counter()
        update()
        seconds = time.perf_counter() - started
    by_name = {e.key: e.self_cpu_time_total / 1e6 for e in prof.key_averages()}
    return seconds, by_name.get("aten::mkldnn_rnn_layer", 0.0), by_name.get("aten::mkldnn_rnn_layer_backward", 0.0)


def kernel_floor(ppo, whole_sequences: bool = False) -> float:
    """CPU seconds of the oneDNN LSTM work an exact update of ``ppo``'s rollout cannot skip, without the
    profiler: the minibatches sb3-contrib would cut (one rotation per epoch, :class:`SequencePlan`), and
    for each LSTM and minibatch the calls its branch makes (one forward and one backward over the
    sequence without episode starts, else one of each per time step, the weight gradients added up as
    autograd adds them), replayed alone on the policy's weights. Both sides make these calls alike.
    ``whole_sequences``: the fast path's calls instead (one forward and one backward per minibatch)."""
    from ppo_dict.algo.networks.lstm_inference import LSTM_MODE
    from ppo_dict.data.recurrent import SequencePlan, env_change, rotated_indices

    storage, policy, cfg = ppo.storage, ppo.policy, ppo.cfg
    size, rng = storage.n_steps * storage.n_envs, np.random.RandomState(0)
    starts = storage.episode_starts.swapaxes(0, 1).reshape(-1)
    changes = env_change(storage.n_steps, storage.n_envs)
    shapes = []  # (n_seq, max_len, resets) per minibatch
    for _ in range(cfg.n_epochs):
        indices = rotated_indices(size, rng.randint(size))
        for begin in range(0, size, cfg.batch_size):
            batch = indices[begin : begin + cfg.batch_size]
            plan = SequencePlan(batch, starts, changes)
            shapes.append((plan.n_seq, plan.max_len, not whole_sequences and bool(starts[batch].any())))
    seconds = 0.0
    for lstm in (policy.lstm_actor, policy.lstm_critic):
        if lstm is None:
            continue
        hidden, weights = lstm.hidden_size, [w.detach() for w in lstm._flat_weights]
        for n_seq, max_len, resets in shapes:
            for layer in range(lstm.num_layers):
                w, grads = (
                    weights[4 * layer : 4 * layer + 4],
                    [torch.zeros_like(w) for w in weights[4 * layer : 4 * layer + 4]],
                )
                steps = (
                    [
                        (torch.randn(1, n_seq, w[0].shape[1]), torch.randn(n_seq, hidden), torch.randn(n_seq, hidden))
                        for _ in range(max_len)
                    ]
                    if resets
                    else [(torch.randn(max_len, n_seq, w[0].shape[1]), torch.zeros(n_seq, hidden), torch.zeros(n_seq, hidden))]
                )
                started = time.process_time()
                saved = [
                    (
                        x,
                        h,
                        c,
                        *torch.ops.aten.mkldnn_rnn_layer(
                            x, *w, h, c, False, [], LSTM_MODE, hidden, lstm.num_layers, True, False, False, True
                        ),
                    )
                    for x, h, c in steps
                ]  # forward
                seconds += time.process_time() - started
                saved = [
                    (*step, torch.ones_like(step[3]), torch.ones_like(step[4]), torch.ones_like(step[5])) for step in saved
                ]
                started = time.process_time()
                for x, h, c, out, hy, cy, workspace, d_out, d_hy, d_cy in reversed(saved):  # backward, latest step first
                    d = torch.ops.aten.mkldnn_rnn_layer_backward(
                        x,
                        *w,
                        h,
                        c,
                        out,
                        hy,
                        cy,
                        d_out,
                        d_hy,
                        d_cy,
                        False,
                        LSTM_MODE,
                        hidden,
                        lstm.num_layers,
                        True,
                        True,
                        False,
                        [],
                        False,
                        workspace,
                    )
                    for g, dw in zip(grads, d[1:5]):  # the weight gradients added up step by step, as autograd adds them
                        g.add_(dw)
                seconds += time.process_time() - started
    return seconds


def rollout_floor(sb3_model, ppo, n_steps: int) -> tuple[float, float]:
    """CPU microseconds per env step of what an exact rollout cannot skip, each replayed alone: every env's
    own step (RecurrentPPO's envs, with their Monitor, on random actions) and the LSTM calls of a step
    (one per LSTM on ``[1, n_envs, features]``, weights laid out once: ppo_dict's
    :class:`~ppo_dict.algo.networks.lstm_inference.PackedLstm`, the cheapest form of the call exactness needs)."""
    from ppo_dict.algo.networks.lstm_inference import PackedLstm

    vec = sb3_model.env
    while hasattr(vec, "venv"):
        vec = vec.venv
    envs = vec.envs
    started = time.process_time()
    for _ in range(n_steps):
        for env in envs:
            _, _, terminated, truncated, _ = env.step(env.action_space.sample())
            if terminated or truncated:
                env.reset()
    env_us = (time.process_time() - started) / (n_steps * len(envs)) * 1e6
    policy, n_envs, seconds = ppo.policy, len(envs), 0.0
    with torch.inference_mode():
        for lstm in (policy.lstm_actor, policy.lstm_critic):
            if lstm is None:
                continue
            packed = PackedLstm(lstm, n_envs)
            packed.refresh()
            x, hx = torch.randn(1, n_envs, lstm.input_size), (torch.zeros(lstm.num_layers, n_envs, lstm.hidden_size),) * 2
            started = time.process_time()
            for _ in range(n_steps):
                packed(x, hx)
            seconds += time.process_time() - started
    return env_us, seconds / (n_steps * n_envs) * 1e6


def profile_rows(
    table: Table, setting_text: str, sb3: Contender, ours: Contender, fast: Contender, torch_profile: bool, rounds: int = 3
) -> None:
    """Where one update's time goes on each side (after the rounds: each has a full rollout in its buffers),
    in ``rounds`` interleaved rounds (the host's speed drifts from minute to minute): each side's update
    in CPU seconds without the profiler, and the oneDNN floors of an exact and a fast-path update
    (:func:`kernel_floor`); medians of the per-round ratios, the caps being RecurrentPPO's update over
    a floor of the same round. Then, with ``torch_profile``, torch's profiler over one update of each
    (its events take memory: about 20 GB for RecurrentPPO's update of Reacher-v5 at 32 envs)."""
    sb3_model = sb3.model  # type: ignore[attr-defined]
    sb3_model._current_progress_remaining = 0.5
    updates = {
        "RecurrentPPO.train": sb3_model.train,
        "ppo_dict recurrent_update, exact": lambda: ours.model.train(0.5),  # type: ignore[attr-defined]
        "ppo_dict recurrent_update, fast path": lambda: fast.model.train(0.5),
    }  # type: ignore[attr-defined]
    work = {**updates, "floor": lambda: kernel_floor(ours.model), "fast floor": lambda: kernel_floor(ours.model, True)}  # type: ignore[attr-defined]
    seconds: dict[str, list[float]] = {name: [] for name in work}
    for r in range(rounds):
        names = list(work)[r % len(work) :] + list(work)[: r % len(work)]
        for name in names:
            started = time.process_time()
            result = work[name]()
            seconds[name].append(result if name.endswith("floor") else time.process_time() - started)
    contrib, exact, quick, floor, fast_floor = seconds.values()

    def median_ratio(a: list[float], b: list[float]) -> str:
        ratios = sorted(x / y for x, y in zip(a, b))
        return f"{statistics.median(ratios):.2f}x ({ratios[0]:.2f}-{ratios[-1]:.2f})"

    med = statistics.median
    table.row(
        setting_text,
        f"one update, CPU s (median of {rounds} interleaved rounds, no profiler)",
        f"RecurrentPPO {med(contrib):.2f}, ppo_dict exact {med(exact):.2f} ({median_ratio(contrib, exact)}), "
        f"fast path {med(quick):.2f} ({median_ratio(contrib, quick)})",
    )
    for what, time_, side in (("an exact update", floor, exact), ("a fast-path update", fast_floor, quick)):
        share = statistics.median(t / c for t, c in zip(time_, contrib)), statistics.median(t / o for t, o in zip(time_, side))
        table.row(
            setting_text,
            f"oneDNN LSTM calls {what} makes, replayed alone (CPU s)",
            f"{med(time_):.2f} s: {share[0]:.0%} of RecurrentPPO's update, {share[1]:.0%} of ppo_dict's",
            f"cap of {what}'s speed-up over RecurrentPPO (its update / these calls, per round)",
            median_ratio(contrib, time_),
        )
    for name, update in updates.items() if torch_profile else ():
        total, forward, backward = update_profile(update)
        table.row(
            setting_text,
            f"one update, {name} (under torch's profiler)",
            f"{total:.2f} s: oneDNN LSTM forward {forward:.2f} s, backward {backward:.2f} s, "
            f"the rest {total - forward - backward:.2f} s",
        )


def measure(
    table: Table,
    setting: str,
    n_envs: int,
    workers: int,
    rounds: int,
    train_rounds: int,
    profile: bool = True,
    torch_profile: bool = False,
) -> None:
    cfg = config(setting, n_envs, workers)
    text = (
        f"{cfg.env.removeprefix('gym_')}, {n_envs} envs, LSTM {cfg.lstm_settings['lstm_hidden_size']}, "
        f"n_steps {cfg.n_steps}, batch {cfg.batch_size}, {cfg.n_epochs} epochs"
    )
    sb3 = recurrent_contender("RecurrentPPO DummyVecEnv", cfg, training=False)
    exact = ppo_dict_contender(f"ppo_dict mlp_lstm, {workers} workers, exact", cfg, False)
    in_process = ppo_dict_contender("ppo_dict mlp_lstm in-process (--num_workers 0), exact", cfg.replace(num_workers=0), False)
    parts: list[tuple[float, float]] = []  # (envs, LSTM calls) CPU-us per env step of each floor round

    def replay() -> int:
        parts.append(rollout_floor(sb3.model, in_process.model, cfg.n_steps))  # type: ignore[attr-defined]
        return cfg.n_steps * cfg.num_envs

    floor = Contender("rollout floor", replay)
    try:
        interleave([sb3, exact, in_process, *([floor] if profile else [])], rounds)
        table.row(text, "rollout, RecurrentPPO DummyVecEnv", f"{sb3.rate:.0f} steps/s, {sb3.cpu:.0f} CPU-us/step")
        for c in (exact, in_process):
            table.row(
                text,
                f"rollout, {c.name}",
                f"{c.rate:.0f} steps/s, {c.cpu:.0f} CPU-us/step",
                "vs RecurrentPPO",
                ratio_text(c, sb3, 2.0),
            )
        if profile:  # the floor's rounds interleaved with the others': RecurrentPPO's CPU per step over the floor's, per round
            caps = sorted(a / b for a, b in zip(sb3.cpu_us_per_step, floor.cpu_us_per_step))
            env_us, lstm_us = (statistics.median(p[i] for p in parts[1:]) for i in range(2))  # parts[0]: the warm-up
            table.row(
                text,
                "rollout: the envs' own steps and the LSTM calls of each step, replayed alone",
                f"{env_us:.0f} + {lstm_us:.0f} CPU-us/step",
                "cap of an exact in-process rollout's speed-up over RecurrentPPO (its CPU per step / these, per round)",
                f"{statistics.median(caps):.2f}x ({caps[0]:.2f}-{caps[-1]:.2f})",
            )
    finally:
        sb3.close(), exact.close(), in_process.close()
    sb3 = recurrent_contender("RecurrentPPO DummyVecEnv", cfg, training=True)
    exact = ppo_dict_contender("ppo_dict mlp_lstm exact", cfg, True)
    fast = ppo_dict_contender("ppo_dict mlp_lstm --lstm_fast_path True", cfg.replace(lstm_fast_path=True), True)
    try:
        interleave([sb3, exact, fast], train_rounds)
        for c, what, target in ((exact, "exact", 2.0), (fast, "fast path", 10.0)):
            timing = c.model.timing  # type: ignore[attr-defined]
            table.row(
                text,
                f"training fps, ppo_dict {what} vs RecurrentPPO",
                f"{c.rate:.0f} vs {sb3.rate:.0f} steps/s; {c.cpu:.0f} vs {sb3.cpu:.0f} CPU-us/step "
                f"({sb3.cpu / c.cpu:.2f}x in CPU time)",
                f"ppo_dict's time since its warm-up: rollouts {timing.rollout:.2f} s, updates {timing.update:.2f} s",
                ratio_text(c, sb3, target),
            )
        if profile:
            profile_rows(table, text, sb3, exact, fast, torch_profile)
    finally:
        sb3.close(), exact.close(), fast.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_bench_flags(parser, "fewer rounds (a smoke run)")
    parser.add_argument("--settings", default="cartpole,reacher", help=f"which of {', '.join(SETTINGS)}, comma-separated")
    parser.add_argument("--rounds", type=int, default=0, help="rollout rounds (default 4, --quick 1)")
    parser.add_argument(
        "--train_rounds", type=int, default=0, help="training rounds, one iteration each (default 3, --quick 1)"
    )
    parser.add_argument(
        "--no_profile", action="store_true", help="skip where an update's time goes (its CPU time, the oneDNN floors)"
    )
    parser.add_argument(
        "--torch_profile", action="store_true", help="also one update of each side under torch's profiler (memory-hungry)"
    )
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)
    parser_rounds = (1, 1) if args.quick else (4, 3)
    rounds, train_rounds = args.rounds or parser_rounds[0], args.train_rounds or parser_rounds[1]
    started, table = machine_times(), Table()
    for setting in args.settings.split(","):
        for n_envs in (int(n) for n in args.envs.split(",")):
            measure(table, setting, n_envs, args.workers, rounds, train_rounds, not args.no_profile, args.torch_profile)
    flags = " ".join(
        f
        for f in (
            args.quick and "--quick",
            args.envs != "8,32" and f"--envs {args.envs}",
            args.settings != "cartpole,reacher" and f"--settings {args.settings}",
            args.rounds and f"--rounds {args.rounds}",
            args.train_rounds and f"--train_rounds {args.train_rounds}",
            args.no_profile and "--no_profile",
            args.torch_profile and "--torch_profile",
        )
        if f
    )
    table.write("bench_recurrent", f"python benchmarks/bench_recurrent.py {flags}".strip(), started, log=log_path(args))


if __name__ == "__main__":
    main()
