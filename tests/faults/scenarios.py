"""Fault scenarios, each run as ``python -m tests.faults.scenarios NAME ARGS...`` in its own
process (and session) by ``test_worker_faults.py``, which kills it if it hangs.

A scenario prints one JSON line: what was raised (type, message), how long the failing call
and ``close()`` took, and which processes of this session outlived ``close()``. Scenarios that
the test kills from outside print their worker pids first and then block.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from typing import Any, Callable

import numpy as np
import torch

from ppo_dict.envs import EnvSpec, resolve_env_name
from ppo_dict.vec import probe_env
from ppo_dict.vec.shm_pool import ShmEnvPool
from tests.faults.fault_envs import FaultEnv, fault_spec

#: FaultEnv runs are reset with this seed, so env i has seed 10 + i; env 3 is in worker 1 (2 x 2).
SEED = 10
AIMED_ENV = 3
HELPER_MARKERS = ("forkserver import main", "resource_tracker import main")


def proc_stat(pid: int) -> list[str]:
    """``/proc/<pid>/stat`` fields after the command name: state, ppid, pgrp, session, ..."""
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()


def session_processes(session: int) -> list[int]:
    """Live (non-zombie) processes of a session."""
    found = []
    for name in filter(str.isdigit, os.listdir("/proc")):
        try:
            fields = proc_stat(int(name))
        except OSError:
            continue
        if int(fields[3]) == session and fields[0] != "Z":
            found.append(int(name))
    return found


def is_helper(pid: int) -> bool:
    """multiprocessing's per-process forkserver and resource tracker (they exit with us)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmdline = f.read().replace(b"\0", b" ").decode()
    except OSError:
        return False
    return any(marker in cmdline for marker in HELPER_MARKERS)


def strays(seconds: float = 0.0, exclude: tuple[int, ...] = ()) -> list[int]:
    """Processes of this session, other than this one, ``exclude`` and multiprocessing's helpers, once none is left or
    ``seconds`` have passed (a process that exits of itself meanwhile, as a worker the forkserver forked as its
    client's connection broke does on reading the end of its pipe, is not one left running)."""
    deadline = time.monotonic() + seconds
    while True:
        left = [
            pid for pid in session_processes(os.getsid(0)) if pid != os.getpid() and pid not in exclude and not is_helper(pid)
        ]
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(0.05)


#: what multiprocessing / SharedMemory could leave in /dev/shm
SHM_PREFIXES = ("sem.mp-", "psm_", "pym-", "mp-")
#: how long an entry another test made may stay (``make test`` runs two tests at once: its pools come and go)
SHM_WAIT = 120.0


def shm_entries(prefixes: tuple[str, ...] = SHM_PREFIXES) -> set[str]:
    """/dev/shm's entries whose names start with one of ``prefixes`` (``("",)``: every entry)."""
    return {name for name in os.listdir("/dev/shm") if name.startswith(prefixes)}


def shm_left(before: set[str], seconds: float = SHM_WAIT, prefixes: tuple[str, ...] = SHM_PREFIXES) -> set[str]:
    """The /dev/shm entries made since ``before`` that are still there after ``seconds``; empty once each is gone.

    Called once the processes that could have made them are gone: an entry of theirs left now stays for good, so it is
    returned; an entry another test running beside this one made (``make test`` runs two at once) goes when that test
    ends its pool, so it is waited for, not counted."""
    new = shm_entries(prefixes) - before
    deadline = time.monotonic() + seconds
    while new and time.monotonic() < deadline:
        time.sleep(0.1)
        new &= shm_entries(prefixes)
    return new


def alive(pid: int) -> bool:
    try:
        return proc_stat(pid)[0] != "Z"
    except OSError:
        return False


