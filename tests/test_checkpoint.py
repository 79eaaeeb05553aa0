"""Checkpoints and resume: bit-exact state, what a resumed run matches, corrupt files, faults.

Fault cases (docs/faults.md 22-24, 12) run the CLI in a subprocess with a hard timeout; the other runs call its entry
point in this process (tests/cli_here.py).
"""

import os
import shutil
import signal
import subprocess
import sys
import time

import pytest
import torch

from ppo_dict.algo.ppo import PPO
from ppo_dict.core.config import Config
from ppo_dict.core.files import load_model_state
from ppo_dict.run.checkpoint import CheckpointManager, Resumed, list_checkpoints, model_state, restore
from ppo_dict.run.env_states import read_saved, resume_envs
from ppo_dict.vec import env_spec, probe_env
from ppo_dict.vec.in_process import InProcessEnvPool
from tests.cli_here import run_here
from tests.conftest import ROOT
from tests.faults.lines import Lines
from tests.test_main_ppo import summary_line

SMALL = [
    "--env",
    "gym_CartPole-v1",
    "--num_workers",
    "0",
    "--n_envs",
    "2",
    "--n_steps",
    "128",
    "--batch_size",
    "64",
    "--n_epochs",
    "2",
    "--seed",
    "0",
    "--normalize",
    "True",
    "--verbose",
    "0",
    "--plot",
    "False",
]


