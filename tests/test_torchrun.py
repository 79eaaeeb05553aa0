"""The command line under ``torchrun`` on this host (gloo): two ranks train one PPO, one rank is a plain run.

Each test starts ``torchrun --standalone`` in a subprocess (its ranks, their workers and torchrun's agent carry a
marker in their environment, so that the test finds every process the run left). A 2-rank run gives the same
numbers twice and the single process's numbers (its episodes ``==``, its update within float rounding); one rank
under torchrun is the plain run bit for bit; a refused config is refused by every rank, said once; a rank that
raises, hangs in an env step or is SIGKILLed ends every rank with one message naming it, and leaves no process;
``--resume auto`` then continues. Across hosts nothing can be tested here (docs/distributed.md).
"""

from __future__ import annotations

import csv
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any, Optional

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
#: a small CartPole run: 5 envs (3 + 2 over two ranks), two rollouts and updates with a truncated last minibatch
RUN = [
    "--env",
    "gym_CartPole-v1",
    "--n_envs",
    "5",
    "--n_steps",
    "16",
    "--batch_size",
    "32",
    "--n_epochs",
    "2",
    "--total_timesteps",
    "160",
    "--seed",
    "4",
    "--progress",
    "none",
    "--verbose",
    "0",
    "--plot",
    "False",
]
#: FaultEnv (tests/faults/fault_envs.py) on 4 envs: env 3, seeded 13, is rank 1's second env
FAULT = [
    "--env",
    "gym_FaultEnv-v0",
    "--gym_packages",
    "tests.faults.fault_envs",
    "--n_envs",
    "4",
    "--n_steps",
    "16",
    "--batch_size",
    "32",
    "--n_epochs",
    "1",
    "--seed",
    "10",
    "--progress",
    "none",
    "--verbose",
    "0",
    "--plot",
    "False",
]


def marked(mark: str) -> list[int]:
    """Live processes whose environment holds ``mark`` (the run's: torchrun, its ranks, their workers and helpers)."""
    found = []
    for name in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{name}/environ", "rb") as f:
                holds = mark.encode() in f.read()
            with open(f"/proc/{name}/stat") as f:
                zombie = f.read().rsplit(")", 1)[1].split()[0] == "Z"
        except OSError:
            continue
        if holds and not zombie and int(name) != os.getpid():
            found.append(int(name))
    return found


class Torchrun:
    """``torchrun --standalone --nproc-per-node N -m ppo_dict.main_ppo ARGS`` started in the background (``module``:
    another module, or a script's path)."""

    def __init__(self, args: list[str], nproc: int = 2, module: str = "ppo_dict.main_ppo", launcher: tuple[str, ...] = ()):
        self.mark = f"PPO_DICT_TEST_RUN={uuid.uuid4().hex}"
        env = {**os.environ, self.mark.split("=")[0]: self.mark.split("=")[1], "PYTHONUNBUFFERED": "1"}
        target = [module] if module.endswith(".py") else ["-m", module]
        command = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc-per-node",
            str(nproc),
            *launcher,
            *target,
            *args,
        ]
        self.proc = subprocess.Popen(
            command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
        )
        self.started = time.monotonic()

    def finish(self, timeout: float = 240.0) -> tuple[int, str, str]:
        """``(exit status, stdout, stderr)`` once it ended (killed, with its group, past ``timeout``)."""
        try:
            out, err = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            out, err = self.proc.communicate()
            raise AssertionError(f"torchrun did not end within {timeout} s: {err[-2000:]}")
        self.seconds = time.monotonic() - self.started
        return self.proc.returncode, out, err

    def left(self, within: float = 10.0) -> list[int]:
        """The run's processes still alive ``within`` seconds after torchrun ended (none, for a clean end)."""
        deadline = time.monotonic() + within
        while marked(self.mark) and time.monotonic() < deadline:
            time.sleep(0.2)
        return marked(self.mark)

    def rank_pid(self, rank: int) -> Optional[int]:
        """The pid of rank ``rank``'s process (its environment says ``RANK=rank``; torchrun's agent has no RANK)."""
        for pid in marked(self.mark):
            try:
                with open(f"/proc/{pid}/environ", "rb") as f:
                    env = dict(item.split(b"=", 1) for item in f.read().split(b"\0") if b"=" in item)
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    command = f.read()
            except OSError:
                continue
            if env.get(b"RANK") == str(rank).encode() and b"ppo_dict.main_ppo" in command:
                return pid
        return None


