"""docs/faults.md cases 1-9, 13-16 for the worker pool: each scenario runs in its own process and
session with a hard timeout; every test also asserts that the session leaves no process behind
and that /dev/shm gains no entry."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from typing import Any, Callable

import pytest

from tests.faults.fault_envs import HANG_MARKER
from tests.faults.lines import Lines
from tests.faults.scenarios import alive, proc_stat, session_processes, shm_entries, shm_left

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
#: seconds a scenario may take before it is declared hung: a guard, not a timing (what a fault must do in time is
#: timed inside the scenario), so far above the start-up's own cost, which alone took 55 s on a loaded 2-core host
#: (importing torch: 17 s); each test times what it promises from inside (``call_s``, ``since_kill_s``)
START_GUARD = 180.0


def assert_no_shm_left(before: set[str]) -> None:
    """No /dev/shm entry made since ``before`` stays (:func:`tests.faults.scenarios.shm_left`): called once the processes
    that could have made one are gone."""
    left = shm_left(before)
    assert not left, f"left in /dev/shm: {sorted(left)}"


def wait_until(condition: Callable[[], bool], seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def start(*args: str) -> subprocess.Popen:
    # a hung scenario's threads are dumped (:func:`dump_and_kill`)
    env = dict(os.environ, PYTHONPATH=ROOT, PYTHONFAULTHANDLER="1")
    return subprocess.Popen(
        [sys.executable, "-m", "tests.faults.scenarios", *args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def assert_session_gone(session: int, seconds: float = 2.0) -> None:
    assert wait_until(lambda: not session_processes(session), seconds), f"left behind: {session_processes(session)}"


def dump_and_kill(proc: subprocess.Popen) -> str:
    """End a hung scenario: SIGABRT first, on which faulthandler (``PYTHONFAULTHANDLER``) prints where each of its
    threads waits, then SIGKILL to its session; returns the end of its stderr, for the failure's message."""
    os.kill(proc.pid, signal.SIGABRT)
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass
    os.killpg(proc.pid, signal.SIGKILL)
    _, err = proc.communicate()
    return (err or "")[-6000:]


def finish(proc: subprocess.Popen, timeout: float, hung: str) -> tuple[str, str]:
    """``proc``'s output once it exits; after ``timeout`` s its session is killed and the test fails saying ``hung``
    (with where it waited)."""
    try:
        return proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{hung} for more than {timeout} s; its stderr:\n{dump_and_kill(proc)}")


def run_scenario(*args: str, timeout: float = START_GUARD) -> dict[str, Any]:
    """Run a scenario to its end; fail if it hangs, errs, or leaves processes or /dev/shm entries."""
    shm_before = shm_entries()
    proc = start(*args)
    out, err = finish(proc, timeout, f"scenario {args} hung")
    assert proc.returncode == 0, err
    assert_session_gone(proc.pid)
    assert_no_shm_left(shm_before)
    return json.loads(out.strip().splitlines()[-1])


def assert_closed_cleanly(r: dict[str, Any]) -> None:
    """close() after the failure: at once, twice, later calls refused, no process left."""
    assert r["close_s"] < 0.1
    assert r["after_close"]["error"] == "PoolClosedError"
    assert r["after_close"]["message"] == "the env workers (gym_FaultEnv-v0) are closed; create a new pool"
    assert r["alive_workers"] == [] and r["strays"] == []


# ------------------------------------------------------------------------------ cases 1-3
ENV_ERRORS = {
    "step_raise": ("worker 1, env 3 (gym_FaultEnv-v0) raised in step: RuntimeError: boom\n", 'raise RuntimeError("boom")'),
    "reset_raise": (
        "worker 1, env 3 (gym_FaultEnv-v0) raised in reset (seed=13): RuntimeError: reset boom (seed=13)\n",
        "obs, self.reset_infos[j] = env.reset(seed=seeds[i], **maybe_options)",
    ),
    "autoreset_raise": (
        "worker 1, env 3 (gym_FaultEnv-v0) raised in reset (auto-reset after an episode end, no seed): RuntimeError: "
        "reset boom (seed=None)\n",
        "obs, self.reset_infos[j] = env.reset()",
    ),
}