def assert_same(a, b, where: str = "") -> None:
    """Exact equality of nested checkpoint values (tensors with torch.equal)."""
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b), where
    elif isinstance(a, dict):
        assert list(a) == list(b), f"{where}: keys {list(a)} != {list(b)}"
        for key in a:
            assert_same(a[key], b[key], f"{where}/{key}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same(x, y, f"{where}[{i}]")
    else:
        assert a == b, f"{where}: {a!r} != {b!r}"


def without_config(state: dict) -> dict:
    return {k: v for k, v in state.items() if k != "config"}


def test_restored_state_is_bit_identical_to_the_saved_one(tmp_path) -> None:
    cfg = Config(
        env="gym_CartPole-v1",
        n_envs=2,
        num_workers=0,
        n_steps=64,
        batch_size=64,
        n_epochs=2,
        total_timesteps=256,
        seed=3,
        verbose=0,
        normalize=True,
    )
    model = PPO(cfg, InProcessEnvPool(probe_env(env_spec(cfg)), 2, 64))
    model.learn()
    path = CheckpointManager(str(tmp_path), keep=2).save(model)
    saved = torch.load(path, map_location="cpu", weights_only=True)  # weights only: no code unpickled
    assert saved["num_timesteps"] == 256 and saved["iteration"] == 2 and saved["n_updates"] == 4
    assert len(saved["ep_r"]) == len(model.ep_info_buffer) > 0
    torch.manual_seed(123)  # move every stream, so that the restore has something to undo
    fresh = PPO(cfg, InProcessEnvPool(probe_env(env_spec(cfg)), 2, 64))
    restore(fresh, load_model_state(path), path)
    assert resume_envs(fresh, load_model_state(path), path, trusted=True) == "2 envs restored as they were at step 256"
    assert_same(model_state(fresh), saved)  # params, Adam, normaliser, counters, ep infos, RNG states, config, envs
    model.pool.close()
    fresh.pool.close()


def interrupted_runs(root, flags: list[str], total: int, save_freq: int):
    """A: ``total`` steps uninterrupted (a checkpoint every ``save_freq``). B: half of them, then resumed to ``total``;
    C: B resumed again. ``root/b_at_<half>`` keeps B as it was before its resume."""
    half = total // 2
    a, b, c = root / "a", root / "b", root / "c"
    proc = run_here(
        *flags, "--total_timesteps", str(total), "--save_freq", str(save_freq), "--keep_checkpoints", "5", "--run_dir", str(a)
    )
    assert proc.returncode == 0, proc.stderr
    proc = run_here(*flags, "--total_timesteps", str(half), "--run_dir", str(b))
    assert proc.returncode == 0, proc.stderr
    shutil.copytree(b, c)
    shutil.copytree(b, root / f"b_at_{half}")
    for run_dir in (b, c):
        proc = run_here(
            "--resume", str(run_dir), "--total_timesteps", str(total), "--save_freq", str(save_freq), "--keep_checkpoints", "2"
        )
        assert proc.returncode == 0, proc.stderr
        assert f"resumed from {run_dir}/checkpoints/checkpoint_{half:012d}.pt at {half} steps" in proc.stdout
        assert summary_line(proc.stdout)["env_steps"] == total
    return root


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """A: 1024 steps uninterrupted (checkpoint every 256). B: 512 steps, then resumed to 1024; C: B resumed again."""
    return interrupted_runs(tmp_path_factory.mktemp("runs"), SMALL, 1024, 256)


def csv_rows(path, drop: tuple[str, ...]) -> list[dict]:
    """A run's CSV as rows of dicts, without the columns ``drop`` (wall times) and the monitor's JSON header line."""
    import csv

    lines = [line for line in path.read_text().splitlines() if not line.startswith("#")]
    return [{k: v for k, v in row.items() if k not in drop and not k.startswith("time/")} for row in csv.DictReader(lines)]


def test_a_resumed_run_is_the_uninterrupted_run(runs) -> None:
    """The checkpoints hold the envs (each env's state and the rows the next rollout starts from): a run stopped at 512
    steps and resumed to 1024 ends where the run never stopped ends, in every saved value, every progress.csv value
    (time/* aside) and every monitor.csv episode (its wall time aside)."""
    a = {os.path.basename(p): load_model_state(p) for p in list_checkpoints(str(runs / "a" / "checkpoints"))}
    assert sorted(a) == [f"checkpoint_{s:012d}.pt" for s in (256, 512, 768, 1024)]
    b512 = load_model_state(str(runs / "b_at_512" / "checkpoints" / "checkpoint_000000000512.pt"))
    # What B saved at 512 steps is what the uninterrupted run had at 512 steps, bit for bit, the envs included.
    envs = read_saved(b512["envs"], "envs")
    assert len(envs) == 2 and all(e["env"] is not None for e in envs)
    assert_same(without_config(b512), without_config(a["checkpoint_000000000512.pt"]))
    b_files = [os.path.basename(p) for p in list_checkpoints(str(runs / "b" / "checkpoints"))]
    assert b_files == ["checkpoint_000000000768.pt", "checkpoint_000000001024.pt"]  # keep_checkpoints=2
    b_end = load_model_state(str(runs / "b" / "checkpoints" / "checkpoint_000000001024.pt"))
    c_end = load_model_state(str(runs / "c" / "checkpoints" / "checkpoint_000000001024.pt"))
    assert_same(without_config(b_end), without_config(a["checkpoint_000000001024.pt"]))  # weights, Adam, envs, RNG...
    assert_same(without_config(c_end), without_config(b_end))
    for run in ("b", "c"):
        assert csv_rows(runs / run / "progress.csv", ()) == csv_rows(runs / "a" / "progress.csv", ())
        assert csv_rows(runs / run / "monitor.csv", ("t",)) == csv_rows(runs / "a" / "monitor.csv", ("t",))
    steps = [row["time/total_timesteps"] for row in __import__("csv").DictReader((runs / "b" / "progress.csv").open())]
    assert steps == ["256", "512", "768", "1024"]


def test_corrupt_newest_checkpoint_falls_back_loudly(runs, tmp_path) -> None:
    run_dir = tmp_path / "a"
    shutil.copytree(runs / "a", run_dir)
    newest = run_dir / "checkpoints" / "checkpoint_000000001024.pt"
    newest.write_bytes(newest.read_bytes()[:1000])  # truncated
    proc = run_here("--resume", str(run_dir), "--total_timesteps", "1024")
    assert proc.returncode == 0, proc.stderr
    assert f"warning: cannot load {newest}: RuntimeError" in proc.stderr
    assert f"warning: cannot load {newest}: RuntimeError" in proc.stderr and "; trying the previous checkpoint" in proc.stderr
    # Renamed once the run owns the directory (a refused run renames nothing: test_run_dir.py).
    assert (
        "renamed checkpoint_000000001024.pt to checkpoint_000000001024.pt.corrupt: "
        "it cannot be loaded (kept for inspection, out of the rotation)"
    ) in proc.stderr
    assert "at 768 steps" in proc.stdout
    assert (run_dir / "checkpoints" / "checkpoint_000000001024.pt.corrupt").exists()


def test_no_loadable_checkpoint_is_an_error_not_a_fresh_start(runs, tmp_path) -> None:
    run_dir = tmp_path / "b"
    shutil.copytree(runs / "b", run_dir)
    for path in list_checkpoints(str(run_dir / "checkpoints")):
        with open(path, "r+b") as f:
            f.truncate(10)
    proc = run_here("--resume", str(run_dir))
    assert (
        proc.returncode == 2
        and (
            "error: 1 invalid setting(s):\n"
            f"  - resume='{run_dir}': no loadable checkpoint in {run_dir}/checkpoints (cannot "
            "load "
        )
        in proc.stderr
    )
    assert proc.stderr.count("cannot load") == 4  # two warnings, then the error listing both
    named = run_dir / "checkpoints" / "checkpoint_000000000768.pt"  # not renamed: the run was refused
    proc = run_here("--resume", str(named))
    assert proc.returncode == 2 and f"  - resume='{named}': cannot load {named}: RuntimeError" in proc.stderr


def test_checkpoint_for_other_spaces_is_refused(runs) -> None:
    ckpt = runs / "b_at_512" / "checkpoints" / "checkpoint_000000000512.pt"
    proc = run_here("--resume", str(ckpt), "--env", "gym_Acrobot-v1", "--run_dir", str(runs / "acrobot"))
    assert proc.returncode == 2
    assert f"error: {ckpt}: Observation spaces do not match: Box(" in proc.stderr
    assert "(4,), float32) != Box(" in proc.stderr and "(6,), float32) (env gym_Acrobot-v1)" in proc.stderr


# ------------------------------------------------------------------------------------ faults

SLOW_WRITER = """
import sys, time, io, torch
from ppo_dict.core.files import atomic_write
import ppo_dict.run.checkpoint as ck, ppo_dict.main_ppo as mp, ppo_dict.algo.ppo as ppo_module
from ppo_dict.run.checkpoint import model_state
signalled = []
handler = mp.StopFlag.__call__
def record(self, signum, frame):
    signalled.append(signum)
    handler(self, signum, frame)
mp.StopFlag.__call__ = record
updates = []
train = ppo_module.PPO.train
def train_after_signal(self, progress_remaining):
    updates.append(self.num_timesteps)
    if MODE == "signal" and len(updates) == 2:  # a point the test knows: it signals once it reads this
        print("UPDATING", self.num_timesteps, flush=True)
        while not signalled:
            time.sleep(0.01)
    return train(self, progress_remaining)
ppo_module.PPO.train = train_after_signal
writes = []
def slow_write(model, path):
    writes.append(path)
    if (MODE == "second" and len(writes) == 2) or (MODE == "signal" and signalled):
        def write(f):
            buf = io.BytesIO(); torch.save(model_state(model), buf); data = buf.getvalue()
            f.write(data[: len(data) // 2]); f.flush()
            print("WRITING", path, flush=True)
            time.sleep(600)
        atomic_write(path, write)
        return path
    return ck_write(model, path)
ck_write = ck.write_model_file
ck.write_model_file = slow_write
sys.exit(mp.main(sys.argv[1:]))
"""


def start_slow(mode: str, run_dir, *flags: str) -> tuple[subprocess.Popen, Lines]:
    env = {**os.environ, "PYTHONPATH": ROOT, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-c", f"MODE = {mode!r}\n" + SLOW_WRITER, *SMALL, "--run_dir", str(run_dir), *flags],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env=env,
    )
    return proc, Lines(proc)


def test_sigkill_during_checkpoint_write_keeps_the_previous_one(tmp_path) -> None:
    run_dir = tmp_path / "run"
    proc, lines = start_slow("second", run_dir, "--total_timesteps", "1024", "--save_freq", "256")
    try:
        lines.wait_for("WRITING", timeout=90)
        first = run_dir / "checkpoints" / "checkpoint_000000000256.pt"
        before = first.read_bytes()
        proc.kill()
        proc.wait(timeout=10)
    finally:
        proc.kill()
    assert proc.returncode == -signal.SIGKILL
    names = sorted(os.listdir(run_dir / "checkpoints"), key=lambda n: n.lstrip("."))
    assert names[0] == "checkpoint_000000000256.pt" and len(names) == 2  # no file with the final name for 512
    assert names[1].startswith(".checkpoint_000000000512.pt.") and names[1].endswith(".tmp")
    assert first.read_bytes() == before and load_model_state(str(first))["num_timesteps"] == 256
    # The next start ignores and removes the partial file, and resumes from the intact checkpoint.
    done = run_here("--resume", str(run_dir), "--total_timesteps", "512")
    assert done.returncode == 0, done.stderr
    assert f"removed {run_dir / 'checkpoints' / names[1]}: a partial checkpoint from an interrupted write" in done.stderr
    assert "at 256 steps" in done.stdout and summary_line(done.stdout)["env_steps"] == 512
    assert sorted(os.listdir(run_dir / "checkpoints")) == ["checkpoint_000000000256.pt", "checkpoint_000000000512.pt"]


def test_second_ctrl_c_during_the_final_save_writes_nothing(tmp_path) -> None:
    """The first Ctrl-C reaches the run while it waits at a known point (just before its second update, with no
    periodic checkpoint yet), so the save it triggers (the state from before that rollout: 256 steps) is the one that
    blocks; the second Ctrl-C comes once that save has half-written its temp file."""
    run_dir = tmp_path / "run"
    proc, lines = start_slow("signal", run_dir, "--total_timesteps", "100000000", "--save_freq", "100000")
    try:
        lines.wait_for("UPDATING 512", timeout=120)
        proc.send_signal(signal.SIGINT)
        lines.wait_for("WRITING", timeout=120)
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=60)
        err = proc.stderr.read()
    finally:
        proc.kill()
    assert proc.returncode == 130, err
    assert "interrupted twice: stopped without saving" in err and "Traceback" not in err
    assert os.listdir(run_dir / "checkpoints") == []  # the partial file was removed, nothing else written


