"""The default layout uses every usable CPU for any n_envs: the CPU count faked through the machine's
probes (the affinity mask, a cgroup CPU quota, os.cpu_count), the layout checked as Config, the
command line's --dry_run and the Python API choose it."""

from __future__ import annotations

import os
import tracemalloc
from typing import Optional

import pytest

import ppo_dict
from ppo_dict.core import machine
from ppo_dict.core.config import Config
from ppo_dict.core.layout import Layout, main_share, plan_layout
from ppo_dict.main_ppo import main

N_ENVS = (1, 2, 7, 9, 64, 255, 256)
#: (usable CPUs, n_envs) -> (envs in this process, each worker process's envs as "largest/smallest")
EXPECTED = {
    (1, 1): (1, ""),
    (1, 2): (2, ""),
    (1, 7): (7, ""),
    (1, 9): (9, ""),
    (1, 64): (64, ""),
    (1, 255): (255, ""),
    (1, 256): (256, ""),
    (2, 1): (1, ""),
    (2, 2): (1, "1"),
    (2, 7): (3, "4"),
    (2, 9): (4, "5"),
    (2, 64): (32, "32"),
    (2, 255): (127, "128"),
    (2, 256): (128, "128"),
    (4, 1): (1, ""),
    (4, 2): (0, "1"),
    (4, 7): (1, "2"),
    (4, 9): (1, "3/2"),
    (4, 64): (15, "17/16"),
    (4, 255): (63, "64"),
    (4, 256): (63, "65/64"),
    (16, 1): (1, ""),
    (16, 2): (0, "1"),
    (16, 7): (0, "1"),
    (16, 9): (0, "1"),
    (16, 64): (0, "5/4"),
    (16, 255): (9, "17/16"),
    (16, 256): (9, "17/16"),
}


def fake_cpus(monkeypatch, affinity: Optional[int], quota: Optional[str] = None, cpu_count: int = 64) -> None:
    """This process may run on ``affinity`` CPUs (None: the platform has no affinity mask, os.cpu_count() counts),
    its cgroup's ``cpu.max`` reads ``quota`` (None: no such file)."""
    if affinity is None:
        monkeypatch.delattr(os, "sched_getaffinity", raising=False)
    else:
        monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(affinity)))
    monkeypatch.setattr(os, "cpu_count", lambda: cpu_count)
    real_read = machine._read
    cgroup = {
        "/sys/fs/cgroup/cpu.max": quota,
        "/sys/fs/cgroup/cpu/cpu.cfs_quota_us": None,
        "/sys/fs/cgroup/cpu/cpu.cfs_period_us": None,
    }
    monkeypatch.setattr(machine, "_read", lambda path: cgroup[path] if path in cgroup else real_read(path))


def shares(layout: Layout) -> tuple[int, str]:
    sizes = sorted({len(b) for b in layout.blocks}, reverse=True)
    return layout.main, "/".join(map(str, sizes[:1] + sizes[1:][-1:]))


@pytest.mark.parametrize("cpus", [1, 2, 4, 16])
def test_the_default_layout_uses_every_usable_cpu_for_any_n_envs(monkeypatch, cpus: int) -> None:
    """A worker process on every CPU but the main process's, env i in column i: the workers' blocks
    and the main process's share cover the columns once, in order, as even as they can be."""
    fake_cpus(monkeypatch, cpus)
    for n_envs in N_ENVS:
        layout = Config(n_envs=n_envs).layout()
        assert (layout.cpus, layout.cpu_source) == (cpus, machine.AFFINITY)
        assert shares(layout) == EXPECTED[cpus, n_envs], (cpus, n_envs)
        assert [i for block in layout.blocks for i in block] == list(range(layout.main, n_envs))
        in_process = cpus == 1 or n_envs == 1
        assert layout.processes == (0 if in_process else min(cpus - 1, n_envs)), (cpus, n_envs)
        if layout.blocks:
            sizes = [len(block) for block in layout.blocks]
            assert max(sizes) - min(sizes) <= 1 and layout.main <= max(sizes)


def test_the_cpu_count_comes_from_the_affinity_mask_then_the_cgroup_quota(monkeypatch) -> None:
    """/proc/cpuinfo is not asked: a VM's core ids can undercount what the process may use."""
    fake_cpus(monkeypatch, 16, quota="max 100000")
    assert machine.cpu_budget() == (16, machine.AFFINITY)
    fake_cpus(monkeypatch, 16, quota="400000 100000")  # 4 CPUs' time in each period
    assert machine.cpu_budget() == (4, machine.QUOTA) and machine.usable_cpus() == 4
    layout = Config(n_envs=64).layout()
    assert shares(layout) == EXPECTED[4, 64] and layout.cpu_source == machine.QUOTA
    fake_cpus(monkeypatch, 16, quota="150000 100000")  # 1.5 CPUs: rounded up
    assert machine.cpu_budget() == (2, machine.QUOTA)
    fake_cpus(monkeypatch, None, cpu_count=4)
    assert machine.cpu_budget() == (4, machine.CPU_COUNT)
    assert Config(n_envs=7).layout().text() == (
        "7 envs: 3 worker processes x 2 envs (forkserver) + 1 in this process; 4 usable CPUs (cpu count): "
        "a worker on each but one, kept by this process (the policy, its share)"
    )


def test_cores_that_must_not_be_shared_count_no_more_than_the_budget(monkeypatch) -> None:
    """The update's threads and the looking waits count physical cores, at most the CPU budget: a
    container's quota of 4 CPUs on a 64-core host gives 4, not 64 (nor the host's core ids)."""
    monkeypatch.setattr(machine, "_physical_cores", lambda: 64)
    fake_cpus(monkeypatch, 64, quota="400000 100000")
    assert machine.physical_cores() == 4
    fake_cpus(monkeypatch, 8)
    assert machine.physical_cores() == 8
    monkeypatch.setattr(machine, "_physical_cores", lambda: 2)  # SMT: 2 cores, 8 CPUs
    assert machine.physical_cores() == 2


