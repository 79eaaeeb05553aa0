"""A crash of a process stepping envs (a segfault in an env's native code).

Each case runs ``python -m ppo_dict.main_ppo`` in its own session with a hard timeout
(``tests/faults/test_layouts.py``'s ``start_run``), and checks that nothing of the session and no /dev/shm
entry is left and that every checkpoint left loads.
"""
from __future__ import annotations

import os
import signal

from ppo_dict.run.checkpoint import list_checkpoints
from tests.faults.fault_envs import CRASH_MARKER
from tests.faults.test_layouts import GUARD, LAYOUTS, Layout, assert_nothing_left, start_run
from tests.faults.test_worker_faults import shm_entries

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
    run.wait_for("the main process steps envs 0..1 of 4 itself: a crash in one of them (a segfault in native code) ends the run, "
                 "and --resume auto continues it from its last checkpoint; --main_steps_envs False steps every env in a worker "
                 "process instead, where a crash is a WorkerDiedError", timeout=120)
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