def test_resume_auto_starts_fresh_then_resumes_what_the_first_attempt_saved(tmp_path) -> None:
    """A requeued job runs the same command each time: the first start is fresh, later ones resume."""
    run_dir = tmp_path / "job"
    command = (
        "--env",
        "gym_CartPole-v1",
        "--num_workers",
        "0",
        "--n_envs",
        "2",
        "--n_steps",
        "64",
        "--batch_size",
        "64",
        "--n_epochs",
        "1",
        "--seed",
        "0",
        "--plot",
        "False",
        "--verbose",
        "0",
        "--resume",
        "auto",
        "--run_dir",
        str(run_dir),
    )
    first = run_here(*command, "--total_timesteps", "256")
    assert first.returncode == 0, first.stderr
    assert f"--resume auto: no checkpoint in {run_dir}/checkpoints: starting fresh" in first.stdout
    assert summary_line(first.stdout)["env_steps"] == 256
    second = run_here(*command, "--total_timesteps", "512")
    assert second.returncode == 0, second.stderr
    assert f"resumed from {run_dir}/checkpoints/checkpoint_000000000256.pt at 256 steps" in second.stdout
    assert summary_line(second.stdout)["env_steps"] == 512
    # Checkpoints that all failed to load (renamed *.corrupt) are not a reason to start over.
    for path in list_checkpoints(str(run_dir / "checkpoints")):
        os.replace(path, path + ".corrupt")
    third = run_here(*command, "--total_timesteps", "768")
    assert third.returncode == 2 and "holds only unreadable checkpoints (checkpoint_000000000256.pt.corrupt" in third.stderr
    assert third.stdout == ""
    no_dir = run_here("--env", "gym_CartPole-v1", "--resume", "auto")
    assert no_dir.returncode == 2 and "resume='auto': needs --run_dir" in no_dir.stderr


