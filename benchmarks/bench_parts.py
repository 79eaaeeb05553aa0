"""A parts model of a many-core host, from parts measured on this one: what W processes of E envs would reach.

A rollout step on W processes of E envs each takes about ``T = S(N) + c + t_work(E) + t_env(E)`` (N = W x E):

* ``S(N)``: the main process's serial time per step, when no process has work (``time/serial_us`` of a real run of
  N envs: the whole-batch books, the draws, the hand-over); for today's central path, its policy and books too
  (``time/policy_us + time/bookkeeping_us`` of the same run with ``--shard_policy False``);
* ``c``: one hand-over and its answer between two processes on two cores (a ping-pong, one zero-work env, waits
  that look first, as each process has a core of its own on such a host);
* ``t_work(E)``: one process's policy rows and books for its E envs (``ShardWork``, one thread, a window of the
  batch's rows as the start probe chose it);
* ``t_env(E)``: one process stepping E real envs in turn, no policy (the envs' own cost, caches included: E MuJoCo
  envs cost more per step than one hot env);
* ``t_raw``: one env stepped alone.

Efficiency is throughput against ``W / t_raw`` (the linear line of one hot env per core) and against ``W x E /
t_env(E)`` (the envs' own rate in blocks of E: what the pipeline costs above the envs). ``--double_buffer`` runs the
policy of one half centrally while the workers step the other: ``T = 2 max(S_half, c + t_env(E / 2))``.
On 2 CPUs every part is measured where it runs alone or in pairs, so contention cannot fake the model; the
prediction is a model, and a many-core host (``benchmarks/many_core.sh``) confirms it.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from benchmarks.bench import ours_config, ours_contender, raw_env
from benchmarks.harness import Contender, Table, interleave
from ppo_dict.algo.networks.policy import ActorCritic
from ppo_dict.algo.rollout.rollout_step import PolicyStep, StepObsToDevice
from ppo_dict.algo.rollout.shard import ACT, BOOKS, NORM, ShardWork
from ppo_dict.algo.rollout.sharded_rollout import ShardedRollout
from ppo_dict.core.machine import usable_cpus
from ppo_dict.core.seeding import thread_count
from ppo_dict.data.storage import RolloutStorage
from ppo_dict.envs import resolve_env_name
from ppo_dict.vec import probe_env
from ppo_dict.vec.in_process import InProcessEnvPool
from ppo_dict.vec.shm_pool import ShmEnvPool

#: The many-core layouts predicted: (W processes, E envs each).
LAYOUTS = ((16, 16), (64, 16))
STEPS = 64


def env_block(env_id: str, envs: int) -> Contender:
    """``t_env(E)``: one process stepping ``envs`` real envs in turn with fixed actions (the runner's own books), no policy."""
    pool = InProcessEnvPool(probe_env(resolve_env_name(f"gym_{env_id}")), envs, STEPS)
    pool.reset(0)
    pool.storage.env_actions[...] = 0.0

    def run() -> int:
        for t in range(STEPS):
            pool.step(t)
        return STEPS * envs

    return Contender(f"one process stepping {envs} {env_id} envs in turn, no policy", run, close=pool.close)


def work_block(env_id: str, processes: int, envs: int) -> Contender:
    """``t_work(E)``: one middle process's policy rows and books (``ShardWork``, one thread) in a batch of W x E."""
    backend = probe_env(resolve_env_name(f"gym_{env_id}"))
    n = processes * envs
    storage = RolloutStorage(backend.observation_space, backend.action_space, STEPS, n)
    torch.manual_seed(0)
    policy = ActorCritic(backend.observation_space, backend.action_space)
    cfg = ours_config(n, 0, "cpu", env_id=env_id, n_steps=STEPS)
    sharded = ShardedRollout(cfg, storage, backend.label, policy, None, PolicyStep(policy, n))
    granule, _ = sharded.probe(
        StepObsToDevice(storage, torch.device("cpu")), [(range(w * envs, (w + 1) * envs), True) for w in range(processes)]
    )
    own = range(envs, 2 * envs)
    work = ShardWork(sharded.program, policy, sharded.block, storage, own)
    rng = np.random.default_rng(0)
    for arr in storage.obs.values():
        arr[...] = rng.normal(size=arr.shape)
    storage.truncated[:, own.start] = True  # one of its envs cut by a time limit each step: a bootstrap in the books

    def run() -> int:
        with thread_count(1):
            for t in range(STEPS):
                sharded.draw(t, cfg.sde_sample_freq)
                work.before((ACT | NORM | BOOKS if t else ACT, t, t - 1, 0, t % 2, sharded.mslot, sharded.version))
        return STEPS * envs

    c = Contender(f"one process's policy rows and books for {envs} envs of {n} (windows of {sharded.program.granule})", run)
    c.granule = granule  # type: ignore[attr-defined]
    return c


def handover() -> Contender:
    """``c``: a hand-over and its answer between this process and one worker stepping one zero-work env."""
    from ppo_dict.envs import zero_work

    spec = resolve_env_name(f"gym_{zero_work.GYM_ID}", gym_packages=(zero_work.MODULE,))
    pool = ShmEnvPool(probe_env(spec), 1, 1, n_steps=STEPS, main_steps_envs=False, spin_wait_us=1000.0)
    pool.reset(0)

    def run() -> int:
        for t in range(STEPS):
            pool.step(t)
        return STEPS

    return Contender("a hand-over and its answer, one worker, one zero-work env, waits that look", run, close=pool.close)


def serial_us(c: Contender, keys: tuple[str, ...]) -> float:
    logs = c.model.timing.logs(c.model.pool.num_envs)  # type: ignore[attr-defined]
    return sum(logs[k] for k in keys)


def parts(table: Table, env_id: str, rounds: int) -> dict[str, Any]:
    """Measure the parts (interleaved rounds) and print the model's predictions at :data:`LAYOUTS`."""
    here = usable_cpus()
    sizes = sorted({e for _, e in LAYOUTS} | {e // 2 for _, e in LAYOUTS} | {256 // here})
    totals = sorted({w * e for w, e in LAYOUTS})
    raw = raw_env(STEPS * 16, env_id)
    blocks = {e: env_block(env_id, e) for e in sizes}
    works = {(w, e): work_block(env_id, w, e) for w, e in LAYOUTS}
    ping = handover()
    runs = {}
    for n in totals:
        runs[n, "sharded"] = ours_contender(
            f"{n} envs, exact, default layout", ours_config(n, None, "cpu", env_id=env_id, n_steps=STEPS), False
        )
        runs[n, "central"] = ours_contender(
            f"{n} envs, exact, --shard_policy False",
            ours_config(n, None, "cpu", env_id=env_id, n_steps=STEPS, shard_policy=False),
            False,
        )
        runs[n, "double"] = ours_contender(
            f"{n} envs, --double_buffer", ours_config(n, None, "cpu", env_id=env_id, n_steps=STEPS, double_buffer=True), False
        )
    contenders = [raw, ping, *blocks.values(), *works.values(), *runs.values()]
    try:
        interleave(contenders, rounds, warmup=True)
        t_raw = 1e6 / raw.rate
        t_env = {e: e * 1e6 / c.rate for e, c in blocks.items()}
        c_us = 1e6 / ping.rate
        setting = f"{env_id}, MLP 64x64, parts measured here (median of {rounds} interleaved rounds)"
        table.row(setting, "t_raw: one env alone", f"{t_raw:.1f} us a step")
        table.row(setting, "c: a hand-over and its answer (one worker, waits that look)", f"{c_us:.1f} us")
        for e in sizes:
            table.row(
                setting,
                f"t_env({e}): {e} envs stepped in turn by one process",
                f"{t_env[e]:.0f} us a step ({t_env[e] / e:.1f} us an env)",
            )
        for (w, e), c in works.items():
            table.row(
                setting,
                f"t_work({e}) in a batch of {w * e}: one process's policy rows and books",
                f"{e * 1e6 / c.rate:.0f} us",
                f"windows of {c.granule}"
                if c.granule  # type: ignore[attr-defined]
                else "the probe found no granule here",
            )
        serial = {n: serial_us(runs[n, "sharded"], ("time/serial_us",)) for n in totals}
        central = {
            n: serial_us(runs[n, "central"], ("time/policy_us", "time/bookkeeping_us", "time/serial_us")) for n in totals
        }
        halves = {n: serial_us(runs[n, "double"], ("time/policy_us", "time/bookkeeping_us")) / 2 for n in totals}
        for n in totals:
            table.row(
                setting,
                f"S({n}): the main process's serial time a step",
                f"sharded {serial[n]:.0f} us; central (policy + books) {central[n]:.0f} us; "
                f"--double_buffer's half (policy + books) {halves[n]:.0f} us",
            )
        rate, e = runs[256, "sharded"].rate, 256 // here  # 256 envs on the default layout: `here` processes of 256 / here
        table.row(
            f"{env_id}, 256 envs on this host's default layout ({here} processes), exact, sharded",
            "measured rollout",
            f"{rate:.0f} steps/s",
            f"{here} x t_env({e}): {here * e * 1e6 / t_env[e]:.0f} steps/s",
            f"efficiency {rate * t_env[e] / (here * e * 1e6):.2f} (target >= 0.85)",
        )
        predicted = {}
        for w, e in LAYOUTS:
            n, work = w * e, e * 1e6 / works[w, e].rate
            rows = {
                "exact, sharded": serial[n] + c_us + work + t_env[e],
                "exact, central": central[n] + c_us + t_env[e],
                "--double_buffer": 2 * max(halves[n], c_us + t_env[e // 2]),
            }
            for name, step in rows.items():
                vs_raw, vs_env = e * t_raw / step, t_env[e] / step
                predicted[w, e, name] = vs_raw
                table.row(
                    f"{env_id}, {w} processes x {e} envs (predicted from the parts above)",
                    name,
                    f"{step:.0f} us a step, {n * 1e6 / step:.0f} steps/s",
                    f"efficiency vs {w} x raw: {vs_raw:.2f}",
                    f"vs {w} x t_env({e}): {vs_env:.2f}",
                )
        return predicted
    finally:
        for c in contenders:
            c.close()