def fault_pool(mode: str, mp_method: str = "forkserver", step_timeout: float = 60.0, **kwargs: Any) -> ShmEnvPool:
    spec = fault_spec(mode=mode, bad_seed=SEED + AIMED_ENV, **kwargs)
    return ShmEnvPool(
        probe_env(spec), num_workers=2, envs_per_worker=2, n_steps=8, mp_method=mp_method, step_timeout=step_timeout
    )


def capture(call: Callable[[], Any]) -> dict[str, Any]:
    """Run ``call``; report the exception it raised and how long it took."""
    start = time.monotonic()
    try:
        call()
    except Exception as exc:  # noqa: BLE001 (reporting it is the point)
        return {"error": type(exc).__name__, "message": str(exc), "call_s": time.monotonic() - start}
    return {"error": None, "message": "", "call_s": time.monotonic() - start}


def close_twice(pool: ShmEnvPool, result: dict[str, Any]) -> dict[str, Any]:
    start = time.monotonic()
    pool.close()
    pool.close()
    result["close_s"] = time.monotonic() - start
    result["after_close"] = capture(lambda: pool.step(0))
    result["alive_workers"] = [pid for pid in pool.pids if alive(pid)]
    result["strays"] = strays()
    return result


def step_until_error(pool: ShmEnvPool, steps: int = 8) -> None:
    pool.reset(SEED)
    for t in range(steps):
        pool.storage.env_actions[...] = 0.5
        pool.step(t)


# ------------------------------------------------------------------------------ scenarios
def env_error(mode: str) -> dict[str, Any]:
    """Cases 1-3: an env raises in step, reset, auto-reset or (in worker 1) its constructor."""
    if mode == "init_raise":
        result = capture(lambda: fault_pool(mode))
        result.update(alive_workers=[], strays=strays())
        return result
    pool = fault_pool(mode)
    return close_twice(pool, capture(lambda: step_until_error(pool)))


def unknown_id(name: str) -> dict[str, Any]:
    """Case 4: refused in this process, before any process starts."""
    result = capture(lambda: resolve_env_name(name))
    gym_id = name.removeprefix("gym_")
    result["pool"] = capture(lambda: ShmEnvPool(probe_env(EnvSpec(name=name, gym_id=gym_id)), 2, 2, n_steps=8))
    result["children"] = [pid for pid in session_processes(os.getsid(0)) if pid != os.getpid()]
    return result


def kill_worker(when: str) -> dict[str, Any]:
    """Cases 5-6: SIGKILL worker 1 while idle, or while main waits for a step."""
    pool = fault_pool("hang" if when == "mid_step" else "none", at_step=1)
    pool.reset(SEED)
    victim = pool.pids[1]
    if when == "idle":
        os.kill(victim, signal.SIGKILL)
        time.sleep(0.3)
        result = capture(lambda: pool.step(0))
        result["since_kill_s"] = result["call_s"]
    else:
        killed_at: list[float] = []
        threading.Timer(0.5, lambda: (killed_at.append(time.monotonic()), os.kill(victim, signal.SIGKILL))).start()
        result = capture(lambda: pool.step(0))
        result["since_kill_s"] = time.monotonic() - killed_at[0]
    result["victim"] = victim
    return close_twice(pool, result)


def hang(step_timeout: str) -> dict[str, Any]:
    """Case 7: an env sleeps in step; the step times out and close() escalates."""
    pool = fault_pool("hang", step_timeout=float(step_timeout), at_step=1)
    pool.reset(SEED)
    result = capture(lambda: pool.step(0))
    return close_twice(pool, result)


def serve_then_block(mp_method: str, busy: str) -> dict[str, Any]:
    """Cases 8-9: print the worker pids, then block idle or in a step whose env 3 sleeps 4 s,
    until the test SIGKILLs this process (or its group)."""
    pool = fault_pool("hang" if busy == "hung" else "none", mp_method=mp_method, at_step=1, hang_s=4.0)
    pool.reset(SEED)
    print(json.dumps({"pids": pool.pids, "shm": sorted(os.listdir("/dev/shm"))}), flush=True)
    if busy == "hung":
        pool.step(0)
    time.sleep(600)
    return {}


