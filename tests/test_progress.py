"""The progress display: a bar on a terminal, plain lines otherwise."""

import io

from ppo_dict.run.progress import Progress, format_duration


def test_progress_bar_on_a_terminal_and_lines_otherwise() -> None:
    now = [0.0]
    bar, lines = io.StringIO(), io.StringIO()
    p_bar = Progress(1000, 0, "auto", stream=bar, isatty=True, clock=lambda: now[0])
    p_lines = Progress(1000, 0, "auto", stream=lines, isatty=False, interval=10, clock=lambda: now[0])
    for step, t in ((250, 1.0), (500, 2.0), (1000, 12.0)):
        now[0] = t
        p_bar.update(step, float("nan") if step == 250 else -5.0)
        p_lines.update(step, -5.0)
    assert bar.getvalue().count("\r") == 3
    assert "\r[######..................] 250/1,000 steps (25.0%)  250 fps  ETA 3s  return -" in bar.getvalue()
    assert lines.getvalue().splitlines() == [
        "progress: 250/1,000 steps (25.0%)  250 fps  ETA 3s  return -5.00",
        "progress: 1,000/1,000 steps (100.0%)  83 fps  ETA 0s  return -5.00",
    ]
    assert (format_duration(3725), format_duration(65), format_duration(float("inf"))) == ("1h02m05s", "1m05s", "?")


def test_auto_looks_at_the_stream_it_writes_to_not_stdout(tmp_path) -> None:
    """``... 2> train.log`` from a terminal: stdout is a terminal, stderr a file; the file gets lines."""
    import os
    import pty

    master, slave = pty.openpty()
    try:
        with os.fdopen(slave, "w", closefd=False) as terminal, open(tmp_path / "train.log", "w") as log:
            assert Progress(1000, 0, "auto", stream=terminal).mode == "bar"
            assert Progress(1000, 0, "auto", stream=log).mode == "lines"
    finally:
        os.close(master)
        os.close(slave)


def test_cli_with_stdout_on_a_terminal_and_stderr_in_a_file_writes_lines(tmp_path) -> None:
    import os
    import pty
    import subprocess
    import sys

    from tests.conftest import ROOT

    master, slave = pty.openpty()
    try:
        with open(tmp_path / "train.log", "w") as log:
            proc = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "ppo_dict.main_ppo",
                    "--env",
                    "gym_CartPole-v1",
                    "--num_workers",
                    "0",
                    "--n_envs",
                    "2",
                    "--n_steps",
                    "64",
                    "--n_epochs",
                    "1",
                    "--total_timesteps",
                    "256",
                    "--seed",
                    "0",
                    "--plot",
                    "False",
                    "--verbose",
                    "0",
                    "--run_dir",
                    str(tmp_path / "run"),
                ],
                stdout=slave,
                stderr=log,
                cwd=ROOT,
                env={**os.environ, "PYTHONPATH": ROOT},
                timeout=120,
            )
    finally:
        os.close(slave)
        os.close(master)
    text = (tmp_path / "train.log").read_text()
    assert proc.returncode == 0, text
    assert "progress: 256/256 steps (100.0%)" in text and "\r" not in text
