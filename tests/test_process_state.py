"""A training run called in this process (the command line's entry point) changes the process's signal handlers,
watchdog, RNG streams and more; the fixture every test runs under (tests/process_state.py) puts all of it back."""

from __future__ import annotations

import os
import signal

from ppo_dict.vec.watchdog import WATCHDOG
from tests.process_state import differences, restored, snapshot


def test_an_in_process_run_changes_the_process_and_the_fixture_puts_every_part_back(tmp_path, capfd) -> None:
    from ppo_dict import main_ppo

    if not WATCHDOG.running:  # as any earlier in-process run leaves it: its thread cannot be stopped
        WATCHDOG.start(60.0, hard_exit=False)
    with restored() as before:
        os.environ["PPO_DICT_TEST_LEFT_BEHIND"] = "1"
        code = main_ppo.main(
            [
                "--env",
                "gym_CartPole-v1",
                "--num_workers",
                "0",
                "--n_envs",
                "2",
                "--n_steps",
                "16",
                "--batch_size",
                "32",
                "--n_epochs",
                "1",
                "--total_timesteps",
                "32",
                "--seed",
                "0",
                "--progress",
                "none",
                "--plot",
                "False",
                "--run_dir",
                str(tmp_path / "run"),
            ]
        )
        assert code == 0, capfd.readouterr().err
        guard = WATCHDOG.guard  # the guard process the run started beside this process
        changed = differences(before, snapshot())
        # what a run takes for its lifetime (the stop signals' handlers, the watchdog's SIGALRM), and its streams
        # and the guard process beside it (which lives as long as the process)
        assert {"handlers", "environ", "torch", "guard"} <= set(changed), changed
    assert differences(before, snapshot()) == []
    assert guard is not None and guard.poll() is not None and WATCHDOG.guard is before["guard"] is None  # ended with the test
    assert "PPO_DICT_TEST_LEFT_BEHIND" not in os.environ
    # the watchdog's thread outlives the run, and with it its SIGALRM handler: a hung env call after it would
    # otherwise end the process (SIGALRM's default)
    assert WATCHDOG.running and signal.getsignal(signal.SIGALRM) == WATCHDOG._on_alarm