def forkserver_killed() -> dict[str, Any]:
    """The forkserver dies (as it does when a client's connection closes before it sends its file descriptors:
    this process at its open-file limit starting a worker) while env 3's worker sleeps 30 s in a step. Every
    worker's status pipe ends, which multiprocessing reads as an exit; the step fails, and the workers, orphans
    now, are still stopped: none is left."""
    from multiprocessing import forkserver

    pool = fault_pool("hang", at_step=1, hang_s=30.0, step_timeout=5.0)
    pool.reset(SEED)
    server = forkserver._forkserver._forkserver_pid
    os.kill(server, signal.SIGKILL)
    os.waitpid(server, 0)
    result = capture(lambda: pool.step(0))
    result["strays_after_failure"] = strays()
    pool.close()
    result["strays"] = strays()
    return result


def shm_too_small() -> dict[str, Any]:
    """Case 14: the buffer does not fit in /dev/shm nor the temp dir (free space faked)."""
    import ppo_dict.vec.shared_memory as shared_memory

    shared_memory.free_bytes = lambda path: 1 << 20
    result = capture(lambda: ShmEnvPool(probe_env(resolve_env_name("gym_Pendulum-v1")), 2, 2, n_steps=100_000))
    result["children"] = [pid for pid in session_processes(os.getsid(0)) if pid != os.getpid()]
    return result


def non_finite(mode: str) -> dict[str, Any]:
    """Cases 15-16: NaN obs / reward from env 3 at its 4th step, caught before the normaliser."""
    from ppo_dict.algo.ppo import PPO
    from ppo_dict.core.config import Config

    torch.set_num_threads(1)
    cfg = Config(
        env="gym_FaultEnv-v0",
        gym_packages=("tests.faults.fault_envs",),
        n_envs=4,
        num_workers=2,
        envs_per_worker=2,
        n_steps=8,
        batch_size=16,
        seed=SEED,
        normalize=True,
        verbose=0,
        total_timesteps=64,
    )
    pool = fault_pool(mode, at_step=4)
    model = PPO(cfg, pool)
    result = capture(model.learn)
    obs_rms = model.normalizer.obs_rms["obs"]
    result["obs_count"], result["obs_mean_finite"] = (
        float(obs_rms.count),
        bool(np.isfinite(obs_rms.mean).all() and np.isfinite(obs_rms.var).all()),
    )
    result["ret_count"], result["ret_finite"] = (
        float(model.normalizer.ret_rms.count),
        bool(np.isfinite(model.normalizer.ret_rms.var).all()),
    )
    return close_twice(pool, result)


def resource_counts() -> dict[str, Any]:
    return {"fds": len(os.listdir("/proc/self/fd")), "threads": threading.active_count()}


def cycles(mp_method: str, count: str) -> dict[str, Any]:
    """Case 13: create, step and close the pool ``count`` times; nothing may grow."""
    spec = resolve_env_name("gym_CartPole-v1")

    def cycle() -> None:
        pool = ShmEnvPool(probe_env(spec), 2, 2, n_steps=8, mp_method=mp_method)
        pool.reset(0)
        pool.step(0)
        pool.close()

    cycle()  # the first one starts the forkserver / resource tracker and the RawArray heap
    before, shm_before = resource_counts(), shm_entries(("",))
    start = time.monotonic()
    for _ in range(int(count)):
        cycle()
    # /dev/shm looked at while this process (and its resource tracker, which would unlink a leak at its exit) lives
    left = sorted(shm_left(shm_before, prefixes=("",)))
    return {
        "before": before,
        "after": resource_counts(),
        "shm_left": left,
        "strays": strays(),
        "seconds": time.monotonic() - start,
    }