# ---------------------------------------------------------------------- a checkpoint's form, checked whole (issue 50)


@pytest.fixture(scope="module")
def real_checkpoint(tmp_path_factory) -> str:
    """A checkpoint of a short CartPole run with a normaliser, as a run writes it."""
    cfg = Config(
        env="gym_CartPole-v1",
        n_envs=1,
        num_workers=0,
        n_steps=32,
        batch_size=32,
        n_epochs=1,
        total_timesteps=32,
        seed=1,
        verbose=0,
        normalize=True,
    )
    model = PPO(cfg, InProcessEnvPool(probe_env(env_spec(cfg)), 1, 32))
    model.learn()
    path = CheckpointManager(str(tmp_path_factory.mktemp("real") / "run" / "checkpoints"), keep=1).save(model)
    model.pool.close()
    return path


def set_in(state: dict, path: tuple, value) -> None:
    for key in path[:-1]:
        state = state[key]
    if value is KeyError:
        del state[path[-1]]
    else:
        state[path[-1]] = value


#: (what is wrong, where in the checkpoint, the value put there (KeyError: the key removed), whether enjoy and the
#: ONNX export read it too, a part of the refusal)
MALFORMED = [
    ("no config", ("config",), KeyError, True, "no 'config'"),
    ("config of the wrong type", ("config",), [1, 2], True, "'config': a list, not a dict of settings"),
    ("a setting of the wrong type", ("config", "n_steps"), "abc", True, "n_steps='abc'"),
    ("a setting out of its range", ("config", "n_steps"), -5, True, "n_steps=-5"),
    ("a step count of 400 digits", ("num_timesteps",), 10**400, True, "'num_timesteps'=1000000000000000000000"),
    (
        "weights that are not finite",
        ("policy", "value_net.bias"),
        torch.tensor([float("nan")]),
        True,
        "'policy': not a dict of finite tensors",
    ),
    ("a normaliser count that is not finite", ("normalizer", "ret_rms", "count"), float("nan"), True, "'normalizer' ret_rms"),
    ("no RNG states", ("rng",), KeyError, False, "no 'rng'"),
    (
        "numpy's RNG of another form",
        ("rng", "numpy", "keys"),
        torch.zeros(10, dtype=torch.int64),
        False,
        "'rng' numpy: not numpy's MT19937",
    ),
    (
        "episode buffers of two lengths",
        ("ep_l",),
        torch.zeros(1000, dtype=torch.int64),
        False,
        "'ep_r', 'ep_l': not finite 1-d tensors",
    ),
    ("an optimizer that is a list", ("optimizer",), [1], False, "'optimizer': not an optimizer's state"),
    ("an iteration count that is negative", ("iteration",), -1, False, "'iteration'=-1: not a whole number"),
]