def test_given_settings_are_kept_and_said(monkeypatch) -> None:
    fake_cpus(monkeypatch, 16)
    explicit = Config(n_envs=256, num_workers=16, envs_per_worker=16).layout()
    assert shares(explicit) == (16, "16") and explicit.processes == 15 and explicit.num_workers == 16
    assert explicit.text() == (
        "256 envs: 15 worker processes x 16 envs (forkserver) + 16 in this process; "
        "as asked (num_workers 16, envs_per_worker 16); 16 usable CPUs (affinity mask)"
    )
    assert shares(Config(n_envs=256, num_workers=8).layout()) == (29, "33/32")  # 7 workers: 3.5 envs fewer here than in one
    assert shares(Config(n_envs=256, main_envs=0).layout()) == (0, "18/17")
    assert shares(Config(n_envs=9, num_workers=0).layout()) == (9, "")
    # the main process steps none: a worker on every CPU
    assert shares(Config(n_envs=256, main_steps_envs=False).layout()) == (0, "16")
    halves = Config(n_envs=255, double_buffer=True).layout()
    assert halves.main == 0 and halves.processes == 16 and halves.halves == (range(0, 128), range(128, 255))
    assert sorted(i for block in halves.blocks for i in block) == list(range(255))


def test_a_layout_is_planned_from_the_split_not_env_by_env() -> None:
    """Every config checked is planned, a billion envs or workers among them (refused later for their size):
    the plan and its one-line text take no memory that grows with them; the blocks are worked out when read."""
    tracemalloc.start()
    try:
        huge = [
            plan_layout(10**9, None, None, cpus=(16, "test")),
            plan_layout(10**9, None, None, halves=True, cpus=(16, "test")),
            plan_layout(None, 10**9, None, cpus=(2, "test")),
            plan_layout(10**12, 3, None, unit=4, cpus=(2, "test")),
        ]
        texts = [layout.text() for layout in huge]
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 2**20, peak
    assert (
        "999999999 worker processes x 2/1 envs (forkserver), none in this process" in texts[2]
        and huge[2].processes == 999999999
    )
    assert huge[1].blocks[15].runs == (range(468750000, 500000000), range(968750000, 10**9))
    assert huge[3].blocks[-1].runs == (range(666666666668, 10**12),) and huge[3].blocks.sizes() == [333333333336, 333333333332]
    # counts past sys.maxsize (len() cannot give them): the counts, the text and a block still come out
    beyond = plan_layout(None, 10**30, None, cpus=(2, "test"))
    assert (
        beyond.processes == 10**30 - 1
        and beyond.blocks.sizes() == [2, 1]
        and beyond.blocks[-1].runs == (range(10**30 - 1, 10**30),)
    )
    assert (
        "in halves 5000000000000000000000000000000 + 5000000000000000000000000000000 (double buffer)"
        in plan_layout(10**31, None, None, halves=True, cpus=(16, "test")).text()
    )
    # read block by block, a small layout is the contiguous split
    small = plan_layout(19, 3, None, main_steps_envs=False, cpus=(16, "test"))
    assert [tuple(b) for b in small.blocks] == [tuple(range(0, 7)), tuple(range(7, 13)), tuple(range(13, 19))]
    assert small.blocks.sizes() == [7, 6] and 12 in small.blocks[1] and small.blocks[1][-1] == 12


def test_the_main_share_is_a_workers_less_half_an_env_per_worker() -> None:
    assert [main_share(8, 1), main_share(256, 15), main_share(64, 15), main_share(1024, 15)] == [4, 9, 0, 57]
    assert main_share(12, 1, unit=4) == 4 and main_share(10, 2, unit=2) % 2 == 0
    layout = plan_layout(256, None, None, cpus=(16, "test"))
    workers = [len(block) for block in layout.blocks]
    assert layout.main == 9 and workers == [17] * 7 + [16] * 8


@pytest.mark.parametrize(
    "n_envs, expected",
    [
        (
            256,
            "layout: 256 envs: 15 worker processes x 17/16 envs (forkserver) + 9 in this process; "
            "16 usable CPUs (affinity mask): a worker on each but one, kept by this process (the policy, its share)",
        ),
        (
            7,
            "layout: 7 envs: 7 worker processes x 1 env (forkserver), none in this process; 16 usable CPUs (affinity mask): "
            "fewer envs than CPUs, a worker per env",
        ),
    ],
)
def test_dry_run_says_the_layout_and_why(monkeypatch, capsys, n_envs: int, expected: str) -> None:
    fake_cpus(monkeypatch, 16)
    assert main(["--env", "gym_Pendulum-v1", "--n_envs", str(n_envs), "--dry_run"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert expected in lines
    # the layout's words
    assert any(line.startswith("processes: about") and "(16 usable CPUs (affinity mask))" in line for line in lines)


def test_the_python_api_follows_the_same_layout(monkeypatch) -> None:
    """ppo_dict.PPO(..., n_envs=7) on 4 usable CPUs: 3 worker processes of 2 envs, 1 env here, as the command line."""
    fake_cpus(monkeypatch, 4)
    model = ppo_dict.PPO("MlpPolicy", "Pendulum-v1", n_envs=7, n_steps=8, batch_size=28, seed=0, verbose=0)
    try:
        model.learn(56)
        layout = model.trainer.pool.layout
        assert shares(layout) == (1, "2") and layout.processes == 3 and len(model.trainer.pool.pids) == 3
        assert layout == Config(n_envs=7).layout()
    finally:
        model.env.close()
