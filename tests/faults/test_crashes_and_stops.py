"""A crash of a process stepping envs (a segfault in an env's native code), and stop signals around the
run's own handlers: Ctrl-C while a command line starts (main_ppo, main_ppo_godot, enjoy, export_onnx, sweep),
a second Ctrl-C after the final checkpoint.

Each case runs ``python -m ppo_dict.main_ppo`` (or another command line) in its own session with a hard timeout
(``tests/faults/test_layouts.py``'s ``start_run``), and checks that nothing of the session and no /dev/shm
entry is left and that every checkpoint left loads.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from typing import Optional

import pytest

from ppo_dict import enjoy, export_onnx, sweep
from ppo_dict.run import startup
from ppo_dict.run.checkpoint import list_checkpoints
from ppo_dict.vec import guard
from tests.faults.fault_envs import CRASH_MARKER, HANG_MARKER
from tests.faults.lines import Lines
from tests.faults.scenarios import session_processes
from tests.faults.test_layouts import GUARD, LAYOUTS, Layout, Run, assert_nothing_left, start_run
from tests.faults.test_worker_faults import ROOT, assert_session_gone, shm_entries
from tests.godot_helpers import wait_gone

#: 4 envs x 8 steps an update: the aimed env crashes at its 12th step (the second rollout), after the checkpoint at 32 steps
STEPS = 32
SHARE = LAYOUTS["share"]


def crash_layout(main_steps_envs: bool, marker: str) -> Layout:
    flags = SHARE.flags if main_steps_envs else (*SHARE.flags, "--main_steps_envs", "False")
    return Layout(flags, SHARE.env, main_steps_envs, f"{SHARE.env_kwargs}, crash_marker={marker!r}")


def test_a_segfault_in_the_main_process_share_ends_the_run_and_resume_auto_continues_it(tmp_path) -> None:
    """The start line names the main process's envs; the crash kills the process (SIGSEGV, its traceback printed
    by faulthandler), every worker goes with it; the same command again continues from the last checkpoint."""
    layout, shm_before = crash_layout(True, str(tmp_path / "crashed")), shm_entries()
    flags = ("--resume", "auto", "--total_timesteps", str(2 * STEPS))
    run = start_run(layout, "segfault", tmp_path, *flags)
    run.wait_for(
        "the main process steps envs 0..1 of 4 itself: a crash in one of them (a segfault in native code) ends the "
        "run, and --resume auto continues it from its last checkpoint; --main_steps_envs False steps every env in a "
        "worker process instead, where a crash is a WorkerDiedError",
        timeout=120,
    )
    line = run.wait_for(CRASH_MARKER, timeout=120)
    assert int(line.split("pid=")[1]) == run.proc.pid, line  # env 1 is the main process's
    code, err = run.finish(timeout=GUARD)
    assert code == -signal.SIGSEGV, err
    assert "Fatal Python error: Segmentation fault" in err and 'fault_envs.py", line' in err, err
    assert_nothing_left(run, shm_before)
    first = list_checkpoints(os.path.join(run.run_dir, "checkpoints"))
    assert [os.path.basename(p) for p in first] == [f"checkpoint_{STEPS:012d}.pt"]
    again = start_run(layout, "segfault", tmp_path, *flags)
    again.wait_for(f"resumed from {first[0]} at {STEPS} steps", timeout=120)
    code, err = again.finish(timeout=120)
    assert code == 0, err
    assert f'"env_steps": {2 * STEPS},' in again.lines.rest()[-1]
    assert_nothing_left(again, shm_before)


def test_with_main_steps_envs_false_the_same_segfault_is_a_worker_died_error(tmp_path) -> None:
    layout, shm_before = crash_layout(False, str(tmp_path / "crashed")), shm_entries()
    run = start_run(layout, "segfault", tmp_path)
    line = run.wait_for(CRASH_MARKER, timeout=120)
    assert int(line.split("pid=")[1]) != run.proc.pid, line
    code, err = run.finish(timeout=GUARD)
    assert code == 1, err
    assert "error: WorkerDiedError: worker 0 (envs 0..1, gym_FaultEnv-v0, pid " in err, err
    assert "died with exit code -11 (SIGSEGV) during 'step'" in err and "Traceback" not in err, err
    assert "the main process steps" not in "".join(run.lines.rest())
    assert_nothing_left(run, shm_before)


# ------------------------------------------------------------------------------ Ctrl-C while starting
def caught_signals(pid: int) -> int:
    """The signals ``pid`` has handlers for (``SigCgt`` of /proc/<pid>/status), as a bit mask (bit n-1: signal n)."""
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1], 16) for line in f if line.startswith("SigCgt:"))


def start_cli(tmp_path, *args: str, module: str = "ppo_dict.main_ppo", env_extra: Optional[dict[str, str]] = None) -> Run:
    env = {**os.environ, "PYTHONPATH": ROOT, "PYTHONUNBUFFERED": "1", **(env_extra or {})}
    proc = subprocess.Popen(
        [sys.executable, "-m", module, *args],
        cwd=ROOT,
        env=env,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    return Run(proc, str(tmp_path / "run"), Lines(proc))


def await_start_up_handlers(run: Run) -> None:
    """Return once ``run`` has installed :func:`startup.exit_on_stop_signals` (its slow imports follow)."""
    term_bit = 1 << (signal.SIGTERM - 1)  # Python itself catches only SIGINT: a caught SIGTERM is the start-up handler
    deadline = time.monotonic() + 60
    while not caught_signals(run.proc.pid) & term_bit:
        assert time.monotonic() < deadline and run.proc.poll() is None, "the start-up handlers were not installed"
        time.sleep(0.005)


def assert_stopped_cleanly(run: Run, signum: int, stopped: str) -> None:
    """``run`` ends on ``signum`` with its status, the one line ``"<SIGNAL> received " + stopped``, no traceback, no
    process left."""
    code, err = run.finish(timeout=GUARD)
    assert code == 128 + signum, err
    assert err.endswith(f"\n{signal.Signals(signum).name} received {stopped}\n"), err
    assert "Traceback" not in err, err
    assert_session_gone(run.proc.pid, seconds=5.0)
    run.lines.close()


def test_the_start_up_handlers_take_the_run_handlers_signals() -> None:
    assert startup.STOP_SIGNALS == guard.STOP_SIGNALS


@pytest.mark.parametrize(
    "ignored, taken",
    [
        ((), (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)),
        ((signal.SIGHUP,), (signal.SIGINT, signal.SIGTERM)),  # nohup's
        (
            (signal.SIGINT,),
            (signal.SIGINT, signal.SIGTERM, signal.SIGHUP),
        ),  # a background job's, by a shell without job control
    ],
)
def test_an_ignored_sighup_stays_ignored_an_ignored_sigint_does_not(ignored: tuple[int, ...], taken: tuple[int, ...]) -> None:
    before = {signum: signal.getsignal(signum) for signum in startup.STOP_SIGNALS}
    try:
        for signum in startup.STOP_SIGNALS:
            signal.signal(signum, signal.SIG_IGN if signum in ignored else signal.SIG_DFL)
        assert startup.taken_signals() == taken
    finally:
        for signum, handler in before.items():
            signal.signal(signum, handler)


def checkpoints_of(run: Run) -> list[str]:
    return (
        list_checkpoints(os.path.join(run.run_dir, "checkpoints"))
        if os.path.isdir(os.path.join(run.run_dir, "checkpoints"))
        else []
    )


def await_more_checkpoints(run: Run, than: int) -> int:
    """Wait (up to 120 s) until ``run`` has saved more than ``than`` checkpoints; how many it has."""
    deadline = time.monotonic() + 120
    while len(checkpoints_of(run)) <= than:
        assert time.monotonic() < deadline and run.proc.poll() is None, f"no checkpoint after {than}: {run.proc.poll()}"
        time.sleep(0.05)
    return len(checkpoints_of(run))


def test_under_nohup_a_hangup_changes_nothing_and_sigterm_still_stops_the_run(tmp_path) -> None:
    """``nohup`` ignores SIGHUP for a run to outlive its terminal: the run keeps it ignored while it starts, while it
    trains and in its (forkserver) workers. A hangup sent to its whole process group, as a closed terminal sends
    it, is sent while it starts and again while it trains: every process of the run lives on, training goes on;
    SIGTERM then stops it as usual."""
    shm_before = shm_entries()
    run = start_run(SHARE, "none", tmp_path, "--mp_method", "forkserver", "--keep_checkpoints", "1000", launcher=("nohup",))
    await_start_up_handlers(run)
    os.killpg(run.proc.pid, signal.SIGHUP)
    saved = await_more_checkpoints(run, 0)
    processes = set(session_processes(run.proc.pid))
    assert len(processes) >= 3, processes  # the run, its forkserver, a worker
    os.killpg(run.proc.pid, signal.SIGHUP)
    saved = await_more_checkpoints(run, saved)  # training goes on after the hangup
    assert set(session_processes(run.proc.pid)) >= processes
    run.proc.send_signal(signal.SIGTERM)
    code, err = run.finish(timeout=GUARD)
    assert code == 128 + signal.SIGTERM, err
    assert (
        "SIGTERM received: saving the state from before the current rollout" in err
        and "SIGHUP" not in err
        and "Traceback" not in err
    ), err
    assert_nothing_left(run, shm_before)


@pytest.mark.parametrize("when", ["imports", "probe"])
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_stop_signal_while_starting_ends_it_cleanly(when: str, signum: int, tmp_path) -> None:
    """Sent once the start-up handlers are in (``imports``: torch and the trainer are still being imported), or
    while the env is probed (``probe``: its constructor, the first env built, sleeps): exit 128 + signal, one line,
    no traceback, nothing written."""
    run = start_cli(
        tmp_path,
        "--env",
        "gym_FaultEnv-v0",
        "--gym_packages",
        "tests.faults.fault_envs",
        "--num_workers",
        "0",
        "--env_kwargs",
        "dict(mode='build_hang', at_step=1)",
        "--run_dir",
        str(tmp_path / "run"),
    )
    if when == "imports":
        await_start_up_handlers(run)
    else:
        run.wait_for(f"{HANG_MARKER} constructor pid={run.proc.pid}", timeout=120)
    run.proc.send_signal(signum)
    assert_stopped_cleanly(run, signum, "while starting: stopped before training began; nothing was saved")
    assert not os.path.exists(run.run_dir)


#: the other command lines, each given a named pipe with no writer where it opens a file as it starts (a checkpoint, a
#: sweep file):
#: ``(arguments, what a stop signal does)``
COMMANDS = {
    "enjoy": (lambda tmp, fifo: [str(tmp), "--model", fifo], enjoy.STOPPED),
    "export_onnx": (lambda tmp, fifo: [fifo, "--out", str(tmp / "policy.onnx")], export_onnx.STOPPED),
    "sweep": (lambda tmp, fifo: [fifo, "--out", str(tmp / "sweep")], sweep.STOPPED),
}


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
@pytest.mark.parametrize("command", list(COMMANDS))
def test_a_stop_signal_while_another_command_starts_ends_it_cleanly(command: str, signum: int, tmp_path) -> None:
    """enjoy, export_onnx and sweep take main_ppo's start-up path: a signal while they import ends them with 128 + signal
    and one line, no traceback, nothing written."""
    fifo = str(tmp_path / "input")
    os.mkfifo(fifo)
    arguments, stopped = COMMANDS[command]
    run = start_cli(tmp_path, *arguments(tmp_path, fifo), module=f"ppo_dict.{command}")
    await_start_up_handlers(run)
    run.proc.send_signal(signum)
    assert_stopped_cleanly(run, signum, stopped)
    assert sorted(os.listdir(tmp_path)) == ["input"]


@pytest.mark.parametrize("command", list(COMMANDS))
def test_a_named_pipe_given_as_the_file_is_refused_at_once(command: str, tmp_path) -> None:
    """A checkpoint or sweep file that is a named pipe no one writes once kept the command waiting in open() until a
    stop signal; files are now opened without blocking and only if they are regular (docs/safety.md): one line, exit 2,
    no traceback, nothing written, nothing left running."""
    fifo = str(tmp_path / "input")
    os.mkfifo(fifo)
    arguments, _ = COMMANDS[command]
    run = start_cli(tmp_path, *arguments(tmp_path, fifo), module=f"ppo_dict.{command}")
    code, err = run.finish(timeout=GUARD)
    assert code == 2 and "Traceback" not in err, err
    assert f"{fifo}: is a FIFO (named pipe), not a regular file" in err.splitlines()[-1], err
    assert_session_gone(run.proc.pid, seconds=5.0)
    run.lines.close()
    assert sorted(os.listdir(tmp_path)) == ["input"]


#: an exported game that never answers: it writes its pid where ``SILENT_GAME_PID`` says and sleeps
SILENT_GAME = """#!{python}
import os, time
with open(os.environ["SILENT_GAME_PID"], "w") as f:
    f.write(str(os.getpid()))
