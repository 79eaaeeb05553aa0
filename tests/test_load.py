"""CPUs busy with other work (ppo_dict.core.load): measured from /proc/stat less the run's own processes, and what
the layout, the waits and the update's threads make of it."""
import multiprocessing
import os
import time

import pytest

from ppo_dict.core import load, machine
from ppo_dict.core.layout import plan_layout


def fake_stat(monkeypatch, ticks: dict[int, list[int]], own: int) -> None:
    """/proc/stat with these per-CPU ticks (user nice system idle iowait irq softirq steal), and this process's own ticks."""
    text = "cpu  0 0 0 0 0 0 0 0\n" + "".join(f"cpu{i} {' '.join(map(str, t))}\n" for i, t in ticks.items()) + "procs_running 1\n"
    monkeypatch.setattr(load, "_read", lambda path: text if path == "/proc/stat" else machine._read(path))
    monkeypatch.setattr(load, "process_ticks", lambda pids: own)


def test_other_processes_use_is_every_cpu_s_busy_time_less_the_run_s_own(monkeypatch) -> None:
    watch = load.LoadWatch()
    watch.cpus = {0, 1}
    fake_stat(monkeypatch, {0: [100, 0, 0, 100, 0, 0, 0, 0], 1: [100, 0, 0, 100, 0, 0, 0, 0]}, own=0)
    assert watch.look() is None  # the first look only starts the count
    # 100 ticks a CPU later: CPU 0 all busy, CPU 1 half busy (10 of it waiting for I/O: idle), 50 ticks of it the run's own
    fake_stat(monkeypatch, {0: [200, 0, 0, 100, 0, 0, 0, 0], 1: [150, 0, 0, 140, 10, 0, 0, 0]}, own=50)
    assert watch.look() == pytest.approx(1.0)  # 150 busy ticks - 50 of the run's = one CPU's 100


def test_cpus_taken_elsewhere_leave_the_layout_fewer(monkeypatch) -> None:
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(2)))
    monkeypatch.setattr(load, "_at_start", 1.8)  # two burners on a 2-CPU host
    layout = plan_layout(8, None, None)
    assert layout.processes == 0 and layout.main == 8  # every env in this process: sb3's DummyVecEnv's layout
    assert layout.text() == "8 envs in this process; 1 usable CPU (affinity mask; 1.8 busy with other work): no CPU for a worker"
    monkeypatch.setattr(load, "_at_start", 0.3)  # a daemon waking up: noise
    assert plan_layout(8, None, None).processes == 1


def busy_loop(seconds: float) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass


def test_a_cpu_burner_is_seen(monkeypatch) -> None:
    """A real process spinning on a CPU beside this one is measured as (about) one CPU busy elsewhere."""
    burner = multiprocessing.get_context("fork").Process(target=busy_loop, args=(3.0,))
    burner.start()
    try:
        time.sleep(0.3)
        assert load.busy_elsewhere(0.5) >= 0.7
    finally:
        burner.join()