@pytest.mark.parametrize("mode", list(ENV_ERRORS))
def test_env_error_names_worker_env_command_and_keeps_the_traceback(mode: str) -> None:
    head, traceback_line = ENV_ERRORS[mode]
    r = run_scenario("env_error", mode)
    assert r["error"] == "EnvWorkerError"
    assert r["message"].startswith(head + "--- worker 1 traceback ---\nTraceback (most recent call last):\n")
    assert traceback_line in r["message"] and 'fault_envs.py", line' in r["message"]
    assert r["call_s"] < 1.0, r
    assert_closed_cleanly(r)


def test_constructor_error_in_a_worker_is_an_env_worker_error() -> None:
    r = run_scenario("env_error", "init_raise")
    assert r["error"] == "EnvWorkerError"
    assert r["message"].startswith(
        "worker 1, env 2 (gym_FaultEnv-v0) raised in constructor: ValueError: bad kwarg for ppo_dict-env-worker-1\n"
        "--- worker 1 traceback ---\n"
    )
    assert r["strays"] == []


# ------------------------------------------------------------------------------ case 4
@pytest.mark.parametrize(
    "name, error, message",
    [
        ("gym_Hoper-v5", "NameNotFound", "Environment `Hoper` doesn't exist. Did you mean: `Hopper`?"),
        (
            "gym_Hopper-v9",
            "VersionNotFound",
            "Environment version `v9` for environment `Hopper` doesn't exist. It provides versioned environments: [ `v2`, "
            "`v3`, `v4`, `v5` ].",
        ),
    ],
)
def test_unknown_env_id_is_refused_before_any_process_starts(name: str, error: str, message: str) -> None:
    r = run_scenario("unknown_id", name)
    assert (r["error"], r["message"]) == (error, message)
    assert (r["pool"]["error"], r["pool"]["message"]) == (error, message)
    assert r["children"] == []


# ------------------------------------------------------------------------------ cases 5-7
@pytest.mark.parametrize("when", ["idle", "mid_step"])
def test_sigkilled_worker_is_reported_with_its_exit_code(when: str) -> None:
    r = run_scenario("kill_worker", when)
    assert r["error"] == "WorkerDiedError"
    assert r["message"] == (
        f"worker 1 (envs 2..3, gym_FaultEnv-v0, pid {r['victim']}) died with exit code -9 (SIGKILL) during 'step' "
        "without reporting an error; all workers were stopped"
    )
    assert r["since_kill_s"] < 1.0
    assert_closed_cleanly(r)


def test_hung_worker_times_out_and_is_stopped() -> None:
    r = run_scenario("hang", "2")
    assert r["error"] == "WorkerTimeoutError"
    assert r["message"].startswith("worker 1 (envs 2..3, pid ")
    assert r["message"].endswith(
        ") did not answer 'step' at rollout step 0 within 2 s (gym_FaultEnv-v0); an env is probably hung "
        "(raise step_timeout if it is only slow); all workers were stopped"
    )
    assert 2.0 <= r["call_s"] < 2.0 + 0.2 + 1.0  # timeout, then the failure path's grace and terminate
    assert_closed_cleanly(r)


# ------------------------------------------------------------------------------ cases 8-9
def cpu_ticks(pid: int) -> int:
    fields = proc_stat(pid)
    return int(fields[11]) + int(fields[12])  # utime + stime


def start_blocking(mp_method: str, busy: str) -> tuple[subprocess.Popen, Lines, list[int]]:
    """The ``serve_then_block`` scenario once it has printed its worker pids (the session is killed if it does not
    within :data:`START_GUARD`)."""
    proc = start("serve_then_block", mp_method, busy)
    lines = Lines(proc)
    try:
        pids = json.loads(lines.wait_for('"pids"', START_GUARD))["pids"]
    except AssertionError:
        os.killpg(proc.pid, signal.SIGKILL)
        raise
    return proc, lines, pids