time.sleep(600)
"""


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_stop_signal_while_main_ppo_godot_waits_for_its_game_ends_both(signum: int, tmp_path) -> None:
    """main_ppo_godot's start-up handlers: a signal while it imports is main_ppo's case; here it comes while the game
    launched to read its spaces has not answered: exit 128 + signal, one line, no traceback, the game gone, nothing written."""
    game, pid_file = tmp_path / "silent_game.x86_64", tmp_path / "game.pid"
    game.write_text(SILENT_GAME.format(python=sys.executable))
    game.chmod(0o755)
    run = start_cli(
        tmp_path,
        "--env_path",
        str(game),
        "--run_dir",
        str(tmp_path / "run"),
        module="ppo_dict.main_ppo_godot",
        env_extra={"SILENT_GAME_PID": str(pid_file)},
    )
    deadline = time.monotonic() + 120
    while not pid_file.exists() or not pid_file.read_text():
        assert time.monotonic() < deadline and run.proc.poll() is None, (
            f"the game was not launched; stderr: {run.proc.stderr.read()}"
        )
        time.sleep(0.01)
    run.proc.send_signal(signum)
    assert_stopped_cleanly(run, signum, startup.TRAINING)
    assert wait_gone(int(pid_file.read_text())), "the game outlived the command line"
    assert not os.path.exists(run.run_dir)


# ------------------------------------------------------------------------------ a second Ctrl-C after the final checkpoint
#: main_ppo, its model file (--save_path) written only after a second stop signal came: the final checkpoint is
#: saved and printed by then; the first signal is announced on stdout, for the test to send the second
SLOW_SAVE = """
import sys, time
import ppo_dict.main_ppo as mp
handler = mp.StopFlag.__call__
def announce(self, signum, frame):
    handler(self, signum, frame)
    print("SIGNALLED", flush=True)
