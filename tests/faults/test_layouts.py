"""The fault matrix of docs/faults.md over every layout of the command line: a hang (in the main
process's own envs wherever it has some), an env hung in C code (with or without the GIL),
Ctrl-C / SIGTERM / SIGHUP during a hang, a second Ctrl-C.

Each case runs ``python -m ppo_dict.main_ppo`` in its own session. Signals are sent once the run
says it reached the point (the hung env prints :data:`HANG_MARKER` just before it sleeps); time
bounds are guards far above what the run needs. Each case asserts the exit status, the message,
the time from the hang to the exit, that no process of the session and no /dev/shm entry is left,
and that the checkpoint saved before the hang is intact.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass

import pytest

from ppo_dict.core.files import load_model_state
from ppo_dict.run.checkpoint import list_checkpoints
from ppo_dict.run.evaluation import EVAL_SEED_OFFSET
from ppo_dict.vec.guard import MARGIN
from ppo_dict.vec.watchdog import HARD_GRACE, SECOND_STUCK, STOP_GRACE
from tests.faults.fault_envs import HANG_MARKER
from tests.faults.lines import Lines
from tests.faults.test_worker_faults import (
    START_GUARD,
    ROOT,
    assert_closed_cleanly,
    assert_no_shm_left,
    assert_session_gone,
    dump_and_kill,
    run_scenario,
    shm_entries,
    start,
)

STEP_TIMEOUT = 1.0
#: the aimed env's step that hangs: rollout step 3 of the second iteration (8 steps each), after a checkpoint
AT_STEP = 12
#: fork: workers start without importing torch again (test_worker_faults covers forkserver and spawn)
MP_METHOD = "fork"
#: slack over the run's own deadlines for starting Python, stopping workers and saving on a loaded host
GUARD = 20.0


@dataclass(frozen=True)
class Layout:
    flags: tuple[str, ...]
    env: int  # the aimed env
    in_main: bool  # whether the main process steps it
    env_kwargs: str = ""


LAYOUTS = {
    # a costly env (5 ms a step): the main process's default share is envs 0 and 1
    "share": Layout(("--num_workers", "2", "--n_envs", "4"), 1, True, "step_s=0.005"),
    "main_envs": Layout(("--num_workers", "2", "--n_envs", "4", "--main_envs", "2"), 1, True),
    "main_envs_0": Layout(("--num_workers", "2", "--n_envs", "4", "--main_envs", "0"), 1, False),
    "in_process": Layout(("--num_workers", "0", "--n_envs", "2"), 1, True),
    "double_buffer": Layout(("--num_workers", "2", "--n_envs", "4", "--double_buffer"), 1, False),
}


@dataclass
class Run:
    """A training run in its own session, with its stdout lines."""

    proc: subprocess.Popen
    run_dir: str
    lines: Lines

    def wait_for(self, text: str, timeout: float) -> str:
        try:
            return self.lines.wait_for(text, timeout)
        except AssertionError as exc:
            os.killpg(self.proc.pid, signal.SIGKILL)
            pytest.fail(f"{exc}; stderr: {self.proc.stderr.read()}")

    def finish(self, timeout: float) -> tuple[int, str]:
        """Wait for the exit: ``(exit status, stderr)``; kills the session if it hangs."""
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            pytest.fail(f"the run did not end within {timeout} s")
        return self.proc.returncode, self.proc.stderr.read()


def start_run(layout: Layout, mode: str, tmp_path, *extra: str, launcher: tuple[str, ...] = ()) -> Run:
    """``python -m ppo_dict.main_ppo`` on ``layout``'s FaultEnv in its own session (``launcher``: a command
    it runs under, such as ``nohup``)."""
    kwargs = (
        f"dict(mode={mode!r}, bad_seed={layout.env}, at_step={AT_STEP}{', ' + layout.env_kwargs if layout.env_kwargs else ''})"
    )
    run_dir = str(tmp_path / "run")
    args = [
        "--env",
        "gym_FaultEnv-v0",
        "--gym_packages",
        "tests.faults.fault_envs",
        "--env_kwargs",
        kwargs,
        *layout.flags,
        "--n_steps",
        "8",
        "--batch_size",
        "16",
        "--n_epochs",
        "1",
        "--update_threads",
        "1",
        "--total_timesteps",
        "100000",
        "--step_timeout",
        str(STEP_TIMEOUT),
        "--save_freq",
        "1",
        "--seed",
        "0",
        "--run_dir",
        run_dir,
        "--plot",
        "False",
        "--verbose",
        "0",
        "--progress",
        "none",
        "--mp_method",
        MP_METHOD,
        *extra,
    ]
    env = {**os.environ, "PYTHONPATH": ROOT, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        [*launcher, sys.executable, "-m", "ppo_dict.main_ppo", *args],
        cwd=ROOT,
        env=env,
        text=True,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    return Run(proc, run_dir, Lines(proc))


def hang_began(run: Run, layout: Layout) -> float:
    """Wait for the aimed env's marker; check it hangs where the layout says; returns when."""
    line = run.wait_for(HANG_MARKER, timeout=120)
    began = time.monotonic()
    pid = int(line.split("pid=")[1])
    assert line.startswith(f"{HANG_MARKER} seed={layout.env} ")
    assert (pid == run.proc.pid) == layout.in_main, (line, run.proc.pid)
    return began