@pytest.mark.parametrize("mp_method", ["forkserver", "spawn"])
@pytest.mark.parametrize("target", ["process", "group"])
def test_main_sigkilled_while_workers_idle(mp_method: str, target: str) -> None:
    shm_before = shm_entries()
    proc, lines, pids = start_blocking(mp_method, "idle")
    (os.killpg if target == "group" else os.kill)(proc.pid, signal.SIGKILL)
    proc.wait(timeout=5)
    # stdout at EOF: every process holding it (workers, multiprocessing's helpers) has exited; a guard, not a timing
    # (the test below times a worker's exit), as a loaded host may not run them for seconds
    assert lines.done.wait(30), "stdout still open 30 s after the kill"
    assert wait_until(lambda: not any(alive(pid) for pid in pids), 2.0), [pid for pid in pids if alive(pid)]
    assert_session_gone(proc.pid)
    assert_no_shm_left(shm_before)
    lines.close()


def test_main_sigkilled_while_a_worker_is_hung() -> None:
    """Worker 0 exits at once; worker 1 sleeps (no CPU) until its env call returns, then exits."""
    proc, lines, pids = start_blocking("forkserver", "hung")
    try:  # the marker may come in the same read as the pids line: the reader thread has it either way
        lines.wait_for(HANG_MARKER, 60)  # main now waits in step(0); env 3 in worker 1 sleeps 4 s
    except AssertionError:
        os.killpg(proc.pid, signal.SIGKILL)
        raise
    os.kill(proc.pid, signal.SIGKILL)
    killed = time.monotonic()
    proc.wait(timeout=5)  # not communicate(): the workers hold stdout open until they exit
    assert wait_until(lambda: not alive(pids[0]), 2.0)
    assert alive(pids[1])
    ticks = cpu_ticks(pids[1])
    time.sleep(0.5)
    assert cpu_ticks(pids[1]) - ticks <= 2, "the hung worker must not spin"
    assert wait_until(lambda: not alive(pids[1]), 4.0 + 10.0)
    assert time.monotonic() - killed > 3.0, "it exited only once its env call returned"
    assert_session_gone(proc.pid, 10.0)
    lines.close()


# ------------------------------------------------------------------------------ cases 13-16
@pytest.mark.parametrize("mp_method", ["forkserver", pytest.param("spawn", marks=pytest.mark.slow)])
def test_fifty_create_close_cycles(mp_method: str) -> None:
    r = run_scenario("cycles", mp_method, "50", timeout=300)
    assert r["after"] == r["before"] and r["shm_left"] == []  # open fds, threads; /dev/shm entries
    assert r["strays"] == []


def test_the_shm_check_finds_an_entry_left_and_waits_out_one_that_goes() -> None:
    """The check every test here ends with: an entry made and left is found; one another test makes and unlinks a
    moment later (``make test`` runs two at once) is waited for, not counted."""
    from multiprocessing import shared_memory

    before = shm_entries()
    left = shared_memory.SharedMemory(create=True, size=64)
    going = shared_memory.SharedMemory(create=True, size=64)
    timer = threading.Timer(0.3, going.unlink)
    timer.start()
    try:
        assert shm_left(before, seconds=1.0) == {left.name.lstrip("/")}
    finally:
        timer.join()
        for memory in (left, going):
            memory.close()
        left.unlink()
    assert shm_left(before, seconds=0.0) == set()


def test_shared_memory_too_small_is_refused_before_any_process_starts() -> None:
    r = run_scenario("shm_too_small")
    assert r["error"] == "RuntimeError"
    # 29.8 MB: each of 100000 steps holds 4 x 3 float32 observations (48 bytes padded to 64) and the step's actions, values and
    # log-probs (padded rows of 64 bytes each: processes stepping envs write them), and 4 x 14 bytes of rewards, flags,
    # episode starts
    assert r["message"] == (
        "rollout storage needs 29.8 MB of shared memory, /dev/shm has 1.0 MB free and /tmp has 1.0 MB; "
        "use docker run --shm-size=1g, or fewer n_steps x n_envs"
    )
    assert r["children"] == []