mp.StopFlag.__call__ = announce
def slow_save_model(ppo, directory):
    print("SAVING MODEL", flush=True)
    time.sleep(600)
mp.save_model = slow_save_model
sys.exit(mp.main(sys.argv[1:]))
"""


def test_a_second_ctrl_c_after_the_final_checkpoint_says_it_was_saved(tmp_path) -> None:
    run_dir, model_dir, shm_before = tmp_path / "run", tmp_path / "model", shm_entries()
    env = {**os.environ, "PYTHONPATH": ROOT, "PYTHONUNBUFFERED": "1"}
    args = [
        "--env",
        "gym_FaultEnv-v0",
        "--gym_packages",
        "tests.faults.fault_envs",
        "--num_workers",
        "0",
        "--n_envs",
        "2",
        "--n_steps",
        "8",
        "--batch_size",
        "16",
        "--total_timesteps",
        "16",
        "--plot",
        "False",
        "--verbose",
        "0",
        "--progress",
        "none",
        "--run_dir",
        str(run_dir),
        "--save_path",
        str(model_dir),
    ]
    proc = subprocess.Popen(
        [sys.executable, "-c", SLOW_SAVE, *args],
        cwd=ROOT,
        env=env,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    run = Run(proc, str(run_dir), Lines(proc))
    checkpoint = run.wait_for("checkpoint ", timeout=120).strip().removeprefix("checkpoint ")
    run.wait_for("SAVING MODEL", timeout=60)
    proc.send_signal(signal.SIGINT)
    run.wait_for("SIGNALLED", timeout=60)
    proc.send_signal(signal.SIGINT)
    code, err = run.finish(timeout=GUARD)
    assert code == 130, err
    assert f"interrupted twice: stopped after saving {checkpoint} (as printed); nothing after it was written\n" in err, err
    assert "stopped without saving" not in err and "Traceback" not in err, err
    assert list_checkpoints(str(run_dir / "checkpoints")) == [checkpoint]
    assert not (model_dir / "model.pt").exists()
    assert_nothing_left(run, shm_before)


# ------------------------------------------------------------------------------ a second Ctrl-C while the run closes
#: main_ppo stopped by a first signal: its summary (after the workers, outputs and lock are closed) waits for a second
#: signal, which then comes while the run closes; each signal is announced on stdout, for the test to send the next
WHILE_CLOSING = """
import sys, time
import ppo_dict.main_ppo as mp
handler, summary, taken = mp.StopFlag.__call__, mp.summary, []
def announce(self, signum, frame):
    taken.append(signum)
    try:
        handler(self, signum, frame)
    finally:
        print(f"SIGNALLED {len(taken)}", flush=True)