def assert_nothing_left(run: Run, shm_before: set[str]) -> None:
    assert_session_gone(run.proc.pid, seconds=5.0)
    assert_no_shm_left(shm_before)
    names = os.listdir(os.path.join(run.run_dir, "checkpoints"))
    assert not [n for n in names if n.endswith(".tmp")], names
    for path in list_checkpoints(os.path.join(run.run_dir, "checkpoints")):
        load_model_state(path)  # every checkpoint left loads


def timeout_message(layout: Layout) -> str:
    if layout.in_main:
        return (
            f"error: EnvTimeoutError: the main process's env {layout.env} (gym_FaultEnv-v0) did not return from step at "
            f"rollout step 3 within {STEP_TIMEOUT:g} s; an env is probably hung (raise step_timeout if it is only slow); "
            "every env and worker was stopped"
        )
    return (
        f"did not answer 'step' at rollout step 3 within {STEP_TIMEOUT:g} s "
        "(gym_FaultEnv-v0); an env is probably hung (raise step_timeout if it is only slow); all workers were stopped"
    )


@pytest.mark.parametrize("name", list(LAYOUTS))
def test_a_hang_ends_the_run_within_step_timeout(name: str, tmp_path) -> None:
    """...and ``--resume auto`` continues from the checkpoint it left (checked in-process: one layout is enough)."""
    layout, shm_before = LAYOUTS[name], shm_entries()
    run = start_run(layout, "hang", tmp_path)
    began = hang_began(run, layout)
    code, err = run.finish(timeout=STEP_TIMEOUT + GUARD)
    elapsed = time.monotonic() - began
    assert code == 1, err
    assert timeout_message(layout) in err, err
    assert "Traceback" not in err
    assert STEP_TIMEOUT <= elapsed < STEP_TIMEOUT + GUARD
    assert_nothing_left(run, shm_before)
    steps = 8 * (4 if layout.flags[1] == "2" else 2)
    assert [os.path.basename(p) for p in list_checkpoints(os.path.join(run.run_dir, "checkpoints"))] == [
        f"checkpoint_{steps:012d}.pt"
    ]
    if name == "in_process":
        again = start_run(layout, "none", tmp_path, "--resume", "auto", "--total_timesteps", str(2 * steps))
        again.wait_for(f"resumed from {run.run_dir}/checkpoints/checkpoint_{steps:012d}.pt at {steps} steps", timeout=120)
        code, err = again.finish(timeout=120)
        assert code == 0, err
        assert f'"env_steps": {2 * steps},' in again.lines.rest()[-1]


#: the evaluation env (its own, in the main process), aimed by its seed: the run's seed + EVAL_SEED_OFFSET
EVAL_LAYOUT = Layout(
    ("--num_workers", "2", "--n_envs", "4", "--eval_freq", "64", "--eval_episodes", "5"), EVAL_SEED_OFFSET, True
)


