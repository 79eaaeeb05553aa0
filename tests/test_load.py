"""CPUs busy with other work (ppo_dict.core.load): measured from /proc/stat less the run's own processes, and what
the layout, the waits and the update's threads make of it; a load that lasts told from a blip at start, and the
note once the load that shaped a layout has gone."""

import contextlib
import multiprocessing
import os
import time
from typing import Iterator

import pytest

from ppo_dict.algo.ppo import PPO
from ppo_dict.core import load, machine
from ppo_dict.core.config import Config
from ppo_dict.core.layout import plan_layout
from ppo_dict.main_ppo import main, start_plan
from ppo_dict.run.run_plan import build_env_pool


def fake_stat(monkeypatch, ticks: dict[int, list[int]], own: int) -> None:
    """/proc/stat with these per-CPU ticks (user nice system idle iowait irq softirq steal), and this process's own ticks."""
    text = (
        "cpu  0 0 0 0 0 0 0 0\n" + "".join(f"cpu{i} {' '.join(map(str, t))}\n" for i, t in ticks.items()) + "procs_running 1\n"
    )
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
    assert (
        layout.text() == "8 envs in this process; 1 usable CPU (affinity mask; 1.8 busy with other work): no CPU for a worker"
    )
    monkeypatch.setattr(load, "_at_start", 0.3)  # a daemon waking up: noise
    assert plan_layout(8, None, None).processes == 1


def busy_loop(seconds: float, started=None, go=None) -> None:
    if started is not None:  # said it is ready, then waits for the others
        started.set()
        go.wait(10)
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass


@contextlib.contextmanager
def burners(seconds: float) -> Iterator[list[int]]:
    """A CPU burner on each of two CPUs (this process pinned to them, the burners with it), all started, then burning
    for ``seconds`` from when the body begins; the burners' pids."""
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        pytest.skip("one CPU: two burners beside a run need two")
    os.sched_setaffinity(0, cpus[:2])
    ctx = multiprocessing.get_context("fork")
    started, go = [ctx.Event(), ctx.Event()], ctx.Event()
    procs = [ctx.Process(target=busy_loop, args=(seconds, event, go)) for event in started]
    try:
        if machine.cpu_budget()[0] < 2:
            pytest.skip("a cgroup CPU quota of one CPU")
        for p in procs:
            p.start()
        for event in started:
            event.wait(10)
        go.set()
        yield [p.pid for p in procs]
    finally:
        for p in procs:
            if p.pid is not None:
                p.kill()
                p.join()
        os.sched_setaffinity(0, cpus)


def test_a_load_that_lasts_leaves_the_layout_fewer_cpus(monkeypatch) -> None:
    """Two burners through the whole look: every part of it sees them, and the layout is planned on the CPU left."""
    monkeypatch.setattr(load, "_at_start", None)
    with burners(5.0):
        layout = plan_layout(8, None, None)
    assert layout.processes == 0 and layout.cpus == 1 and "busy with other work" in layout.cpu_source


def test_a_blip_at_start_is_not_a_load(monkeypatch) -> None:
    """Burners that end 0.15 s into the look (a command's last moments): its first part sees them, as the single 0.2 s
    look that planned a run on one CPU did; its second finds the CPUs free, and the layout takes every CPU. The watch
    counts the burners' CPU time alone against the wall clock (what else this host runs meanwhile, other sessions'
    tests, is not part of the blip), from a BUSY of 0.2 (on such a busy host the burners get a quarter of the CPUs)."""
    monkeypatch.setattr(load, "BUSY", 0.2)
    seen: list[float] = []
    real = load.look_at_start
    monkeypatch.setattr(load, "look_at_start", lambda: seen.extend(real()) or seen)
    monkeypatch.setattr(load, "_at_start", None)
    with burners(0.15) as pids:
        burnt: dict[int, int] = {}  # each burner's CPU ticks, kept once it has exited and been reaped

        def burners_ticks(cpus=None) -> tuple[int, int]:
            burnt.update({pid: max(burnt.get(pid, 0), load.process_ticks([pid])) for pid in pids})
            return sum(burnt.values()), int(time.monotonic() * os.sysconf("SC_CLK_TCK") * 2)

        monkeypatch.setattr(load, "cpu_ticks", burners_ticks)
        layout = plan_layout(8, None, None)
    assert seen[0] >= load.BUSY and min(seen) < load.BUSY, seen
    assert layout.processes == 1 and layout.cpus == 2 and layout.cpu_source == machine.AFFINITY


def run_beside_a_load(monkeypatch, capsys, rollout_load: float, **settings) -> tuple[list[str], str]:
    """The start of a short run (6 rollouts) on 2 CPUs whose start found 1.8 CPUs busy elsewhere, each look after it
    ``rollout_load`` (/proc/stat faked, read by the real watch): its start lines, and the run's stderr."""
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(2)))
    monkeypatch.setattr(load, "_at_start", 1.8)
    looks = iter(range(1, 10**6))  # /proc/stat 100 ticks a CPU further at each read, rollout_load CPUs of them busy
    busy = round(rollout_load * 50)
    monkeypatch.setattr(
        load,
        "_read",
        lambda path: "".join(f"cpu{i} {n * busy} 0 0 {n * (100 - busy)} 0 0 0 0\n" for n in [next(looks)] for i in range(2)),
    )
    monkeypatch.setattr(load, "process_ticks", lambda pids: 0)
    cfg = Config(
        env="gym_CartPole-v1",
        n_envs=8,
        n_steps=16,
        batch_size=64,
        n_epochs=1,
        total_timesteps=768,
        seed=0,
        verbose=1,
        **settings,
    )
    capsys.readouterr()
    plan = start_plan(cfg, None, None)
    lines = capsys.readouterr().out.splitlines()
    with PPO(cfg, build_env_pool(cfg, plan.backend)) as model:
        model.learn()
    return lines, capsys.readouterr().err


WORDS = "1 usable CPU (affinity mask; 1.8 busy with other work)"
GONE = (
    f"note: the load that left this run {WORDS} has gone (the last 3 updates found the CPUs free); the layout stays as "
    "planned; --num_workers 2 gives a run the full layout on 2 usable CPUs (affinity mask), "
    "whatever the load at its start\n"
)


def test_the_start_line_and_dry_run_word_the_usable_cpus_alike(monkeypatch, capsys) -> None:
    """Beside a load, --dry_run's layout and processes lines and the run's start line say the same CPUs in the same
    words; once the load has gone for 3 updates, a note says so, once."""
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(2)))
    monkeypatch.setattr(load, "_at_start", 1.8)
    assert main(["--env", "gym_CartPole-v1", "--n_envs", "8", "--dry_run"]) == 0
    dry = capsys.readouterr().out.splitlines()
    layout = f"layout: 8 envs in this process; {WORDS}: no CPU for a worker"
    assert layout in dry and any(line.startswith("processes: about") and f"({WORDS})," in line for line in dry)
    lines, err = run_beside_a_load(monkeypatch, capsys, 0.0)
    # 6 quiet looks (one before each update): said at the third, not again
    assert layout in lines and err.count(GONE) == 1, err


@pytest.mark.parametrize(
    "rollout_load, settings", [(1.4, {}), (0.0, {"num_workers": 0})], ids=["the load lasts", "a layout asked for"]
)
def test_no_note_while_the_load_lasts_nor_where_it_shaped_nothing(monkeypatch, capsys, rollout_load, settings) -> None:
    _, err = run_beside_a_load(monkeypatch, capsys, rollout_load, **settings)
    assert "has gone" not in err