def run_cli(args: list[str], nproc: Optional[int] = 2, timeout: float = 240.0) -> tuple[int, str, str]:
    """A run to its end: under torchrun with ``nproc`` ranks, or a plain ``python -m`` (None)."""
    if nproc is not None:
        run = Torchrun(args, nproc)
        result = run.finish(timeout)
        assert run.left() == [], f"processes left: {run.left()}"
        return result
    done = subprocess.run(
        [sys.executable, "-m", "ppo_dict.main_ppo", *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout
    )
    return done.returncode, done.stdout, done.stderr


def progress(run_dir: Path) -> list[dict[str, str]]:
    with open(run_dir / "progress.csv") as f:
        return list(csv.DictReader(f))


def checkpoint(run_dir: Path) -> dict[str, Any]:
    files = sorted((run_dir / "checkpoints").glob("checkpoint_*.pt"))
    return torch.load(files[-1], weights_only=True)


def errors(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("error:")]


@pytest.fixture(scope="module")
def plain(tmp_path_factory) -> Path:
    """The single process's run of :data:`RUN` (its envs in this process, as each rank's are here)."""
    run_dir = tmp_path_factory.mktemp("plain") / "run"
    code, out, err = run_cli([*RUN, "--num_workers", "0", "--run_dir", str(run_dir)], nproc=None)
    assert code == 0, err
    return run_dir


def test_two_ranks_give_the_same_run_twice_and_the_single_processs_numbers(plain, tmp_path) -> None:
    runs = []
    for name in ("a", "b"):
        code, out, err = run_cli([*RUN, "--run_dir", str(tmp_path / name)])
        assert code == 0, err
        assert sum(line.startswith('{"env"') for line in out.splitlines()) == 1  # the JSON line: rank 0's alone
        runs.append(tmp_path / name)
    a, b = (progress(run) for run in runs)
    assert [{k: v for k, v in row.items() if not k.startswith("time/")} for row in a] == [
        {k: v for k, v in row.items() if not k.startswith("time/")} for row in b
    ]
    saved = [checkpoint(run) for run in runs]
    assert all(torch.equal(saved[0]["policy"][k], saved[1]["policy"][k]) for k in saved[0]["policy"])
    single, mine = progress(plain), progress(runs[0])
    assert len(single) == len(mine) == 2
    for theirs, ours in zip(single, mine):
        for key, value in theirs.items():
            if key.startswith("rollout/") or key in ("time/total_timesteps", "train/n_updates", "train/clip_range"):
                assert ours[key] == value, key
            elif key.startswith("train/") and value:
                assert float(ours[key]) == pytest.approx(float(value), rel=1e-4, abs=1e-6), key
    reference = checkpoint(plain)
    for key, value in reference["policy"].items():
        assert torch.allclose(saved[0]["policy"][key], value, rtol=1e-5, atol=1e-6), key
    assert saved[0]["num_timesteps"] == reference["num_timesteps"] == 160
    assert torch.equal(saved[0]["rng"]["torch"], reference["rng"]["torch"])  # every rank's streams are the single process's


def test_one_rank_under_torchrun_is_the_plain_run_bit_for_bit(plain, tmp_path) -> None:
    code, out, err = run_cli([*RUN, "--num_workers", "0", "--run_dir", str(tmp_path / "one")], nproc=1)
    assert code == 0, err
    ours, theirs = checkpoint(tmp_path / "one"), checkpoint(plain)
    assert all(torch.equal(ours["policy"][k], theirs["policy"][k]) for k in theirs["policy"])
    assert all(
        torch.equal(a, b) for a, b in zip(ours["optimizer"]["state"][0].values(), theirs["optimizer"]["state"][0].values())
    )
    assert [{k: v for k, v in row.items() if k.startswith(("train/", "rollout/"))} for row in progress(tmp_path / "one")] == [
        {k: v for k, v in row.items() if k.startswith(("train/", "rollout/"))} for row in progress(plain)
    ]


#: a rank that joins, builds a layer on the meta device as the run's check measures the policy, and leaves: then it
#: writes the threads it still has to rank<r>.txt in the directory it is given (gloo's threads, alive at the
#: interpreter's end, can abort it: ppo_dict.run.ranks.leave)
LEAVES = """
import os, sys, torch
from ppo_dict.run.ranks import join_ranks, leave
info = join_ranks()
with torch.device("meta"):
    torch.tanh(torch.nn.Linear(4, 2)(torch.zeros(1, 4)))
leave()
with open(os.path.join(sys.argv[1], f"rank{info.rank}.txt"), "w") as f:
    f.write(" ".join(open(f"/proc/self/task/{t}/comm").read().strip() for t in os.listdir("/proc/self/task")))
"""


def test_a_rank_leaves_with_its_groups_threads_joined_before_the_interpreter_ends(tmp_path) -> None:
    script = tmp_path / "leaves.py"
    script.write_text(LEAVES)
    code, out, err = Torchrun([str(tmp_path)], 2, str(script)).finish(120)
    assert code == 0, err
    threads = {rank: (tmp_path / f"rank{rank}.txt").read_text().split() for rank in (0, 1)}
    assert all(names and not any("gloo" in name for name in names) for names in threads.values()), threads


def test_dry_run_prints_the_global_plan_and_each_ranks_layout(tmp_path) -> None:
    code, out, err = run_cli([*RUN, "--dry_run"])
    assert code == 0, err
    assert out.count("dry run: the config passes every check") == 1
    assert "ranks: 5 envs over 2 ranks: 3/2 (rank 0: envs 0-2, rank 1: envs 3-4)" in out
    assert (
        "  rank 0 (" in out
        and "): 3 envs in this process" in out
        and "  rank 1 (" in out
        and "): 2 envs in this process" in out
    )


def test_a_config_one_rank_refuses_is_refused_on_every_rank_before_any_env_starts(tmp_path) -> None:
    code, out, err = run_cli(
        [
            *FAULT,
            "--total_timesteps",
            "64",
            "--env_kwargs",
            "dict(mode='build_raise', at_step=1, only_rank=1)",
            "--run_dir",
            str(tmp_path / "run"),
        ]
    )
    assert code != 0
    lines = errors(err)
    assert len(lines) == 1 and "invalid setting" in lines[0], err
    assert "constructor boom" in err and "(on rank 1)" in err
    assert not (tmp_path / "run").exists()  # nothing written, nothing started


@pytest.mark.parametrize("fault", ["step_raise", "hang"])
def test_a_rank_that_raises_or_hangs_ends_every_rank_with_one_message(fault, tmp_path) -> None:
    run = Torchrun(
        [
            *FAULT,
            "--total_timesteps",
            "4096",
            "--step_timeout",
            "3",
            "--env_kwargs",
            f"dict(mode='{fault}', bad_seed=13, at_step=40)",
            "--run_dir",
            str(tmp_path / "run"),
        ]
    )
    code, out, err = run.finish(timeout=120)
    assert code != 0
    assert run.left() == []
    lines = errors(err)
    assert len(lines) == 1, err
    assert lines[0].startswith("error: rank 1 (") and "stepping envs 2-3 of 4 (its env k is env 2 + k)" in lines[0]
    assert ("RuntimeError: boom" if fault == "step_raise" else "EnvTimeoutError") in lines[0]


def test_a_rank_killed_ends_every_rank_with_one_message_and_resume_auto_continues(tmp_path) -> None:
    run_dir = tmp_path / "run"
    args = [*FAULT, "--total_timesteps", "100000", "--save_freq", "64", "--run_dir", str(run_dir)]
    run = Torchrun(args)
    deadline = time.monotonic() + 120
    while not list((run_dir / "checkpoints").glob("checkpoint_*.pt")) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert list((run_dir / "checkpoints").glob("checkpoint_*.pt")), "no checkpoint within 120 s"
    os.kill(run.rank_pid(1), signal.SIGKILL)
    code, out, err = run.finish(timeout=120)
    assert code != 0
    assert run.left() == []
    lines = errors(err)
    assert len(lines) == 1 and lines[0].startswith("error: rank 1 (") and "stopped answering" in lines[0], err
    saved = checkpoint(run_dir)["num_timesteps"]
    code, out, err = run_cli([*FAULT, "--total_timesteps", str(saved + 128), "--resume", "auto", "--run_dir", str(run_dir)])
    assert code == 0, err
    assert f"resumed from {run_dir}" in out and checkpoint(run_dir)["num_timesteps"] == saved + 128


@pytest.mark.slow
@pytest.mark.parametrize("num_workers", ["0", "2"])
def test_torchruns_sigterm_stops_every_rank_together_with_one_checkpoint(num_workers, tmp_path) -> None:
    """torchrun's agent forwards SIGTERM to every rank's process group: with the envs in the ranks the ranks stop after
    the same update; with worker processes (ended by the same signal) every rank drops the rollout. Either way
    rank 0 writes one checkpoint, at a step every rank reached, and says so once."""
    run_dir = tmp_path / "run"
    run = Torchrun(
        [*FAULT, "--total_timesteps", "100000", "--save_freq", "64", "--num_workers", num_workers, "--run_dir", str(run_dir)]
    )
    deadline = time.monotonic() + 120
    while not list((run_dir / "checkpoints").glob("checkpoint_*.pt")) and time.monotonic() < deadline:
        time.sleep(0.2)
    run.proc.send_signal(signal.SIGTERM)
    code, out, err = run.finish(timeout=120)
    assert run.left() == []
    assert err.count("SIGTERM received: every rank stopped after the same update") == 1, err
    assert out.count("checkpoint ") == 1 and errors(err) == [], err
    last = checkpoint(run_dir)
    assert last["num_timesteps"] % 64 == 0


def by_hand(rank: int, port: int, *args: str, **env: str) -> subprocess.Popen:
    """One rank of a 2-rank run started without torchrun: MASTER_ADDR and MASTER_PORT set by hand (rank 0 hosts the store)."""
    environ = {
        **os.environ,
        "WORLD_SIZE": "2",
        "RANK": str(rank),
        "LOCAL_RANK": str(rank),
        "LOCAL_WORLD_SIZE": "2",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port),
        **env,
    }
    return subprocess.Popen(
        [sys.executable, "-m", "ppo_dict.main_ppo", *args],
        cwd=ROOT,
        env=environ,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize(
    "env, said",
    [
        ({"RANK": "abc"}, "RANK='abc' is not a whole number"),
        ({"MASTER_ADDR": ""}, "MASTER_ADDR is not set"),
        ({"LOCAL_WORLD_SIZE": "0"}, "LOCAL_WORLD_SIZE=0 is not in [1, 2]"),
        ({"MASTER_PORT": "99999"}, "MASTER_PORT=99999 is not in [1, 65535]"),
        ({"PPO_DICT_RENDEZVOUS_TIMEOUT": "-1"}, "PPO_DICT_RENDEZVOUS_TIMEOUT='-1' is not a number of seconds"),
    ],
)
def test_an_environment_that_places_no_rank_is_one_message(env, said: str) -> None:
    """RANK=abc, no MASTER_ADDR, LOCAL_WORLD_SIZE=0 ended in tracebacks (torch's or ppo_dict's)."""
    proc = by_hand(1, free_port(), *RUN, "--dry_run", **env)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 2 and err.startswith("error: ") and said in err and "Traceback" not in err and out == "", err


def test_a_store_where_nothing_listens_is_a_line_while_waiting_and_one_message_naming_it() -> None:
    """A hand-set MASTER_ADDR:MASTER_PORT where nothing listens waited 1800 s without a word, --dry_run too."""
    port = free_port()
    started = time.monotonic()
    proc = by_hand(1, port, *RUN, "--dry_run", PPO_DICT_RENDEZVOUS_TIMEOUT="6")
    _, err = proc.communicate(timeout=90)
    assert proc.returncode == 1 and time.monotonic() - started < 60
    lines = err.splitlines()
    # one line while waiting: the first comes at half a timeout shorter than the lines' period (ticks are 0.5 s apart)
    said = (
        rf"rank 1 \(.*\): waiting for a store listening at 127\.0\.0\.1:{port} \(MASTER_ADDR:MASTER_PORT\) "
        r"\([34] s of 6 s\)"
    )
    assert re.fullmatch(said, lines[0]) and sum("waiting for" in line for line in lines) == 1, err
    assert lines[-1].startswith("error: rank 1 (") and f"waited 6 s for a store listening at 127.0.0.1:{port}" in lines[-1], (
        err
    )
    assert "Traceback" not in err


def test_two_ranks_started_by_hand_meet_and_rank_0_says_a_missing_one() -> None:
    port = free_port()
    ranks = [by_hand(r, port, *RUN, "--dry_run") for r in (1, 0)]
    (out1, err1), (out0, err0) = (p.communicate(timeout=120) for p in ranks)
    assert [p.returncode for p in ranks] == [0, 0], err0 + err1
    assert "dry run: the config passes every check" in out0 and out1 == ""
    alone = by_hand(0, free_port(), *RUN, "--dry_run", PPO_DICT_RENDEZVOUS_TIMEOUT="3")
    _, err = alone.communicate(timeout=60)
    assert alone.returncode == 1 and "waited 3 s for rank 1 to join at 127.0.0.1:" in err and "Traceback" not in err, err


def same_ends(a: Path, b: Path) -> None:
    """``b`` ended where ``a`` ended: its last checkpoint (the envs included) and its progress, wall times aside."""
    from tests.test_checkpoint import assert_same, without_config

    ours, theirs = checkpoint(b), checkpoint(a)
    assert "envs" in ours and ours["num_timesteps"] == theirs["num_timesteps"]
    assert_same(without_config(ours), without_config(theirs))
    assert [{k: v for k, v in row.items() if not k.startswith("time/")} for row in progress(b)] == [
        {k: v for k, v in row.items() if not k.startswith("time/")} for row in progress(a)
    ]


@pytest.mark.slow
def test_every_ranks_envs_reach_the_checkpoint_and_a_resumed_two_rank_run_is_the_one_never_stopped(tmp_path) -> None:
    whole, halves = tmp_path / "whole", tmp_path / "halves"
    code, out, err = run_cli([*RUN, "--total_timesteps", "320", "--save_freq", "80", "--run_dir", str(whole)])
    assert code == 0, err
    code, out, err = run_cli([*RUN, "--total_timesteps", "160", "--save_freq", "80", "--run_dir", str(halves)])
    assert code == 0, err
    code, out, err = run_cli([*RUN, "--total_timesteps", "320", "--save_freq", "80", "--resume", str(halves)])
    assert code == 0, err
    assert "(3 envs of 5 (this rank's) restored as they were at step 160)" in out, out  # rank 0's 3, rank 1's 2
    same_ends(whole, halves)


@pytest.mark.slow
def test_a_rank_killed_then_torchrun_restarting_the_group_with_resume_auto_is_the_run_never_killed(tmp_path) -> None:
    """``torchrun --max-restarts 1``: rank 1 SIGKILLed after the first checkpoint, every rank ends, torchrun starts the
    group again, whose ``--resume auto`` continues from the last checkpoint to the numbers of the run never killed."""
    whole, killed = tmp_path / "whole", tmp_path / "killed"
    args = [*RUN, "--total_timesteps", "800", "--save_freq", "80", "--n_epochs", "4"]
    code, out, err = run_cli([*args, "--run_dir", str(whole)])
    assert code == 0, err
    run = Torchrun([*args, "--resume", "auto", "--run_dir", str(killed)], launcher=("--max-restarts", "1"))
    deadline = time.monotonic() + 120
    while not list((killed / "checkpoints").glob("checkpoint_*.pt")) and time.monotonic() < deadline:
        time.sleep(0.05)
    pid = run.rank_pid(1)
    assert pid is not None and list((killed / "checkpoints").glob("checkpoint_*.pt")), "no checkpoint within 120 s"
    os.kill(pid, signal.SIGKILL)
    code, out, err = run.finish(timeout=240)
    assert code == 0, err
    assert run.left() == []
    assert "resumed from" in out and "(this rank's) restored as they were at step" in out, out
    same_ends(whole, killed)