@pytest.mark.parametrize("mode", ["hang", "step_raise"])
def test_a_fault_in_the_evaluation_env_ends_the_run_naming_it(mode: str, tmp_path) -> None:
    """The eval env's calls have the training envs' protections: a hang ends the run in step_timeout,
    a raise names the env and the call; the checkpoint of the update before stays (the evaluation at
    64 steps comes before that update's checkpoint), nothing is left behind."""
    layout, shm_before = EVAL_LAYOUT, shm_entries()
    run = start_run(layout, mode, tmp_path)
    # AT_STEP: the eval env's 12th step, the second of its third 5-step episode
    where = "(gym_FaultEnv-v0, evaluation) did not return from step at evaluation step 1 of episode 3"
    if mode == "hang":
        began = hang_began(run, layout)
        code, err = run.finish(timeout=STEP_TIMEOUT + GUARD)
        assert STEP_TIMEOUT <= time.monotonic() - began < STEP_TIMEOUT + GUARD
        expected = f"error: EnvTimeoutError: the main process's env 0 {where} within {STEP_TIMEOUT:g} s"
    else:
        code, err = run.finish(timeout=120)
        expected = (
            "error: EnvWorkerError: the main process, env 0 (gym_FaultEnv-v0, evaluation) raised in step: RuntimeError: boom"
        )
    assert code == 1, err
    assert expected in err, err
    assert_nothing_left(run, shm_before)
    assert [os.path.basename(p) for p in list_checkpoints(os.path.join(run.run_dir, "checkpoints"))] == [
        "checkpoint_000000000032.pt"
    ]


def game_children(pid: int, game: str) -> list[int]:
    """Live processes whose parent is ``pid`` running the file ``game`` (a stand-in game is a script: its
    interpreter's first argument; a forked worker has the command line's arguments, the game's path among them)."""
    found = []
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{entry}/stat") as f:
                state, ppid = f.read().rsplit(")", 1)[1].split()[:2]
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read().split(b"\0")
        except OSError:
            continue
        if int(ppid) == pid and state != "Z" and cmdline[1:2] == [game.encode()]:
            found.append(int(entry))
    return found


@pytest.mark.parametrize(
    "flags", [("--num_workers", "0", "--n_envs", "2"), ("--num_workers", "2", "--n_envs", "4")], ids=["in_process", "share"]
)
def test_a_frozen_game_in_the_main_process_ends_the_run_within_step_timeout(flags: tuple[str, ...], tmp_path) -> None:
    """A Godot-protocol game the main process owns stops answering (SIGSTOP: alive, its socket open):
    the game's reply timeout (0.9 x step_timeout) ends the run naming the game; nothing is left behind."""
    from tests.godot_helpers import PLUGIN_STYLE_GAME

    game = tmp_path / "plugin_game.x86_64"
    game.write_text(PLUGIN_STYLE_GAME.format(python=sys.executable))
    game.chmod(0o755)
    run_dir, shm_before = str(tmp_path / "run"), shm_entries()
    args = [
        "--env_path",
        str(game),
        *flags,
        "--n_steps",
        "8",
        "--batch_size",
        "16",
        "--n_epochs",
        "1",
        "--total_timesteps",
        "100000",
        "--step_timeout",
        "2",
        "--save_freq",
        "1",
        "--seed",
        "0",
        "--run_dir",
        run_dir,
        "--plot",
        "False",
        "--verbose",
        "0",
        "--progress",
        "none",
        "--mp_method",
        MP_METHOD,
    ]
    proc = subprocess.Popen(
        [sys.executable, "-m", "ppo_dict.main_ppo_godot", *args],
        cwd=ROOT,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
        env={**os.environ, "PYTHONPATH": ROOT},
    )
    run = Run(proc, run_dir, Lines(proc))
    deadline = time.monotonic() + 120
    while not list_checkpoints(os.path.join(run_dir, "checkpoints")):  # an update done: the games are stepping
        assert time.monotonic() < deadline and proc.poll() is None, "no checkpoint: " + proc.stderr.read()
        time.sleep(0.05)
    games = game_children(proc.pid, str(game))
    assert len(games) == 1, games  # the main process's own game (the probe's has ended; the worker's is the worker's child)
    os.kill(games[0], signal.SIGSTOP)
    frozen = time.monotonic()
    code, err = run.finish(timeout=2 + GUARD)
    assert code == 1, err
    assert f"error: EnvWorkerError: the main process, env 0 (godot ({game})) raised in step" in err, err
    assert (
        f"GodotTimeoutError: Godot game '{game}' (pid {games[0]}, port " in err and "did not answer step within 1.8 s" in err
    ), err
    assert 1.8 <= time.monotonic() - frozen < 2 + GUARD
    assert_nothing_left(run, shm_before)


