"""The progress display: a bar on a terminal, plain lines otherwise."""
import io

from ppo_dict.progress import Progress, format_duration


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