@pytest.mark.parametrize("case", MALFORMED, ids=[case[0] for case in MALFORMED])
def test_a_malformed_checkpoint_is_one_clean_refusal_for_resume_enjoy_and_export(
    real_checkpoint, tmp_path, capsys, case
) -> None:
    """A checkpoint with missing keys, a config of the wrong type or a bad value was a traceback for --resume
    --dry_run, enjoy and export_onnx (9 of 9): each is now one message, exit 2, and nothing is written."""
    from ppo_dict import enjoy, export_onnx, main_ppo

    _, where, value, whole_model, text = case
    state = torch.load(real_checkpoint, weights_only=True)
    set_in(state, where, value)
    bad = tmp_path / "checkpoint_000000000032.pt"
    torch.save(state, bad)
    capsys.readouterr()
    commands = [("resume", lambda: main_ppo.main(["--resume", str(bad), "--dry_run"]))]
    if whole_model:
        commands += [
            ("enjoy", lambda: enjoy.main([str(tmp_path), "--model", str(bad), "--episodes", "1"])),
            ("export_onnx", lambda: export_onnx.main([str(bad), "--out", str(tmp_path / "policy.onnx"), "--check", "0"])),
        ]
    for name, command in commands:
        code = command()
        out, err = capsys.readouterr()
        assert code == 2 and err.startswith("error: ") and "Traceback" not in out + err, (name, err)
        assert text in err, (name, err)
    assert sorted(os.listdir(tmp_path)) == ["checkpoint_000000000032.pt"]


def test_a_checkpoint_is_due_every_save_freq_steps_or_every_save_every_minutes() -> None:
    from ppo_dict.run.checkpoint import SaveDue

    by_steps = SaveDue(256, 0.0, 0)
    # the same step: the same answer
    assert [by_steps(n) for n in (128, 256, 256, 384, 512)] == [False, True, True, False, True]
    by_time = SaveDue(0, 0.5 / 60, 0)  # half a second
    assert by_time(128) is False
    time.sleep(0.6)
    assert by_time(256) is True and by_time(384) is False  # the clock starts again at each checkpoint
    asked = []
    over_ranks = SaveDue(0, 0.5 / 60, 0, agree=lambda late: asked.append(late) or True)  # rank 0 said "due"
    assert over_ranks(128) is True and asked == [False]


def test_dry_run_says_what_a_resume_does_with_the_envs() -> None:
    restored = run_here("--env", "gym_CartPole-v1", "--dry_run")
    assert "resume: checkpoints hold every env's state; a resumed run continues the episodes in flight" in restored.stdout
    restarted = run_here("--env", "gym_LunarLander-v3", "--dry_run")
    assert (
        "resume: the envs restart from a reset on a resume (episodes in flight are cut): their state cannot be saved "
        "(LunarLander.world is a Box2D.Box2D.b2World, not plain data)"
    ) in restarted.stdout


def test_a_resumed_run_continues_in_its_checkpoints_run_directory_or_a_folder_inside_it_only(tmp_path) -> None:
    """What decides whether a checkpoint's env bytes are the run's own (ALE's are only given back then): the run
    directory is the checkpoint's home, or inside it; a sibling whose name starts with the home's is not."""
    home = tmp_path / "runs" / "a"
    (home / "branches" / "from_8").mkdir(parents=True)
    (tmp_path / "runs" / "a2").mkdir()
    (tmp_path / "into_a").symlink_to(home)
    resumed = Resumed(str(home / "checkpoints" / "checkpoint_8.pt"), {}, 8, str(home))
    assert resumed.continues_in(str(home))
    assert resumed.continues_in(str(home / "branches" / "from_8"))
    assert resumed.continues_in(str(tmp_path / "into_a"))  # the same folder through a link
    assert not resumed.continues_in(str(tmp_path / "runs" / "a2"))
    assert not resumed.continues_in(str(tmp_path / "runs"))
    assert not Resumed(resumed.file, {}, 8, None).continues_in(str(home))