def vec_env_misuse() -> dict[str, Any]:
    """Cases 19-20: bad action batches are refused before any worker steps, the next good step is
    current (compared with DummyVecEnv), and protocol misuse gets specific errors."""
    import gymnasium as gym
    from stable_baselines3.common.vec_env import DummyVecEnv

    from ppo_dict.vec.shm_vec_env import ShmVecEnv

    env_fns = [lambda: gym.make("FaultEnv-v0") for _ in range(4)]
    shm, ref = ShmVecEnv(env_fns, num_workers=2), DummyVecEnv(env_fns)
    result: dict[str, Any] = {}
    for venv in (shm, ref):
        venv.seed(SEED)
        venv.reset()
    good = np.array([[0.1], [0.2], [0.3], [0.4]], dtype=np.float32)
    bad = {
        "rows": good[:3],
        "dim": np.zeros((4, 2), np.float32),
        "dtype": good.astype(np.complex128),  # float64 is taken (a same-kind cast), as sb3's classes take it
        "nan": np.where(np.arange(4)[:, None] == 2, np.nan, good).astype(np.float32),
    }
    for name, actions in bad.items():
        result[name] = capture(lambda: shm.step(actions))
    result["steps_taken"] = shm.get_attr("total")
    result["wait_without_async"] = capture(shm.step_wait)
    wide = np.zeros((4, 2), np.float32)
    wide[:, 1] = good[:, 0]
    for k in range(2):  # a non-contiguous batch is fine: it is copied into shared memory
        batch = wide[:, 1:] if k else good
        got, want = shm.step(batch), ref.step(batch)
        result[f"step{k}_equal"] = all(np.array_equal(a, b) for a, b in zip(got[:3], want[:3])) and got[3] == want[3]
    result["steps_after"] = shm.get_attr("total")
    shm.close()
    shm.close()
    result["after_close"] = capture(lambda: shm.step(good))
    result["alive_workers"] = [pid for pid in shm.pids if alive(pid)]
    result["strays"] = strays()
    return result


def main_process_envs() -> dict[str, Any]:
    """The main process's own envs from Python (the watchdog started as a library user would,
    without the hard stage): an env raising in-process, hanging in-process in step (also one that
    swallows the timeout and returns) and in reset, hanging in the main process's share of a worker pool."""
    from ppo_dict.vec import watchdog
    from ppo_dict.vec.in_process import InProcessEnvPool

    watchdog.start(default_timeout=1.0)
    result: dict[str, Any] = {}
    cases = (
        ("raise", "step_raise", 1),
        ("hang", "hang", 1),
        ("swallowed", "hang_swallow", 1),
        ("reset_hang", "reset_hang", SEED + 1),
    )
    for name, mode, bad in cases:
        pool = InProcessEnvPool(probe_env(fault_spec(mode=mode, bad_seed=bad, at_step=2)), 2, 8, step_timeout=1.0)
        if name == "reset_hang":
            result[name] = capture(lambda: pool.reset(SEED))
        else:
            result[name] = capture(lambda: (pool.reset(0), [pool.step(t) for t in range(4)]))
        result[name]["closed"] = pool.closed
    pool = ShmEnvPool(
        probe_env(fault_spec(mode="hang", bad_seed=SEED + 1, at_step=1)),
        num_workers=2,
        envs_per_worker=2,
        n_steps=8,
        step_timeout=1.0,
        main_steps_envs=True,
        main_envs=2,
    )
    pool.reset(SEED)
    result["shared"] = close_twice(pool, capture(lambda: pool.step(0)))
    # constructors: the probe is this process's first env built, the pool's env 1 the third
    for name, mode in (("build_raise", "build_raise"), ("build_hang", "build_hang")):
        FaultEnv.built = 0
        backend = probe_env(fault_spec(mode=mode, at_step=3))
        result[name] = capture(lambda: InProcessEnvPool(backend, 2, 8, start_timeout=1.0))
        FaultEnv.built = 0
        backend = probe_env(fault_spec(mode=mode, at_step=3))
        result[f"shared_{name}"] = capture(
            lambda: ShmEnvPool(
                backend, num_workers=2, envs_per_worker=2, n_steps=8, start_timeout=1.0, main_steps_envs=True, main_envs=2
            )
        )
    result["strays"] = strays()
    return result