#: the fast set: a hang in the main process's share, in a worker, in-process; the rest with ``slow``
FAST_SIGNAL_CASES = {("share", signal.SIGINT), ("main_envs_0", signal.SIGINT), ("in_process", signal.SIGINT)}


@pytest.mark.parametrize(
    "name, sig",
    [
        pytest.param(
            name,
            sig,
            marks=() if (name, sig) in FAST_SIGNAL_CASES else pytest.mark.slow,
            id=f"{name}-{signal.Signals(sig).name}",
        )
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
        for name in LAYOUTS
    ],
)
def test_a_signal_during_a_hang_saves_the_last_update_and_exits(name: str, sig: int, tmp_path) -> None:
    """The env call is interrupted STOP_GRACE after the signal; the rollout is dropped, the state after
    the last update saved (its checkpoint rewritten as it was) and the run exits 128 + signal."""
    layout, shm_before = LAYOUTS[name], shm_entries()
    run = start_run(layout, "hang", tmp_path, "--step_timeout", "600")
    hang_began(run, layout)
    sent = time.monotonic()
    run.proc.send_signal(sig)
    code, err = run.finish(timeout=STOP_GRACE + GUARD)
    assert code == 128 + sig, err
    assert err.count(f"{signal.Signals(sig).name} received: saving the state from before the current rollout") == 1, err
    assert "stopped in the middle of a rollout (EnvCallInterrupted: " in err and "Traceback" not in err, err
    assert time.monotonic() - sent < STOP_GRACE + GUARD
    assert_nothing_left(run, shm_before)
    steps = 8 * (4 if layout.flags[1] == "2" else 2)
    # the state after the first update, saved again under its own step count
    assert [os.path.basename(p) for p in list_checkpoints(os.path.join(run.run_dir, "checkpoints"))] == [
        f"checkpoint_{steps:012d}.pt"
    ]
    assert f'"env_steps": {steps}, "iterations": 1,' in run.lines.rest()[-1]


@pytest.mark.parametrize("name", ["in_process", pytest.param("main_envs", marks=pytest.mark.slow)])
def test_a_hang_in_c_code_ends_the_process_after_the_grace(name: str, tmp_path) -> None:
    """The env blocks every signal while it sleeps, as C code that never returns to Python: no
    Python handler can run; the watchdog thread ends the process and SIGKILLs the workers."""
    layout, shm_before = LAYOUTS[name], shm_entries()
    run = start_run(layout, "hang_c", tmp_path)
    began = hang_began(run, layout)
    code, err = run.finish(timeout=STEP_TIMEOUT + HARD_GRACE + GUARD)
    assert code == 1, err
    assert timeout_message(layout) in err and "The env call did not return to Python within 2 s more (C code?)" in err, err
    assert STEP_TIMEOUT + HARD_GRACE <= time.monotonic() - began < STEP_TIMEOUT + HARD_GRACE + GUARD
    assert_nothing_left(run, shm_before)


#: what the guard process adds to the error it prints before it SIGKILLs a run stuck holding the GIL
GUARD_ENDED = (
    "The call holds Python's lock and never returns (C code?): no thread of the main process can run, "
    "so its guard process ended it"
)


def assert_ended_by_the_guard(code: int, err: str) -> None:
    """SIGKILLed by its guard (the shell's 137), after the main thread's traceback (faulthandler) and the error."""
    assert code == -signal.SIGKILL, err
    assert GUARD_ENDED in err and "(exit status 137), without saving" in err, err
    assert "in _hang\n" in err and err.index("in _hang\n") < err.index("error: "), err  # where it hangs, from the main thread