def waiting_summary(*args, **kwargs):
    print("CLOSED", flush=True)
    while len(taken) < 2:
        time.sleep(0.01)
    return summary(*args, **kwargs)
mp.StopFlag.__call__, mp.summary = announce, waiting_summary
sys.exit(mp.main(sys.argv[1:]))
"""


def test_a_second_ctrl_c_while_the_run_closes_lets_it_close(tmp_path) -> None:
    """Once the stop has written its checkpoint, a second signal no longer interrupts: the run says so and closes
    (before, a KeyboardInterrupt there escaped the run: a traceback and death by SIGINT, status -2)."""
    run_dir, shm_before = tmp_path / "run", shm_entries()
    env = {**os.environ, "PYTHONPATH": ROOT, "PYTHONUNBUFFERED": "1"}
    args = [
        "--env",
        "gym_FaultEnv-v0",
        "--gym_packages",
        "tests.faults.fault_envs",
        "--num_workers",
        "1",
        "--n_envs",
        "2",
        "--n_steps",
        "8",
        "--batch_size",
        "16",
        "--total_timesteps",
        "100000",
        "--plot",
        "False",
        "--verbose",
        "0",
        "--progress",
        "none",
        "--save_freq",
        "1",
        "--seed",
        "0",
        "--run_dir",
        str(run_dir),
        "--mp_method",
        "fork",
    ]
    proc = subprocess.Popen(
        [sys.executable, "-c", WHILE_CLOSING, *args],
        cwd=ROOT,
        env=env,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    run = Run(proc, str(run_dir), Lines(proc))
    await_more_checkpoints(run, 0)  # training runs
    proc.send_signal(signal.SIGINT)
    run.wait_for("SIGNALLED 1", timeout=60)
    run.wait_for("CLOSED", timeout=60)
    checkpoint = [line for line in run.lines.seen if line.startswith("checkpoint ")][-1].strip().removeprefix("checkpoint ")
    proc.send_signal(signal.SIGINT)
    code, err = run.finish(timeout=GUARD)
    assert code == 130, err
    assert err.endswith(
        f"SIGINT received twice: stopped at once after saving {checkpoint} (as printed); nothing after it "
        "was written; the run is closing its workers\n"
    ), err
    assert "Traceback" not in err and "interrupted twice" not in err, err
    assert '"interrupted": true' in run.lines.rest()[-1], run.lines.seen[-3:]
    assert list_checkpoints(str(run_dir / "checkpoints"))[-1] == checkpoint
    assert_nothing_left(run, shm_before)


#: a command line whose interpreter, freeing its modules after its exit callbacks, is sent SIGINT
SIGNAL_WHILE_FREED = """
import os, signal, sys
from ppo_dict.run import startup
startup.exit_on_stop_signals()
class SignalledWhenFreed:
    def __del__(self):
        os.kill(os.getpid(), signal.SIGINT)
        os.write(1, b"SENT")
kept = SignalledWhenFreed()
sys.exit(130)
"""


def test_a_stop_signal_in_the_last_moments_of_the_exit_is_ignored() -> None:
    """Python gives SIGINT its default action back after the exit callbacks: without ``startup.ignore_while_exiting`` a
    second Ctrl-C in the last tenths of a second of a stopped run ended it by SIGINT (status -2), not with status 130."""
    proc = subprocess.run(
        [sys.executable, "-c", SIGNAL_WHILE_FREED],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": ROOT},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (proc.returncode, proc.stdout, proc.stderr) == (130, "SENT", "")
