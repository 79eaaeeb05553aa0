"""A run killed at any moment and resumed is the run that was never stopped (docs/experiments.md, "Stopping and resuming").

One run goes uninterrupted; the same run is SIGKILLed at random moments (during a rollout, an update, a checkpoint
write: wherever the clock falls) and started again each time with ``--resume auto``, some starts with another layout
of its envs; then it finishes. Its last checkpoint (weights, Adam, the normaliser, the counters, the RNG streams, every
env's state), every progress.csv value but the wall times (time/*) and every monitor.csv episode but its wall time
(``t``) equal the uninterrupted run's. The kill times' seed is printed (``KILL_SEED=<seed>`` replays them).

Also: SIGTERM in the middle of a rollout and in the middle of an update writes the state from before that rollout
within 5 s, and the run resumed from it is, again, the uninterrupted run.
"""

from __future__ import annotations

import csv
import os
import random
import signal
import subprocess
import sys
import time

import pytest

from tests.conftest import ROOT
from tests.envs.test_env_state import same
from tests.faults.lines import Lines
from tests.test_checkpoint import assert_same, without_config
from ppo_dict.core.files import load_model_state
from ppo_dict.run.checkpoint import list_checkpoints
from ppo_dict.run.env_states import read_saved
from tests.cli_here import run_here
from tests.test_main_ppo import run_cli, summary_line

CARTPOLE = [
    "--env",
    "gym_CartPole-v1",
    "--n_envs",
    "2",
    "--n_steps",
    "64",
    "--batch_size",
    "64",
    "--n_epochs",
    "4",
    "--seed",
    "1",
    "--verbose",
    "0",
    "--plot",
    "False",
]
PENDULUM = [
    "--env",
    "gym_Pendulum-v1",
    "--n_envs",
    "4",
    "--n_steps",
    "64",
    "--batch_size",
    "64",
    "--n_epochs",
    "4",
    "--seed",
    "2",
    "--normalize",
    "True",
    "--verbose",
    "0",
    "--plot",
    "False",
]


def rows(path, drop: tuple[str, ...] = ()) -> list[dict]:
    """A CSV's rows without the wall-time columns (``time/*`` and ``drop``) and the monitor's JSON header line."""
    lines = [line for line in path.read_text().splitlines() if not line.startswith("#")]
    return [{k: v for k, v in row.items() if k not in drop and not k.startswith("time/")} for row in csv.DictReader(lines)]


def assert_same_run(a, b, total: int) -> None:
    """``b`` ended where ``a`` ended: its last checkpoint, its progress and its episodes."""
    a_end, b_end = (load_model_state(list_checkpoints(str(d / "checkpoints"))[-1]) for d in (a, b))
    assert a_end["num_timesteps"] == b_end["num_timesteps"] == total
    a_envs, b_envs = (without_wall_times(read_saved(end.pop("envs"), "envs")) for end in (a_end, b_end))
    assert all(e["env"] is not None for e in b_envs)
    assert_same(without_config(b_end), without_config(a_end))
    assert same(b_envs, a_envs)
    assert rows(b / "progress.csv") == rows(a / "progress.csv")
    assert rows(b / "monitor.csv", ("t",)) == rows(a / "monitor.csv", ("t",))


def without_wall_times(value):
    """Env states without the episode monitor's ``t_start`` (the wall clock when it was built: ``info["episode"]["t"]``)."""
    if isinstance(value, dict):
        return {k: without_wall_times(v) for k, v in value.items() if k != "t_start"}
    if isinstance(value, (list, tuple)):
        return type(value)(without_wall_times(v) for v in value)
    return value