def vec_env_ctrl_c() -> dict[str, Any]:
    """ShmVecEnv (sb3's API, Python's own SIGINT handler): a hung worker times out; then, with another
    hung step, the test sends SIGINT once the env's marker is out and this process must end."""
    import gymnasium as gym

    # A program run from a terminal, where Ctrl-C reaches it. Python installs its handler only where SIGINT was not
    # ignored when it started, and a test run started as a shell's background job or under a CI runner ignores SIGINT,
    # which every process it starts inherits: this one would then never see the test's Ctrl-C.
    signal.signal(signal.SIGINT, signal.default_int_handler)

    from ppo_dict.vec.shm_vec_env import ShmVecEnv

    def make(i: int) -> Callable[[], gym.Env]:
        return lambda: gym.make("FaultEnv-v0", mode="hang", bad_seed=SEED + 3, at_step=1)

    venv = ShmVecEnv([make(i) for i in range(4)], num_workers=2, step_timeout=1.0)
    venv.seed(SEED)
    venv.reset()
    result = capture(lambda: venv.step(np.zeros((4, 1), np.float32)))
    print(json.dumps(result), flush=True)
    venv = ShmVecEnv([make(i) for i in range(4)], num_workers=2, step_timeout=600.0)
    venv.seed(SEED)
    venv.reset()
    venv.step(np.zeros((4, 1), np.float32))  # hangs until the test's SIGINT
    return {}


def policy_fault(mode: str, step_timeout: str) -> dict[str, Any]:
    """A worker raises, hangs or dies in its policy step (the policy where the envs are: each process samples its own
    envs' actions): the run ends naming the worker, within the step timeout, and nothing is left running."""
    from ppo_dict.algo.networks.policy import ActorCritic
    from ppo_dict.algo.ppo import PPO
    from ppo_dict.core.config import Config
    from ppo_dict.run.run_plan import build_env_pool
    from tests.faults.fault_envs import FaultyExtractor

    cfg = Config(
        env=f"gym_{fault_spec().gym_id}",
        gym_packages=("tests.faults.fault_envs",),
        n_envs=4,
        num_workers=2,
        n_steps=8,
        batch_size=16,
        n_epochs=1,
        seed=SEED,
        step_timeout=float(step_timeout),
        device="cpu",
        verbose=0,
    )
    pool = build_env_pool(cfg)
    policy = ActorCritic(
        pool.observation_space,
        pool.action_space,
        features_extractor_class=FaultyExtractor,
        features_extractor_kwargs=dict(mode=mode, at_call=3),
    )
    model = PPO(cfg, pool, policy=policy)
    result = capture(lambda: model.learn(64))
    result["policy_line"] = model.collector.policy_line
    result["workers"] = pool.pids
    start = time.monotonic()
    pool.close()
    result["close_s"] = time.monotonic() - start
    result["alive_workers"] = [pid for pid in pool.pids if alive(pid)]
    result["strays"] = strays()
    return result


def api_hang(mode: str, num_workers: str) -> dict[str, Any]:
    """``ppo_dict.PPO(...).learn()`` (no command line: the API starts the watchdog) with env 1, one the main process
    steps (in-process, or the default share of two workers), hanging in its first reset or its second step."""
    import ppo_dict

    model = ppo_dict.PPO(
        "MlpPolicy",
        "FaultEnv-v0",
        n_steps=8,
        batch_size=16,
        n_epochs=1,
        seed=SEED,
        step_timeout=1.0,
        n_envs=4,
        num_workers=int(num_workers),
        gym_packages=("tests.faults.fault_envs",),
        env_kwargs=dict(mode=mode, bad_seed=SEED + 1, at_step=2),
    )
    result = capture(lambda: model.learn(64))
    model.env.close()
    result["strays"] = strays()
    return result


