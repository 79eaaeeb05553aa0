"""Shared fixtures: every test runs torch single-threaded (bit-exactness needs the same thread
count on both sides of a parity test; MKL's QR differs between 1 and 2 threads) and leaves the process as it
found it (tests/process_state.py), and Godot tests fail if they leave a game process behind."""

import gc
import os
import random
import signal
import sys
import uuid
from pathlib import Path

import pytest
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: the parity suite's folder (sb3 beside ppo_dict): ``make test`` runs it shuffled
PARITY = Path(ROOT) / "tests" / "parity"
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
    return [
        f"cpu: {model}; {os.cpu_count()} logical cores; {simd}",
        f"torch {torch.__version__}: cpu capability {torch.backends.cpu.get_cpu_capability()}",
    ]


def _gymnasium_as_shipped() -> None:
    """rl_zoo3's import replaces gymnasium's TimeLimit process-wide (``rl_zoo3.gym_patches``: its PatchedTimeLimit
    writes ``info["TimeLimit.truncated"]`` in the env's step, ahead of Monitor's ``episode`` key). Env worker processes
    never have it, so a test comparing sb3's envs in this process with ppo_dict's workers passed or failed by whether
    an earlier test had imported rl_zoo3. It is imported here, once, under the guard ppo_dict reads rl-zoo's zips with
    (``gymnasium_unpatched``): every test sees gymnasium as shipped, whatever ran before it."""
    from ppo_dict.interop.sb3_zip import gymnasium_unpatched

    with gymnasium_unpatched():
        try:
            import rl_zoo3.gym_patches  # noqa: F401
        except ImportError:  # not installed: nothing replaces it
            pass


_gymnasium_as_shipped()


@pytest.fixture(autouse=True)
def _a_quiet_machine(monkeypatch):
    """Layouts and waits are planned for a machine where no other process keeps the CPUs busy (ppo_dict.core.load
    measures that at start): a test's layout must not depend on what else the host runs meanwhile. The tests of
    the measurement itself (tests/test_load.py) look at the real CPUs."""
    from ppo_dict.core import load

    monkeypatch.setattr(load, "_at_start", 0.0)


@pytest.fixture(autouse=True)
def _one_torch_thread_and_the_process_restored():
    """Every test on one torch thread, and the process as it was after it: a command line's entry point called in
    this process leaves its signal handlers, watchdog, threads, RNG streams and environment variables behind
    (tests/process_state.py), and no test may depend on what another left."""
    from tests.process_state import restored

    with restored():
        torch.set_num_threads(1)
        yield


@pytest.fixture(scope="session")
def file_reader():
    """A worker that reads files of elsewhere in forked children under a memory limit and a deadline
    (``tests/fuzz_files.py``): a reader that crashes, hangs or allocates without bound fails its test, not pytest."""
    from tests.fuzz_files import Isolated

    reader = Isolated(ROOT)
    yield reader
    reader.close()


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


# ---------------------------------------------------------------------------------------- system parts
from ppo_dict.core.config import Config  # noqa: E402
from tests.system_parts import MARKER, PARTS, REQUIRE_ENV, needs, skip_reason  # noqa: E402

_skip_parts: dict[str, str] = {}  # skip reason -> the part it names, for the summary


def pytest_addoption(parser: pytest.Parser) -> None:
    """Run the suite in another order, or collect garbage between tests: nothing a test asserts may
    depend on what ran before it in the process (``make test-orders``)."""
    parser.addoption(
        "--order",
        default="file",
        help="file (the default), reverse, random:SEED (a shuffle, seeded), or "
        "parity-random:SEED (the parity suite's tests shuffled among their places)",
    )
    parser.addoption("--gc-between-tests", action="store_true", help="gc.collect() after every test")


def _reorder(items: list[pytest.Item], order: str) -> None:
    if order == "reverse":
        items.reverse()
    elif order.startswith("random:"):
        random.Random(order.partition(":")[2]).shuffle(items)
    elif order.startswith("parity-random:"):  # make test: the parity suite once, shuffled; the rest in file order
        places = [i for i, item in enumerate(items) if PARITY in item.path.parents]
        shuffled = [items[i] for i in places]
        random.Random(order.partition(":")[2]).shuffle(shuffled)
        for i, item in zip(places, shuffled):
            items[i] = item
    elif order != "file":
        raise pytest.UsageError(f"--order {order!r}: expected file, reverse, random:SEED or parity-random:SEED")


@pytest.fixture(autouse=True)
def _collect_garbage_after(request: pytest.FixtureRequest):
    yield
    if request.config.getoption("--gc-between-tests"):
        gc.collect()


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{MARKER}(part): needs a system part ({', '.join(PARTS)}); skipped, naming "
        f"its Debian packages, where it is missing (failed with {REQUIRE_ENV}=1)",
    )


def _case_configs(item: pytest.Item) -> list:
    """The Configs a parametrized test runs: its parameters, or what a module-level table maps them to
    (``CONFIGS[name]``: the parity and ONNX tests)."""
    params = getattr(getattr(item, "callspec", None), "params", {})
    tables = [value for value in vars(item.module).values() if isinstance(value, dict)] if params else []
    found = [value for value in params.values() if isinstance(value, Config)]
    for value in params.values():
        found += [table[value] for table in tables if isinstance(value, str) and isinstance(table.get(value), Config)]
    return found


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The order asked for (``--order``); a case whose Config renders MuJoCo frames (``pixel_obs_wrapper``)
    needs a GL backend, in files that do not mark their cases one by one."""
    _reorder(items, config.getoption("--order"))
    for item in items:
        if not any(True for _ in item.iter_markers(MARKER)) and any(cfg.pixel_obs_wrapper for cfg in _case_configs(item)):
            item.add_marker(needs("gl"))


def pytest_runtest_setup(item: pytest.Item) -> None:
    """Skip (or under CI fail) a test whose system part is missing, naming the packages."""
    for mark in item.iter_markers(MARKER):
        reason = skip_reason(mark.args[0])
        if reason is None:
            continue
        if os.environ.get(REQUIRE_ENV) == "1":
            pytest.fail(f"{reason} ({REQUIRE_ENV}=1: every system part must be installed)", pytrace=False)
        _skip_parts[reason] = mark.args[0]
        pytest.skip(reason)


def _reason(report: pytest.TestReport) -> str:
    longrepr = report.longrepr
    text = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
    return text.removeprefix("Skipped: ")


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    """The CPU the run used (also under ``-q``, so a log says where parity was shown), then how many
    tests were skipped for which missing part (and for what else), and how to run them."""
    terminalreporter.section("machine")
    if config.getoption("--order") != "file" or config.getoption("--gc-between-tests"):
        terminalreporter.write_line(
            f"order: {config.getoption('--order')}; gc between tests: {config.getoption('--gc-between-tests')}"
        )
    for line in cpu_description():
        terminalreporter.write_line(line)
    counts: dict[str, int] = {}
    for report in terminalreporter.stats.get("skipped", []):
        reason = _reason(report)
        key = f"{_skip_parts[reason]}: {reason}" if reason in _skip_parts else f"other: {reason}"
        counts[key] = counts.get(key, 0) + 1
    if not counts:
        return
    terminalreporter.write_sep("=", f"{sum(counts.values())} skipped, by reason")
    for key, count in sorted(counts.items(), key=lambda kv: (kv[0].startswith("other"), -kv[1], kv[0])):
        terminalreporter.write_line(f"{count:4d} {key}")
    if any(not key.startswith("other") for key in counts):
        terminalreporter.write_line("the Debian packages of every system part: sudo make system-deps (system-packages.txt)")
