"""The Python API's own faults: a hung env the main process steps ends ``learn`` after ``step_timeout``
(the API starts the watchdog, as the command line does), in-process and in the default share of a
worker pool; a program with its own SIGALRM handler keeps it, with a warning. Each case runs in its
own process and session with a hard timeout (``run_scenario``)."""

from __future__ import annotations

import pytest

from tests.faults.test_worker_faults import run_scenario

TAIL = "within 1 s; an env is probably hung (raise step_timeout if it is only slow); every env and worker was stopped"


@pytest.mark.parametrize("num_workers", ["0", "2"])
@pytest.mark.parametrize("mode, call", [("hang", "step at rollout step 1"), ("reset_hang", "reset (seed=11)")])
def test_a_hung_env_in_the_main_process_ends_learn_after_step_timeout(mode: str, call: str, num_workers: str) -> None:
    r = run_scenario("api_hang", mode, num_workers)
    assert (r["error"], r["message"]) == (
        "EnvTimeoutError",
        f"the main process's env 1 (FaultEnv-v0) did not return from {call} {TAIL}",
    )
    assert 1.0 <= r["call_s"] < 1.0 + 20.0  # the timeout, then closing the pool (a guard far above it on a loaded host)
    assert r["strays"] == []


def test_a_programs_own_sigalrm_handler_is_kept_with_a_warning() -> None:
    r = run_scenario("api_own_alarm")
    assert r["handler_kept"]
    assert r["warnings"] == [
        "FaultEnv-v0: the main process steps envs itself, but their calls cannot be timed out (the program has a SIGALRM "
        "handler of its own, which the watchdog would replace): an env whose step or reset hangs there hangs learn(); "
        "main_steps_envs=False with num_workers >= 1 steps every env in a worker process, which times out after step_timeout"
    ]