def api_own_alarm() -> dict[str, Any]:
    """The API where the program has a SIGALRM handler of its own: left alone, with a warning."""
    import warnings

    import ppo_dict

    def mine(signum: int, frame: Any) -> None:
        pass

    signal.signal(signal.SIGALRM, mine)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = ppo_dict.PPO(
            "MlpPolicy",
            "FaultEnv-v0",
            n_steps=8,
            batch_size=16,
            n_envs=2,
            num_workers=0,
            seed=SEED,
            gym_packages=("tests.faults.fault_envs",),
        )
    model.learn(16)
    model.env.close()
    return {
        "warnings": [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)],
        "handler_kept": signal.getsignal(signal.SIGALRM) is mine,
    }


def start_failure(how: str, mp_method: str) -> dict[str, Any]:
    """A worker that cannot be started: this process's open-file limit reached after a worker or two (``nofile``),
    or the forkserver unable to take the request (``forkserver``: its own open-file limit lowered
    with prlimit, so it dies as it does when it cannot fork). Then a pool starts again."""
    import resource
    from multiprocessing import forkserver

    backend = probe_env(resolve_env_name("gym_CartPole-v1"))
    warm = ShmEnvPool(backend, 1, 1, n_steps=8, mp_method=mp_method)  # the forkserver and resource tracker are running now
    if how == "forkserver":
        server = forkserver._forkserver._forkserver_pid
        files = len(os.listdir(f"/proc/{server}/fd"))
        resource.prlimit(server, resource.RLIMIT_NOFILE, (files, files))
    limits = resource.getrlimit(resource.RLIMIT_NOFILE)
    if how == "nofile":  # room for the pool's two shared arrays (the storage, the hand-over page) and one or two workers'
        # descriptors (measured: spawn starts a worker with more of them open), not all six
        files = len(os.listdir("/proc/self/fd"))
        resource.setrlimit(resource.RLIMIT_NOFILE, (files + 9, limits[1]))
    result = capture(lambda: ShmEnvPool(backend, 6, 1, n_steps=8, mp_method=mp_method, main_steps_envs=False))
    resource.setrlimit(resource.RLIMIT_NOFILE, limits)
    result["strays_after_failure"] = strays(5.0, exclude=tuple(warm.pids))
    warm.close()
    if how == "forkserver":  # multiprocessing starts a new forkserver only once the old one has exited: on a loaded host
        deadline = time.monotonic() + 60  # it may still be printing its error when the next pool asks for one
        while time.monotonic() < deadline and os.path.exists(f"/proc/{server}") and proc_stat(server)[0] != "Z":
            time.sleep(0.01)
    again = ShmEnvPool(backend, 2, 1, n_steps=8, mp_method=mp_method)
    again.reset(0)
    again.close()
    result["strays"] = strays()
    return result


SCENARIOS: dict[str, Callable[..., dict[str, Any]]] = {
    "api_hang": api_hang,
    "policy_fault": policy_fault,
    "api_own_alarm": api_own_alarm,
    "start_failure": start_failure,
    "main_process_envs": main_process_envs,
    "vec_env_ctrl_c": vec_env_ctrl_c,
    "env_error": env_error,
    "unknown_id": unknown_id,
    "kill_worker": kill_worker,
    "hang": hang,
    "serve_then_block": serve_then_block,
    "forkserver_killed": forkserver_killed,
    "shm_too_small": shm_too_small,
    "non_finite": non_finite,
    "cycles": cycles,
    "vec_env_misuse": vec_env_misuse,
}

if __name__ == "__main__":
    print(json.dumps(SCENARIOS[sys.argv[1]](*sys.argv[2:])), flush=True)
