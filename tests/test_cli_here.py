"""tests/cli_here.py answers as a real command would: exit status, stdout and stderr (the stream a module bound at
import too), warnings on stderr, and the process (gymnasium's TimeLimit among it) as it was."""

import subprocess
import sys
import warnings

import gymnasium

from tests.cli_here import run_here


def test_a_refusal_is_its_exit_status_and_its_message_on_stderr() -> None:
    proc = run_here("--env", "gym_CartPole-v1", "--n_steps", "0", "--dry_run")
    assert isinstance(proc, subprocess.CompletedProcess) and proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.startswith("error: 1 invalid setting(s):\n  - n_steps=0") and "Traceback" not in proc.stderr
    proc = run_here("--bacth_size", "64")  # argparse's SystemExit
    assert proc.returncode == 2 and "unrecognized arguments: --bacth_size" in proc.stderr


def test_output_at_the_descriptors_and_warnings_reach_stderr_and_the_process_is_put_back(monkeypatch) -> None:
    import os

    from ppo_dict import main_ppo

    patched = type("PatchedTimeLimit", (gymnasium.wrappers.TimeLimit,), {})
    monkeypatch.setattr(gymnasium.wrappers, "TimeLimit", patched)  # as rl_zoo3.gym_patches does
    seen = []

    def main(argv: list) -> int:
        seen.append(gymnasium.wrappers.TimeLimit)
        os.write(1, b"from fd 1\n")
        print("from sys.stdout")
        os.write(2, b"from fd 2\n")
        warnings.warn("a warning", UserWarning)
        sys.exit("a message")

    monkeypatch.setattr(main_ppo, "main", main)
    stdout, stderr = sys.stdout, sys.stderr
    proc = run_here("--anything")
    assert seen == [patched.__mro__[1]] and gymnasium.wrappers.TimeLimit is patched  # gymnasium's own in the run only
    assert (sys.stdout, sys.stderr) == (stdout, stderr)
    assert proc.returncode == 1 and proc.stdout == "from fd 1\nfrom sys.stdout\n"
    assert (
        proc.stderr.startswith("from fd 2\n")
        and "UserWarning: a warning" in proc.stderr
        and proc.stderr.endswith("a message\n")
    )


def test_a_runs_messages_follow_a_redirected_stderr(tmp_path) -> None:
    """A message whose ``log`` defaults to stderr goes to ``sys.stderr`` as it is when written (it went to the stream
    of when ppo_dict was imported, past a caller's ``contextlib.redirect_stderr``)."""
    import contextlib
    import io

    from ppo_dict.run.checkpoint import remove_stale_temp_files

    (tmp_path / ".checkpoint_000000000512.pt.abc.tmp").write_bytes(b"partial")
    with contextlib.redirect_stderr(io.StringIO()) as err:
        remove_stale_temp_files(str(tmp_path))
    assert (
        err.getvalue()
        == f"removed {tmp_path}/.checkpoint_000000000512.pt.abc.tmp: a partial checkpoint from an interrupted write\n"
    )
