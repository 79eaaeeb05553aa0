"""A fuzzed command line: flag combinations drawn from the config's own metadata, good and bad values
mixed, paths among them that a run cannot write (a file, a name too long, an earlier run's directory,
a folder without write permission) and hostile YAML (an alias bomb, a recursive alias). Every one is
refused with exit status 2 and a message whose every line names a setting, or accepted by
``--dry_run`` with exit status 0 (never where a path no run can use was drawn); never a traceback,
never a hang, never a process or /dev/shm entry left behind, never a file written or changed.

``make test`` runs a few hundred through ``--dry_run`` in this process (``main_ppo.main``, the same
code a command runs) and a few as real commands; the slow tests run thousands, and start about 20
accepted ones for real, stopping each with SIGTERM. A failure the fuzzer finds and shrinks becomes
an ordinary test in ``test_bad_input.py``.
"""

from __future__ import annotations

import atexit
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import pytest
from hypothesis import HealthCheck, given, settings

from tests.conftest import ROOT
from tests.faults.test_worker_faults import assert_no_shm_left, assert_session_gone, finish, shm_entries
from tests.fuzz_flags import (
    PATH_FIELDS,
    Outcome,
    assert_clean_outcome,
    child_processes,
    command_lines,
    folder_bytes,
    hostile_paths,
    prepare_folder,
    run_in_process,
    unusable_paths,
)

FOLDER = tempfile.mkdtemp(prefix="ppo_dict_fuzz_")
atexit.register(shutil.rmtree, FOLDER, True)
prepare_folder(FOLDER)
PREPARED = folder_bytes(FOLDER)
FUZZ = dict(deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def written_files() -> list[str]:
    """What appeared or changed under the fuzz folder (a dry run writes nothing, and changes no byte of
    the prepared inputs: the earlier run's directory among them)."""
    now = folder_bytes(FOLDER)
    return sorted(name for name in set(now) | set(PREPARED) if now.get(name) != PREPARED.get(name))


def check_in_process(argv: list[str]) -> None:
    shm = shm_entries()
    outcome = run_in_process(argv)
    assert_clean_outcome(outcome, argv, tuple(unusable_paths(argv, FOLDER)))
    assert child_processes() == [], argv
    assert_no_shm_left(shm)
    assert written_files() == [], (written_files(), argv)


@settings(max_examples=300, derandomize=True, **FUZZ)
@given(argv=command_lines(FOLDER))
def test_fuzzed_command_lines_through_dry_run(argv: list[str]) -> None:
    check_in_process(argv + ["--dry_run"])


@pytest.mark.parametrize(
    "name, path",
    [(name, path) for name in PATH_FIELDS for path in hostile_paths(name, FOLDER)],
    ids=lambda value: value.replace(FOLDER, "F")[:40] if isinstance(value, str) else value,
)
def test_every_file_system_case_through_dry_run(name: str, path: str) -> None:
    """Each path case the fuzz draws (rarely, among a few hundred lines), given to each path setting of a plain
    command line: refused where no run can use it, never a traceback, never a file written."""
    check_in_process(["--env", "gym_CartPole-v1", "--n_steps", "16", "--batch_size", "16", f"--{name}", path, "--dry_run"])


def popen_main(argv: list[str]) -> subprocess.Popen:
    """``python -m ppo_dict.main_ppo ARGV`` started in a session of its own (to find what it leaves behind)."""
    env = {**os.environ, "PYTHONPATH": ROOT, "WANDB_MODE": "disabled"}
    return subprocess.Popen(
        [sys.executable, "-m", "ppo_dict.main_ppo", *argv],
        cwd=FOLDER,
        env=env,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )


def communicate(proc: subprocess.Popen, argv: list[str], timeout: float, what: str) -> tuple[str, str]:
    """Its output once it has exited (a failure saying ``what`` if not within ``timeout`` s); no process of its session
    left."""
    out, err = finish(proc, timeout, f"{what}: {argv}")
    assert_session_gone(proc.pid, seconds=3)
    return out, err


@settings(max_examples=3, derandomize=True, **FUZZ)
@given(argv=command_lines(FOLDER, max_flags=5))
def test_fuzzed_command_lines_as_real_commands(argv: list[str]) -> None:
    """The same property for a few real commands: the in-process run above is faithful to them."""
    shm = shm_entries()
    proc = popen_main(argv + ["--dry_run"])
    out, err = communicate(proc, argv, 120, "hung")
    assert_clean_outcome(Outcome(proc.returncode, out, err), argv, tuple(unusable_paths(argv, FOLDER)))
    assert_no_shm_left(shm)
    assert written_files() == [], (written_files(), argv)


@pytest.mark.slow
@settings(max_examples=3000, **FUZZ)
@given(argv=command_lines(FOLDER, max_flags=12))
def test_thousands_of_fuzzed_command_lines_through_dry_run(argv: list[str]) -> None:
    check_in_process(argv + ["--dry_run"])


@pytest.mark.slow
def test_accepted_fuzzed_command_lines_start_and_stop_cleanly() -> None:
    """About 20 command lines that --dry_run accepts, started for real: each trains until SIGTERM
    (or its end), exits 143 (or 0) within 30 s without a traceback, and leaves nothing behind."""
    started: list[list[str]] = []

    @settings(max_examples=400, **FUZZ)
    @given(argv=command_lines(FOLDER, good_only=True, max_flags=10))
    def collect(argv: list[str]) -> None:
        if len(started) < 20 and run_in_process(argv + ["--dry_run"]).code == 0:
            started.append(argv)

    collect()
    assert len(started) >= 15, started
    for i, argv in enumerate(started):
        start_and_stop(
            argv + ["--run_dir", os.path.join(FOLDER, f"run_{i}"), "--seed", str(i)], os.path.join(FOLDER, f"run_{i}")
        )


def start_and_stop(argv: list[str], run_dir: str) -> None:
    """Start ``argv`` for real; once it is training (its run directory's config.json is written after its
    signal handlers are installed) let it run 5 s, then SIGTERM it: within 30 s it exits 143 (or 0 if
    it had finished), without a traceback, leaving no process and no /dev/shm entry behind."""
    shm = shm_entries()
    proc = popen_main(argv)
    deadline = time.monotonic() + 60
    while proc.poll() is None and not os.path.exists(os.path.join(run_dir, "config.json")) and time.monotonic() < deadline:
        time.sleep(0.1)
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGTERM)
    out, err = communicate(proc, argv, 30, "not stopped by SIGTERM")
    assert "Traceback" not in err, f"{argv}\n{err[-3000:]}"
    assert proc.returncode in (0, 143), f"exit {proc.returncode}: {argv}\n{err[-3000:]}"
    assert_no_shm_left(shm)
