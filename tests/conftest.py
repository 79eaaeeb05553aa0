"""Shared fixtures: every test runs torch single-threaded (bit-exactness needs the same thread
count on both sides of a parity test; MKL's QR differs between 1 and 2 threads), and Godot tests
fail if they leave a game process behind."""
import os
import signal
import sys
import uuid

import pytest
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)


def cpu_description() -> list[str]:
    """Which CPU the parity suite ran on: exactness is proven per CPU (docs/sb3_parity.md items 18-19)."""
    model, flags = "unknown", set()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() == "model name":
                    model = value.strip()
                elif key.strip() == "flags":
                    flags = set(value.split())
                    break
    except OSError:
        pass
    simd = " ".join(sorted(f for f in flags if f.startswith(("avx", "amx", "fma")))) or "none listed"
    return [f"cpu: {model}; {os.cpu_count()} logical cores; {simd}",
            f"torch {torch.__version__}: cpu capability {torch.backends.cpu.get_cpu_capability()}"]


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    """The CPU at the end of every run (also under ``-q``), so a log says where parity was shown."""
    terminalreporter.section("machine")
    for line in cpu_description():
        terminalreporter.write_line(line)


@pytest.fixture(autouse=True)
def _one_torch_thread():
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


# ---------------------------------------------------------------------------------------- Godot processes
from tests.godot_helpers import godot_children, tagged_godot  # noqa: E402  (after ROOT is on sys.path)


@pytest.fixture
def no_leftover_godot():
    """Fails the test if it leaves a Godot process of ours behind."""
    before = set(godot_children())
    yield
    left = set(godot_children()) - before
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    assert not left, f"Godot processes left running: {sorted(left)}"


@pytest.fixture
def tag():
    """A unique ``game_args`` flag for this test's games; fails the test if any of them outlives it."""
    value = uuid.uuid4().hex[:12]
    yield value
    left = tagged_godot(value)
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    assert not left, f"Godot processes left running: {left}"