def start(*args: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": ROOT, "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen(
        [sys.executable, "-m", "ppo_dict.main_ppo", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env=env,
        start_new_session=True,
    )


def killed_and_resumed(root, flags: list[str], total: int, save_freq: int, kills: int, layouts: list[list[str]]) -> None:
    """The uninterrupted run in ``root/a``; in ``root/b`` the same run killed ``kills`` times at random moments and
    resumed with ``--resume auto`` (the k-th start with ``layouts[k % len(layouts)]``), then finished."""
    seed = int(os.environ.get("KILL_SEED", time.time_ns() % 2**31))
    print(f"kill times' seed: KILL_SEED={seed}")
    draw = random.Random(seed)
    a, b = root / "a", root / "b"
    common = [*flags, "--total_timesteps", str(total), "--save_freq", str(save_freq), "--keep_checkpoints", "2"]
    started = time.monotonic()
    proc = run_cli(*common, *layouts[0], "--run_dir", str(a), timeout=600)
    assert proc.returncode == 0, proc.stderr
    whole = time.monotonic() - started
    for k in range(kills):
        proc = start(*common, *layouts[k % len(layouts)], "--resume", "auto", "--run_dir", str(b))
        try:
            time.sleep(draw.uniform(0.3, 1.0) * whole)
        finally:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate(timeout=60)
    for k in range(kills, kills + 10):  # a last start, or a few if a kill came so early that a start saved nothing
        proc = run_here(*common, *layouts[k % len(layouts)], "--resume", "auto", "--run_dir", str(b))
        assert proc.returncode == 0, proc.stderr
        if summary_line(proc.stdout)["env_steps"] == total:
            break
    assert_same_run(a, b, total)


@pytest.mark.slow
def test_cartpole_killed_three_times_at_random_moments_is_the_uninterrupted_run(tmp_path) -> None:
    killed_and_resumed(tmp_path, CARTPOLE, 2048, 128, 3, [["--num_workers", "0"], ["--num_workers", "2"]])


def test_pendulum_with_vecnormalize_on_workers_killed_at_random_moments_is_the_uninterrupted_run(tmp_path) -> None:
    killed_and_resumed(
        tmp_path, PENDULUM, 1024, 128, 2, [["--num_workers", "2"], ["--num_workers", "1"], ["--num_workers", "0"]]
    )


@pytest.mark.slow
@pytest.mark.parametrize(
    "flags",
    [
        [
            "--env",
            "gym_Reacher-v5",
            "--n_envs",
            "8",
            "--n_steps",
            "64",
            "--batch_size",
            "128",
            "--seed",
            "3",
            "--normalize",
            "True",
        ],
        ["--env", "gym_Hopper-v5", "--n_envs", "4", "--n_steps", "128", "--batch_size", "128", "--seed", "4"],
        ["--env", "gym_Ant-v5", "--n_envs", "4", "--n_steps", "128", "--batch_size", "128", "--seed", "5"],
        [
            "--env",
            "gym_Reacher-v5",
            "--pixel_obs_wrapper",
            "True",
            "--image_size",
            "36",
            "--model",
            "cnn",
            "--n_envs",
            "4",
            "--n_steps",
            "32",
            "--batch_size",
            "64",
            "--seed",
            "6",
        ],
        [
            "--env",
            "gym_PongNoFrameskip-v4",
            "--atari_wrapper",
            "True",
            "--frame_stack",
            "4",
            "--model",
            "cnn",
            "--n_envs",
            "4",
            "--n_steps",
            "32",
            "--batch_size",
            "64",
            "--seed",
            "7",
        ],
        [
            "--env",
            "gym_CartPole-v1",
            "--model",
            "mlp_lstm",
            "--n_envs",
            "4",
            "--n_steps",
            "32",
            "--batch_size",
            "64",
            "--seed",
            "8",
        ],
        [
            "--env",
            "PPODictMaskedJump-v0",
            "--gym_packages",
            "ppo_dict.envs.masked",
            "--action_masks",
            "True",
            "--n_envs",
            "4",
            "--n_steps",
            "32",
            "--batch_size",
            "64",
            "--seed",
            "9",
        ],
    ],
    ids=["reacher-vecnormalize", "hopper", "ant", "pixels", "pong", "recurrent", "maskable"],
)
def test_envs_killed_at_random_moments_are_the_uninterrupted_run(flags, tmp_path) -> None:
    killed_and_resumed(
        tmp_path,
        [*flags, "--n_epochs", "3", "--verbose", "0", "--plot", "False"],
        1024,
        128,
        3,
        [["--num_workers", "2"], ["--num_workers", "1"]],
    )


SIGNALLED = """
import sys, time
import ppo_dict.algo.ppo as ppo_module, ppo_dict.main_ppo as mp, ppo_dict.vec.shm_pool as sp
MODE = sys.argv.pop(1)
seen = []
def pause(t):
    if MODE == "rollout" and t == 5:
        seen.append(t)
        if len(seen) == 3:  # rollout step 5 of the third rollout (256 to 384 steps): envs stepped since it began
            print("IN ROLLOUT", flush=True)
            time.sleep(600)
work, step, train = sp.ShmEnvPool.work, sp.ShmEnvPool.step, ppo_module.PPO.train
def slow_work(self, header, idle=None, rollout=True):
    if header[0] & 1:
        pause(header[1])
    return work(self, header, idle, rollout)
def slow_step(self, t, rollout=True, idle=None):
    if not self.handovers:
        pause(t)
    return step(self, t, rollout, idle)
def slow_train(self, progress_remaining):
    if MODE == "update" and self.num_timesteps == 384:
        self.phase = "update"
        print("IN UPDATE", flush=True)
        time.sleep(600)  # a long update: the signal comes in the middle of it
    return train(self, progress_remaining)
sp.ShmEnvPool.work, sp.ShmEnvPool.step, ppo_module.PPO.train = slow_work, slow_step, slow_train
sys.exit(mp.main(sys.argv[1:]))
"""


SIGNALLED_RUN = [*CARTPOLE, "--num_workers", "2", "--total_timesteps", "512", "--save_freq", "100000"]


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    """The run the signalled ones are compared with, never stopped."""
    run_dir = tmp_path_factory.mktemp("uninterrupted") / "a"
    proc = run_here(*SIGNALLED_RUN, "--run_dir", str(run_dir))
    assert proc.returncode == 0, proc.stderr
    return run_dir


@pytest.mark.parametrize("mode", ["rollout", "update"])
def test_sigterm_in_a_rollout_or_an_update_saves_the_state_from_before_it_within_5_s(mode, uninterrupted, tmp_path) -> None:
    common = SIGNALLED_RUN
    run_dir = tmp_path / "b"
    env = {**os.environ, "PYTHONPATH": ROOT, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-c", SIGNALLED, mode, *common, "--run_dir", str(run_dir)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env=env,
    )
    try:
        Lines(proc).wait_for(f"IN {mode.upper()}", timeout=120)
        time.sleep(0.5)
        signalled = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        checkpoint = run_dir / "checkpoints" / "checkpoint_000000000256.pt"
        while not checkpoint.exists() and time.monotonic() - signalled < 30:
            time.sleep(0.02)
        took = time.monotonic() - signalled
        proc.wait(timeout=60)
        err = proc.stderr.read()
    finally:
        proc.kill()
    assert proc.returncode == 143, err
    assert checkpoint.exists() and took < 5, (took, err)
    assert f"stopped in the middle of {'a rollout' if mode == 'rollout' else 'an update'}" in err and "Traceback" not in err
    done = run_here("--resume", str(run_dir), "--total_timesteps", "512")
    assert done.returncode == 0, done.stderr
    assert "2 envs restored as they were at step 256" in done.stdout
    assert_same_run(uninterrupted, run_dir, 512)


@pytest.mark.slow
def test_double_buffered_rollouts_killed_at_random_moments_are_the_uninterrupted_run(tmp_path) -> None:
    """Each half snapshots its envs at its own step 0 (the second half after the first): a stop between them saves
    the second half as it is, the first from its snapshot. Double-buffered numbers are the layout's, so one layout."""
    flags = [*PENDULUM, "--double_buffer", "True", "--n_epochs", "2"]
    killed_and_resumed(tmp_path, flags, 2048, 256, 3, [["--num_workers", "2"]])