@pytest.mark.parametrize("name", ["share", "in_process", pytest.param("main_envs", marks=pytest.mark.slow)])
def test_a_hang_holding_the_gil_is_ended_by_the_guard_process(name: str, tmp_path) -> None:
    """C code that holds the GIL stops every thread of the main process, the watchdog's too: the guard
    process ends the run MARGIN s after the watchdog would have, naming the env, the call and the step."""
    layout, shm_before = LAYOUTS[name], shm_entries()
    run = start_run(layout, "hang_gil", tmp_path)
    began = hang_began(run, layout)
    code, err = run.finish(timeout=STEP_TIMEOUT + HARD_GRACE + MARGIN + GUARD)
    elapsed = time.monotonic() - began
    assert_ended_by_the_guard(code, err)
    assert "error: EnvTimeoutError: " + timeout_message(layout).split("error: EnvTimeoutError: ")[1] in err, err
    assert err.count("error: ") == 1, err
    assert STEP_TIMEOUT + HARD_GRACE + MARGIN <= elapsed < STEP_TIMEOUT + HARD_GRACE + MARGIN + GUARD
    assert_nothing_left(run, shm_before)
    steps = 8 * (4 if layout.flags[1] == "2" else 2)
    assert [os.path.basename(p) for p in list_checkpoints(os.path.join(run.run_dir, "checkpoints"))] == [
        f"checkpoint_{steps:012d}.pt"
    ]


@pytest.mark.parametrize("presses", [1, pytest.param(2, marks=pytest.mark.slow)])
def test_ctrl_c_during_a_hang_holding_the_gil_ends_the_run(presses: int, tmp_path) -> None:
    """No handler and no watchdog can run: the guard sees the signal left untaken on the wakeup socket
    and ends the run STOP_GRACE + HARD_GRACE + MARGIN s later (SECOND_STUCK + MARGIN after a second one)."""
    layout, shm_before = LAYOUTS["share"], shm_entries()
    run = start_run(layout, "hang_gil", tmp_path, "--step_timeout", "600")
    hang_began(run, layout)
    time.sleep(0.5)  # the env is in its C call (it printed the marker just before)
    run.proc.send_signal(signal.SIGINT)
    if presses == 2:
        time.sleep(0.2)  # two separate key presses (the kernel merges a signal still pending)
        run.proc.send_signal(signal.SIGINT)
    sent = time.monotonic()
    code, err = run.finish(timeout=STOP_GRACE + HARD_GRACE + MARGIN + GUARD)
    assert_ended_by_the_guard(code, err)
    what = "the main process's env 1 (gym_FaultEnv-v0) did not return from step at rollout step 3"
    if presses == 1:
        assert f"error: SIGINT: {what} within {STOP_GRACE:g} s: interrupted by the guard process" in err, err
        assert STOP_GRACE + HARD_GRACE + MARGIN <= time.monotonic() - sent < STOP_GRACE + HARD_GRACE + MARGIN + GUARD
    else:
        assert f"error: SIGINT received twice: stopped at once without saving ({what})" in err, err
        assert SECOND_STUCK + MARGIN <= time.monotonic() - sent < SECOND_STUCK + MARGIN + GUARD
    assert_nothing_left(run, shm_before)


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["hang", "hang_c"])
def test_ctrl_c_twice_during_a_hang_stops_at_once(mode: str, tmp_path) -> None:
    layout, shm_before = LAYOUTS["main_envs"], shm_entries()
    run = start_run(layout, mode, tmp_path, "--step_timeout", "600")
    hang_began(run, layout)
    run.proc.send_signal(signal.SIGINT)
    time.sleep(0.2)  # two separate key presses (the kernel merges a signal still pending)
    run.proc.send_signal(signal.SIGINT)
    sent = time.monotonic()
    code, err = run.finish(timeout=GUARD)
    assert code == 130, err
    if mode == "hang":  # the main thread's handler raises KeyboardInterrupt in the env's sleep (or, on a very
        # slow host, the watchdog is first): stopped without saving either way; or, where the stop was quicker than the
        # second signal (a busy host can delay the test's 0.2 s), after saving its checkpoint: the second signal then cut
        # what came after it, or found the run closing (it lets it close), or came in the last moments of its exit
        saved = [line.split()[-1] for line in run.lines.rest() if line.startswith("checkpoint ")]
        late = (
            [
                f"interrupted twice: stopped after saving {saved[-1]} (as printed)",
                f"SIGINT received twice: stopped at once after saving {saved[-1]} (as printed); nothing after it was written; "
                "the run is closing its workers\n",
            ]
            if saved
            else []
        )
        assert any(
            text in err
            for text in [
                "interrupted twice: stopped without saving",
                "SIGINT received twice: stopped at once without saving",
                *late,
            ]
        ) or (saved and err.endswith("is saved\n") and '"interrupted": true' in run.lines.seen[-1]), (err, run.lines.seen[-3:])
    else:  # no handler can run in the main thread: the watchdog ends the process, 1 s after the second signal
        assert "SIGINT received twice: stopped at once without saving" in err, err
        assert time.monotonic() - sent < SECOND_STUCK + GUARD
    assert_nothing_left(run, shm_before)