@pytest.mark.parametrize("mode, what", [("nan_obs", "observation['obs']"), ("nan_reward", "reward")])
def test_non_finite_obs_or_reward_is_named_before_the_normaliser(mode: str, what: str) -> None:
    r = run_scenario("non_finite", mode)
    assert r["error"] == "NonFiniteError"
    assert r["message"] == (
        f"non-finite {what} from env 3 (gym_FaultEnv-v0) at rollout step 3 (total steps 16); "
        "statistics were not updated with it"
    )
    # count = 1e-4 + 4 envs x (reset + 3 good steps): the bad step never reached the statistics
    assert r["obs_count"] == pytest.approx(1e-4 + 16, abs=1e-9) and r["obs_mean_finite"]
    assert r["ret_count"] == pytest.approx(1e-4 + 12, abs=1e-9) and r["ret_finite"]
    assert_closed_cleanly(r)


# ------------------------------------------------------------------------------ cases 19-20
def test_vec_env_refuses_bad_action_batches_before_any_worker_steps() -> None:
    r = run_scenario("vec_env_misuse")
    expected = (
        "ShmVecEnv.step: expected actions of shape (4, 1) and dtype float32 (or values that cast to it unchanged), "
        "got shape {} and dtype {}; nothing was sent to the envs"
    )
    assert (r["rows"]["error"], r["rows"]["message"]) == ("ValueError", expected.format("(3, 1)", "float32"))
    assert (r["dim"]["error"], r["dim"]["message"]) == ("ValueError", expected.format("(4, 2)", "float32"))
    assert (r["dtype"]["error"], r["dtype"]["message"]) == ("ValueError", expected.format("(4, 1)", "complex128"))
    assert (r["nan"]["error"], r["nan"]["message"]) == (
        "ValueError",
        "ShmVecEnv.step: non-finite action for env 2; nothing was sent to the envs",
    )
    assert r["steps_taken"] == [0, 0, 0, 0]
    assert (r["wait_without_async"]["error"], r["wait_without_async"]["message"]) == (
        "NoAsyncCallError",
        "step_wait() called without a pending step_async()",
    )
    assert r["step0_equal"] and r["step1_equal"], "the next good steps must match DummyVecEnv (no stale reply)"
    assert r["steps_after"] == [2, 2, 2, 2]
    assert (r["after_close"]["error"], r["after_close"]["message"]) == (
        "PoolClosedError",
        "this ShmVecEnv (FaultEnv-v0) is closed",
    )
    assert r["alive_workers"] == [] and r["strays"] == []


# ------------------------------------------------------------------------------ the policy where the envs are
@pytest.mark.parametrize("mode", ["raise", "hang", "die"])
def test_a_worker_failing_in_its_policy_step_ends_the_run_naming_it(mode: str) -> None:
    """Each process samples its own envs' actions (ppo_dict.algo.rollout.shard); a worker that raises, hangs or dies in
    the middle of that forward (its third) ends the run as an env's failure does: naming the worker (and the
    error, the step), within the step timeout, with every worker stopped."""
    r = run_scenario("policy_fault", mode, "1.0")
    assert r["policy_line"].startswith("policy step: in each process for the envs it steps ("), r["policy_line"]
    worker = f"worker 0 (envs 2..3, gym_FaultEnv-v0, pid {r['workers'][0]})"
    if mode == "raise":
        assert r["error"] == "EnvWorkerError"
        assert r["message"].startswith(
            "worker 0, outside env code (gym_FaultEnv-v0) raised in policy: "
            "RuntimeError: boom in the policy's forward\n--- worker 0 traceback ---\n"
        )
        assert 'raise RuntimeError("boom in the policy\'s forward")' in r["message"]
    elif mode == "hang":
        assert r["error"] == "WorkerTimeoutError"
        assert r["message"] == (
            f"worker 0 (envs 2..3, pid {r['workers'][0]}) did not answer 'step' at rollout step 2 within "
            "1 s (gym_FaultEnv-v0); an env is probably hung (raise step_timeout if it is only slow); "
            "all workers were stopped"
        )
    else:
        assert r["error"] == "WorkerDiedError"
        assert (
            r["message"]
            == f"{worker} died with exit code -9 (SIGKILL) during 'step' without reporting an error; all workers were stopped"
        )
    assert r["close_s"] < 0.1
    assert r["alive_workers"] == [] and r["strays"] == []