# ------------------------------------------------------------------------------ from Python
def test_main_process_envs_from_python_are_reported_like_workers() -> None:
    r = run_scenario("main_process_envs")
    assert r["raise"]["error"] == "EnvWorkerError" and r["raise"]["closed"]
    assert r["raise"]["message"].startswith(
        "the main process, env 1 (gym_FaultEnv-v0) raised in step: RuntimeError: boom\n"
        "--- the main process traceback ---\nTraceback (most recent call last):\n"
    )
    tail = (
        f"within {STEP_TIMEOUT:g} s; an env is probably hung (raise step_timeout if it is only slow); "
        "every env and worker was stopped"
    )
    expected = {
        "hang": f"the main process's env 1 (gym_FaultEnv-v0) did not return from step at rollout step 1 {tail}",
        "swallowed": f"the main process's env 1 (gym_FaultEnv-v0) did not return from step at rollout step 1 {tail}",
        "reset_hang": f"the main process's env 1 (gym_FaultEnv-v0) did not return from reset (seed=11) {tail}",
        "shared": f"the main process's env 1 (gym_FaultEnv-v0) did not return from step at rollout step 0 {tail}",
    }
    for case, message in expected.items():
        assert (r[case]["error"], r[case]["message"]) == ("EnvTimeoutError", message)
        assert STEP_TIMEOUT <= r[case]["call_s"] < STEP_TIMEOUT + GUARD
    assert r["hang"]["closed"] and r["swallowed"]["closed"] and r["reset_hang"]["closed"]
    assert_closed_cleanly(r["shared"])
    # the main process's constructors: named as a worker's, a hang ended after the start timeout (1 s here)
    for prefix in ("", "shared_"):
        raised, hung = r[f"{prefix}build_raise"], r[f"{prefix}build_hang"]
        assert raised["error"] == "EnvWorkerError", raised
        assert raised["message"].startswith(
            "the main process, env 1 (gym_FaultEnv-v0) raised in constructor: RuntimeError: "
            "constructor boom (env 3 built in this process)\n"
        ), raised
        assert (hung["error"], hung["message"]) == (
            "EnvTimeoutError",
            f"the main process's env 1 (gym_FaultEnv-v0) did not return from constructor while the envs were built {tail}",
        ), hung
        assert STEP_TIMEOUT <= hung["call_s"] < STEP_TIMEOUT + GUARD
    assert r["strays"] == [], r["strays"]  # every worker of the pools whose main envs failed to build is gone


def test_shm_vec_env_hang_times_out_and_ctrl_c_ends_a_hung_step() -> None:
    shm_before = shm_entries()
    proc = start("vec_env_ctrl_c")
    lines = Lines(proc)
    try:
        lines.wait_for(HANG_MARKER, START_GUARD)  # the first ShmVecEnv's step hangs...
        first = json.loads(lines.wait_for('"error"', GUARD))  # ...and times out
        lines.wait_for(HANG_MARKER, GUARD)  # the second ShmVecEnv's step is hung now
    except AssertionError as exc:
        pytest.fail(f"{exc}; stderr:\n{dump_and_kill(proc)}")
    assert first["error"] == "WorkerTimeoutError" and "did not answer 'step' within 1 s (FaultEnv-v0)" in first["message"], (
        first
    )
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout=GUARD)
    except subprocess.TimeoutExpired:
        pytest.fail(f"Ctrl-C did not end a process waiting on a hung ShmVecEnv step; stderr:\n{dump_and_kill(proc)}")
    lines.rest()
    err = proc.stderr.read()
    assert proc.returncode in (-signal.SIGINT, 130) and "KeyboardInterrupt" in err, err
    assert_session_gone(proc.pid, seconds=5.0)
    assert_no_shm_left(shm_before)
    lines.close()
