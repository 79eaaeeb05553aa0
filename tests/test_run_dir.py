"""A run directory belongs to one run (``ppo_dict.run.run_dir``): a refused run leaves it byte for byte
as it was, a second run on it is refused naming the first one's pid, an earlier run is never
overwritten without ``--overwrite True``, and resuming from an older checkpoint branches, deleting
nothing. Every case runs the real command line on tiny CartPole runs: in a subprocess where another process, a lock or a
mount is the point, else its entry point in this process (tests/cli_here.py).
"""

import hashlib
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import time

import pytest

from ppo_dict import main_ppo
from ppo_dict.core.files import load_model_state
from ppo_dict.run.checkpoint import list_checkpoints
from ppo_dict.run.run_dir import LOCK_FILE, lock, lock_holder
from tests.cli_here import run_here
from tests.conftest import ROOT
from tests.test_bad_input import save_cartpole_model
from tests.test_main_ppo import run_cli, summary_line

TINY = [
    "--env",
    "gym_CartPole-v1",
    "--num_workers",
    "0",
    "--n_envs",
    "2",
    "--n_steps",
    "32",
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
    "--progress",
    "none",
]


def directory_bytes(path) -> dict[str, str]:
    """``{relative path: sha256 of its bytes, or 'dir'}`` for everything under ``path``."""
    found = {}
    for root, dirs, files in os.walk(path):
        for name in dirs:
            found[os.path.relpath(os.path.join(root, name), path)] = "dir"
        for name in files:
            with open(os.path.join(root, name), "rb") as f:
                found[os.path.relpath(os.path.join(root, name), path)] = hashlib.sha256(f.read()).hexdigest()
    return found


def steps_of(run_dir) -> list[int]:
    return [int(line.split(",")[0]) for line in (run_dir / "progress.csv").read_text().splitlines()[1:]]


@pytest.fixture(scope="module")
def earlier_run(tmp_path_factory):
    """A finished run of 256 steps, a checkpoint every 64 (all four kept)."""
    run_dir = tmp_path_factory.mktemp("earlier") / "run"
    proc = run_here(
        *TINY, "--total_timesteps", "256", "--save_freq", "64", "--keep_checkpoints", "10", "--run_dir", str(run_dir)
    )
    assert proc.returncode == 0, proc.stderr
    assert steps_of(run_dir) == [64, 128, 192, 256]
    return run_dir


@pytest.fixture
def run_dir(earlier_run, tmp_path):
    copy = tmp_path / "run"
    shutil.copytree(earlier_run, copy)
    return copy


def refused_here(capsys, *argv: str) -> subprocess.CompletedProcess:
    """The command line run in this process (refused at its check, it starts nothing), as a finished process."""
    code = main_ppo.main(list(argv))
    out, err = capsys.readouterr()
    return subprocess.CompletedProcess(argv, code, out, err)


def assert_refused(proc: subprocess.CompletedProcess, text: str, said: str = "") -> None:
    """Exit 2, ``text`` in the one error, no traceback, and nothing on stdout but ``said``."""
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "\nerror: " in "\n" + proc.stderr and text in proc.stderr, proc.stderr  # (after a corrupt checkpoint's warnings)
    assert "Traceback" not in proc.stdout + proc.stderr and proc.stdout == said


def test_a_new_run_into_an_earlier_run_is_refused_and_changes_nothing(capsys, run_dir) -> None:
    before = directory_bytes(run_dir)
    for dry_run in ((), ("--dry_run",)):
        proc = refused_here(capsys, *TINY, "--total_timesteps", "128", "--run_dir", str(run_dir), *dry_run)
        assert_refused(
            proc,
            f"  - run_dir='{run_dir}': holds an earlier run (checkpoints, config.json, monitor.csv, "
            f"progress.csv); pass --resume {run_dir} to continue it, --overwrite True to replace it, "
            "or choose another --run_dir",
        )
    assert directory_bytes(run_dir) == before


def test_a_run_refused_after_its_model_is_built_writes_nothing(run_dir) -> None:
    """The checkpoint does not fit the env: found when it is restored, before the run owns its directory."""
    before = directory_bytes(run_dir)
    proc = run_here("--resume", str(run_dir), "--env", "gym_Acrobot-v1", "--total_timesteps", "512")
    assert proc.returncode == 2 and "Observation spaces do not match" in proc.stderr and "Traceback" not in proc.stderr
    assert directory_bytes(run_dir) == before  # progress.csv and config.json as they were (they were rewritten before)


def test_a_refused_resume_renames_no_corrupt_checkpoint(run_dir) -> None:
    for path in list_checkpoints(str(run_dir / "checkpoints")):
        with open(path, "r+b") as f:
            f.truncate(10)
    before = directory_bytes(run_dir)
    proc = run_here("--resume", str(run_dir), "--total_timesteps", "512")
    assert_refused(proc, f"resume='{run_dir}': no loadable checkpoint in {run_dir}/checkpoints (cannot load ")
    assert directory_bytes(run_dir) == before


def test_overwrite_replaces_the_earlier_run(run_dir) -> None:
    (run_dir / "notes.txt").write_text("mine")
    proc = run_here(*TINY, "--total_timesteps", "128", "--run_dir", str(run_dir), "--overwrite", "True")
    assert proc.returncode == 0, proc.stderr
    assert f"--overwrite True: removed the earlier run's files from {run_dir}" in proc.stderr
    assert [os.path.basename(p) for p in list_checkpoints(str(run_dir / "checkpoints"))] == ["checkpoint_000000000128.pt"]
    assert steps_of(run_dir) == [64, 128] and (run_dir / "notes.txt").read_text() == "mine"  # only a run's own files go


def test_resuming_an_older_checkpoint_branches_and_deletes_nothing(run_dir) -> None:
    """Today's data loss: --resume of an older checkpoint with --keep_checkpoints 2 deleted the run's newer checkpoints."""
    before = directory_bytes(run_dir)
    older = run_dir / "checkpoints" / "checkpoint_000000000128.pt"
    proc = run_here("--resume", str(older), "--total_timesteps", "320", "--save_freq", "64", "--keep_checkpoints", "2")
    assert proc.returncode == 0, proc.stderr
    branch = run_dir / "branches" / "from_128"
    assert (
        f"{older} is older than the run's newest checkpoint, which is kept: this run is a branch, written to {branch}"
    ) in proc.stdout
    after = directory_bytes(run_dir)
    assert {k: v for k, v in after.items() if not k.startswith("branches")} == before  # every byte of the run itself
    summary = summary_line(proc.stdout)
    assert summary["run_dir"] == str(branch) and summary["checkpoint"] == str(
        branch / "checkpoints" / "checkpoint_000000000320.pt"
    )
    assert [os.path.basename(p) for p in list_checkpoints(str(branch / "checkpoints"))] == [
        "checkpoint_000000000256.pt",
        "checkpoint_000000000320.pt",
    ]
    # The branch's log: the run's rows up to 128 (the same bytes), then its own.
    assert steps_of(branch) == [64, 128, 192, 256, 320]
    assert (branch / "progress.csv").read_text().splitlines()[1:3] == (run_dir / "progress.csv").read_text().splitlines()[1:3]
    # Its monitor.csv: the run's header and its episodes up to 128 (as many as that checkpoint counted), then its own.
    counted = int(load_model_state(str(older))["ep_total"])
    run_lines, branch_lines = monitor_lines(run_dir), monitor_lines(branch)
    assert 0 < counted < len(run_lines) - 2 and branch_lines[: 2 + counted] == run_lines[: 2 + counted]
    assert len(branch_lines) - 2 == int(load_model_state(summary["checkpoint"])["ep_total"]) > counted
    # A second branch from the same checkpoint gets its own directory; the first is kept.
    again = run_here("--resume", str(older), "--total_timesteps", "192")
    assert again.returncode == 0, again.stderr
    assert summary_line(again.stdout)["run_dir"] == str(run_dir / "branches" / "from_128_2") and directory_bytes(
        branch
    ) == after_branch(after)
    # Continuing the run in place from that older checkpoint would rotate the newer ones away: refused.
    refused = run_here("--resume", str(older), "--run_dir", str(run_dir), "--total_timesteps", "512")
    assert_refused(
        refused,
        f"run_dir='{run_dir}': holds checkpoints newer than the one resumed (checkpoint_000000000192.pt, "
        "checkpoint_000000000256.pt), which continuing in it would rotate away",
    )


def after_branch(tree: dict[str, str]) -> dict[str, str]:
    """The part of a directory listing under ``branches/from_128``, relative to it."""
    prefix = os.path.join("branches", "from_128") + os.sep
    return {k[len(prefix) :]: v for k, v in tree.items() if k.startswith(prefix)}


def test_resume_in_place_keeps_the_rows_logged_after_its_checkpoint(run_dir) -> None:
    """A run that went on past its last checkpoint (killed): its rows after it are kept in a file of their own."""
    for path in list_checkpoints(str(run_dir / "checkpoints"))[2:]:
        os.unlink(path)  # as if killed after logging 256 steps with its last checkpoint at 128
    logged, episodes = (run_dir / "progress.csv").read_bytes(), (run_dir / "monitor.csv").read_bytes()
    counted = int(load_model_state(list_checkpoints(str(run_dir / "checkpoints"))[-1])["ep_total"])
    proc = run_here("--resume", str(run_dir), "--total_timesteps", "192")
    assert proc.returncode == 0, proc.stderr
    assert "at 128 steps" in proc.stdout
    assert (run_dir / "progress.before_resume_at_128.csv").read_bytes() == logged
    assert steps_of(run_dir) == [64, 128, 192]
    # monitor.csv: the episodes the checkpoint counted, then the resumed run's; the file as it was kept beside
    assert (run_dir / "monitor.before_resume_at_128.csv").read_bytes() == episodes
    lines = monitor_lines(run_dir)
    assert lines[: 2 + counted] == episodes.decode().splitlines()[: 2 + counted]
    assert len(lines) - 2 == int(load_model_state(summary_line(proc.stdout)["checkpoint"])["ep_total"]) > counted


def monitor_lines(run_dir) -> list[str]:
    return (run_dir / "monitor.csv").read_text().splitlines()


def test_monitor_csv_is_sb3s_and_rl_zoos_plots_read_the_run(earlier_run, tmp_path, monkeypatch) -> None:
    """``monitor.csv`` as sb3's Monitor writes it: sb3's ``load_results`` reads the run directory (one row per
    training episode, the lengths summing to the steps of finished episodes), and so does rl-zoo's plot_train."""
    pytest.importorskip("pandas", reason="sb3's load_results needs pandas (the test extra: pip install -e '.[test]')")
    import json

    from stable_baselines3.common.monitor import load_results
    from stable_baselines3.common.results_plotter import X_TIMESTEPS, ts2xy

    header, columns = monitor_lines(earlier_run)[:2]
    assert json.loads(header[1:])["env_id"] == "CartPole-v1" and columns == "r,l,t"
    frame = load_results(str(earlier_run))
    last = load_model_state(str(earlier_run / "checkpoints" / "checkpoint_000000000256.pt"))
    assert len(frame) == int(last["ep_total"]) and list(frame.columns[1:]) == ["r", "l", "t"]
    assert (frame.r == frame.l).all() and 0 < frame.l.sum() <= 256  # CartPole: a reward of 1 a step
    # the last episodes are the ones the log's means took
    assert frame.r.tail(len(last["ep_r"])).tolist() == last["ep_r"].tolist()
    steps, returns = ts2xy(frame, X_TIMESTEPS)
    assert steps[-1] == frame.l.sum() and returns.tolist() == frame.r.tolist()
    # rl-zoo's plot_train, on a log folder as rl-zoo lays it out (<folder>/<algo>/<env>_<n>), the run directory in it
    pytest.importorskip("seaborn", reason="rl-zoo's plot scripts need seaborn (the test extra)")
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt
    from rl_zoo3.plots import plot_train  # the function of rl_zoo3/plots/plot_train.py

    shutil.copytree(earlier_run, tmp_path / "logs" / "ppo" / "CartPole-v1_1")
    drawn = []
    monkeypatch.setattr(plt, "show", lambda: drawn.extend(line.get_xydata() for line in plt.gca().lines))
    monkeypatch.setattr(sys, "argv", ["plot_train", "-a", "ppo", "-e", "CartPole-v1", "-f", str(tmp_path / "logs"), "-w", "2"])
    plot_train()
    assert len(drawn) == 1 and drawn[0][-1, 0] == steps[-1]


def popen_main(*argv: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "ppo_dict.main_ppo", *argv],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": ROOT},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_a_run_on_a_locked_directory_is_refused_naming_the_holder(tmp_path) -> None:
    """The lock a run takes (this process holds it here), met by a command line: refused, with this pid."""
    held = lock(str(tmp_path / "run"), fresh=True)
    try:
        assert lock_holder(str(tmp_path / "run")) == f"pid {os.getpid()}"
        assert_refused(
            run_cli(*TINY, "--run_dir", str(tmp_path / "run")),
            f"run_dir='{tmp_path / 'run'}': in use by another run (pid {os.getpid()}, holding {tmp_path / 'run' / LOCK_FILE})",
        )
    finally:
        held.release()
    assert lock_holder(str(tmp_path / "run")) is None and os.listdir(tmp_path / "run") == [LOCK_FILE]


@pytest.mark.slow
def test_a_second_run_on_a_directory_in_use_is_refused_naming_the_pid(tmp_path) -> None:
    run_dir = tmp_path / "run"
    first = popen_main(*TINY, "--total_timesteps", "100000000", "--run_dir", str(run_dir))
    try:
        deadline = time.monotonic() + 120
        while not (run_dir / "config.json").exists() and first.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert first.poll() is None, first.communicate()
        in_use = (
            f"run_dir='{run_dir}': in use by another run (pid {first.pid}, holding {run_dir / LOCK_FILE}); "
            "wait for it to end, or choose another --run_dir"
        )
        assert_refused(run_cli(*TINY, "--run_dir", str(run_dir), "--overwrite", "True"), in_use)
        fresh = f"--resume auto: no checkpoint in {run_dir}/checkpoints: starting fresh\n"  # the first has saved none yet
        assert_refused(run_cli("--resume", "auto", *TINY, "--run_dir", str(run_dir)), in_use, said=fresh)
        first.send_signal(signal.SIGTERM)
        out, err = first.communicate(timeout=60)
    finally:
        first.kill()
    assert first.returncode == 143, err
    saved = summary_line(out)["checkpoint"]
    assert load_model_state(saved)["num_timesteps"] == summary_line(out)["env_steps"]
    assert lock_holder(str(run_dir)) is None  # the lock went with the process: the directory can be resumed


# ------------------------------------------------------------------------------ where a run cannot write


def unshare_works() -> bool:
    try:
        return subprocess.run(["unshare", "-rm", "true"], capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


needs_mount_namespace = pytest.mark.skipif(
    not unshare_works(), reason="needs unshare -rm (a user and mount namespace) to mount a read-only or a full file system"
)


def run_with_mount(mount: str, options: str, *argv: str, module: str = "ppo_dict.main_ppo") -> subprocess.CompletedProcess:
    """The command line (``module``'s) with a tmpfs mounted at ``mount`` (``options``: ``ro``, ``size=16k``) in a
    mount namespace of its own: a read-only or a full file system, for this command only."""
    script = f'mount -t tmpfs -o {options} tmpfs "$0" && exec "$@"'
    return subprocess.run(
        ["unshare", "-rm", "sh", "-c", script, mount, sys.executable, "-m", module, *argv],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": ROOT},
    )


@needs_mount_namespace
@pytest.mark.parametrize("dry_run", [(), ("--dry_run",)])
def test_a_read_only_or_full_run_dir_is_refused_before_start(tmp_path, dry_run: tuple[str, ...]) -> None:
    """A read-only --run_dir was a traceback (and --dry_run said the run would start); so was a full one."""
    mount = tmp_path / "mnt"
    mount.mkdir()
    proc = run_with_mount(str(mount), "ro", *TINY, "--total_timesteps", "64", "--run_dir", str(mount / "run"), *dry_run)
    assert_refused(proc, f"  - run_dir='{mount / 'run'}': {mount} is on a read-only file system")
    proc = run_with_mount(str(mount), "size=16k", *TINY, "--total_timesteps", "64", "--run_dir", str(mount / "run"), *dry_run)
    assert_refused(
        proc, f"  - run_dir='{mount / 'run'}': {mount} has 0.02 MiB free; writing a checkpoint there needs about 0.17 MiB"
    )
    # an output beside the run directory, on the read-only file system (the rest: the slow test below)
    proc = run_with_mount(
        str(mount),
        "ro",
        *TINY,
        "--total_timesteps",
        "64",
        "--run_dir",
        str(tmp_path / "run"),
        "--save_path",
        str(mount / "model"),
        *dry_run,
    )
    assert_refused(proc, f"  - save_path='{mount / 'model'}': {mount} is on a read-only file system")
    assert sorted(os.listdir(tmp_path)) == ["mnt"] and os.listdir(mount) == []


@needs_mount_namespace
def test_an_onnx_export_to_a_read_only_file_system_is_refused_and_writes_nothing(tmp_path) -> None:
    model = tmp_path / "model.pt"
    save_cartpole_model(model)
    mount = tmp_path / "mnt"
    mount.mkdir()
    before = directory_bytes(tmp_path)
    proc = run_with_mount(str(mount), "ro", str(model), "--out", str(mount / "policy.onnx"), module="ppo_dict.export_onnx")
    assert (
        proc.returncode == 2
        and proc.stderr == f"error: out='{mount / 'policy.onnx'}': {mount} is on a read-only file system\n"
    ), proc.stderr
    assert directory_bytes(tmp_path) == before


@pytest.mark.slow
@needs_mount_namespace
def test_every_output_on_a_read_only_file_system_is_refused_also_by_dry_run(tmp_path) -> None:
    mount = tmp_path / "mnt"
    mount.mkdir()
    for setting, path in (
        ("run_dir", mount / "run"),
        ("save_path", mount / "model"),
        ("tensorboard_log", mount / "tb"),
        ("export_sb3", mount / "agent.zip"),
    ):
        extra = [] if setting == "run_dir" else ["--run_dir", str(tmp_path / setting)]
        proc = run_with_mount(
            str(mount), "ro", *TINY, "--total_timesteps", "64", f"--{setting}", str(path), *extra, "--dry_run"
        )
        assert_refused(proc, f"  - {setting}='{path}': {mount} is on a read-only file system")
        assert not (tmp_path / setting).exists()


@pytest.mark.parametrize("dry_run", [(), ("--dry_run",)])
def test_a_run_dir_that_is_a_file_or_too_long_a_name_is_refused(capsys, tmp_path, dry_run) -> None:
    a_file = tmp_path / "a_file"
    a_file.write_text("not a directory")
    assert_refused(
        refused_here(capsys, *TINY, "--run_dir", str(a_file), *dry_run),
        f"  - run_dir='{a_file}': is a file, must be a directory",
    )
    assert_refused(
        refused_here(capsys, *TINY, "--run_dir", str(a_file / "run"), *dry_run),
        f"  - run_dir='{a_file / 'run'}': {a_file} is a file, so nothing can be created under it",
    )
    long = tmp_path / ("x" * 300)
    assert_refused(
        refused_here(capsys, *TINY, "--run_dir", str(long), *dry_run),
        f"  - run_dir='{long}': the name xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx... is 300 bytes long; "
        "the file system takes at most 255",
    )
    deep = tmp_path / "/".join(["y" * 200] * 21)
    assert_refused(
        refused_here(capsys, *TINY, "--run_dir", str(deep), *dry_run),
        f"  - run_dir='{deep}': the path is {len(str(deep))} bytes long; the file system takes paths of at most 4096",
    )
    assert sorted(os.listdir(tmp_path)) == ["a_file"] and a_file.read_text() == "not a directory"


# ------------------------------------------------------------------------------ hostile run directories (issue 50)


def tree_state(path) -> dict[str, str]:
    """``{relative path: what it is}`` for everything under ``path``, without following a link or opening a FIFO:
    a regular file's sha256, a link's target, a folder, a FIFO (a refused run changes none of it)."""
    found = {}
    for root, dirs, files in os.walk(path):
        for name in dirs + files:
            full = os.path.join(root, name)
            info = os.lstat(full)
            if stat.S_ISLNK(info.st_mode):
                found[os.path.relpath(full, path)] = "-> " + os.readlink(full)
            elif stat.S_ISREG(info.st_mode):
                with open(full, "rb") as f:
                    found[os.path.relpath(full, path)] = hashlib.sha256(f.read()).hexdigest()
            else:
                found[os.path.relpath(full, path)] = stat.filemode(info.st_mode)[0]
    return found


def checked(argv: list[str]) -> subprocess.CompletedProcess:
    """The command line in this process with a deadline (a FIFO opened for reading would wait forever)."""
    from tests.fuzz_flags import run_in_process

    outcome = run_in_process(argv, seconds=120)
    return subprocess.CompletedProcess(argv, outcome.code, outcome.out, outcome.err)


def victim(tmp_path) -> str:
    """A file outside every run directory (a shell start-up file, in issue 50's attack)."""
    path = tmp_path / "bashrc"
    path.write_text("export PATH=/usr/bin\n")
    return str(path)


def hostile_lock(run_dir, kind: str, target: str) -> None:
    lock_path = run_dir / LOCK_FILE
    if lock_path.exists():
        lock_path.unlink()
    if kind == "symlink":
        os.symlink(target, lock_path)
    elif kind == "hard link":
        os.link(target, lock_path)
    elif kind == "fifo":
        os.mkfifo(lock_path)
    elif kind == "directory":
        lock_path.mkdir()
    else:
        lock_path.write_text("my notes, not a pid\n")


LOCK_CASES = ["symlink", "hard link", "fifo", "directory", "foreign content"]


@pytest.mark.parametrize("kind", LOCK_CASES)
def test_a_lock_that_is_no_lock_file_is_refused_and_nothing_is_truncated(run_dir, tmp_path, kind: str) -> None:
    """A .lock that was a symlink had its target truncated; one that was a FIFO hung --dry_run; one that was a
    directory passed --dry_run and then raised. Every kind is refused, by a resume and by a new run alike."""
    target = victim(tmp_path)
    hostile_lock(run_dir, kind, target)
    empty = tmp_path / "fresh"
    empty.mkdir()
    hostile_lock(empty, kind, target)
    before = tree_state(tmp_path)
    for argv in (
        ["--resume", str(run_dir), "--total_timesteps", "320"],
        [*TINY, "--total_timesteps", "64", "--run_dir", str(empty)],
    ):
        for dry_run in ([], ["--dry_run"]):
            proc = checked(argv + dry_run)
            where = run_dir if "--resume" in argv else empty
            assert_refused(proc, f"run_dir='{where}': {where / LOCK_FILE} is ")
            assert tree_state(tmp_path) == before, argv + dry_run


@pytest.mark.parametrize(
    "name, kind",
    [
        ("progress.before_resume_at_128.csv", "symlink"),
        ("progress.csv", "symlink"),
        ("progress.csv", "fifo"),
        ("evaluations.npz", "directory"),
        ("checkpoints", "symlink"),
        ("wandb_run_id", "fifo"),
        ("videos", "symlink"),
        ("best_model.pt", "fifo"),
    ],
)
def test_a_run_directory_file_that_leads_elsewhere_is_refused_before_anything_is_written(
    run_dir, tmp_path, name: str, kind: str
) -> None:
    """progress.before_resume_at_<steps>.csv as a symlink had the run's rows copied into its target; any of the run's
    own names that is a link, a FIFO or a folder where a file goes is refused, at --dry_run too, and nothing changes."""
    for path in list_checkpoints(str(run_dir / "checkpoints"))[2:]:
        os.unlink(path)  # resumed at 128 with rows logged after it: the run would keep them aside
    target = victim(tmp_path) if name != "checkpoints" and name != "videos" else str(tmp_path / "elsewhere")
    if name in ("checkpoints", "videos"):
        shutil.copytree(run_dir / "checkpoints", target) if name == "checkpoints" else os.mkdir(target)
    path = run_dir / name
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif os.path.lexists(path):
        path.unlink()
    os.symlink(target, path) if kind == "symlink" else os.mkfifo(path) if kind == "fifo" else path.mkdir()
    before = tree_state(tmp_path)
    for dry_run in ([], ["--dry_run"]):
        proc = checked(["--resume", str(run_dir), "--total_timesteps", "320", *dry_run])
        assert_refused(proc, f"run_dir='{run_dir}': {path} is ")
        assert tree_state(tmp_path) == before


@pytest.mark.parametrize("kind", ["fifo", "directory"])
def test_a_newest_checkpoint_that_is_no_file_is_skipped_and_refused_without_waiting(run_dir, kind: str) -> None:
    newest = run_dir / "checkpoints" / "checkpoint_000000000320.pt"
    os.mkfifo(newest) if kind == "fifo" else newest.mkdir()
    before = tree_state(run_dir)
    proc = checked(["--resume", str(run_dir), "--total_timesteps", "384", "--dry_run"])
    what = "a FIFO (named pipe)" if kind == "fifo" else "a directory"
    warned = [line for line in proc.stderr.splitlines() if line.startswith(f"warning: cannot load {newest}")]
    assert len(warned) == 1 and warned[0].endswith("; trying the previous checkpoint"), proc.stderr
    assert_refused(proc, f"run_dir='{run_dir}': {newest} is {what}, where the run writes a file of its own")
    assert tree_state(run_dir) == before


@pytest.mark.parametrize("case", ["not an npz", "results of another shape", "non-finite results", "a step that is not one"])
def test_a_resumed_runs_evaluations_and_log_are_read_whole_before_anything_is_written(run_dir, case: str) -> None:
    """A malformed evaluations.npz raised after config.json was rewritten: it is read (and progress.csv) before the run
    takes its directory; a problem is one message, exit 2, and every byte stays as it was."""
    import numpy as np

    if case == "a step that is not one":
        with open(run_dir / "progress.csv", "a") as f:
            f.write("nan" + "," * (len((run_dir / "progress.csv").read_text().splitlines()[0].split(",")) - 1) + "\n")
        text = "line 6: the step 'nan' is not a whole number of steps"
    elif case == "not an npz":
        (run_dir / "evaluations.npz").write_bytes(b"PK\x03\x04 not really")
        text = "not an evaluations.npz numpy reads"
    else:
        results = np.ones((4, 3)) if case == "results of another shape" else np.full((4, 2), np.nan)
        np.savez(
            run_dir / "evaluations.npz",
            timesteps=np.array([64, 128, 192, 256]),
            results=results,
            ep_lengths=np.ones((4, 2), np.int64),
        )
        text = (
            "is not episode lengths of the results' shape" if case == "results of another shape" else "is not finite returns"
        )
    before = tree_state(run_dir)
    for dry_run in ([], ["--dry_run"]):
        assert_refused(checked(["--resume", str(run_dir), "--total_timesteps", "320", "--eval_freq", "64", *dry_run]), text)
        assert tree_state(run_dir) == before


def test_adam_moments_of_another_shape_are_refused_before_the_run_writes(run_dir) -> None:
    """torch's load_state_dict takes moments of any shape: the run then failed at its first update, after
    config.json and progress.csv were rewritten. Now the restore refuses them, before the directory is claimed."""
    import torch

    newest = list_checkpoints(str(run_dir / "checkpoints"))[-1]
    state = torch.load(newest, weights_only=True)
    first = next(iter(state["optimizer"]["state"].values()))
    first["exp_avg"] = torch.zeros(3, 3)
    torch.save(state, newest)
    before = tree_state(run_dir)
    proc = run_here("--resume", str(run_dir), "--total_timesteps", "320")  # a real start: found once the model is built
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert "the saved optimizer state does not fit this config (the exp_avg of parameter 0 has the shape (3, 3)" in proc.stderr
    assert tree_state(run_dir) == before


def test_a_checkpoints_output_settings_are_dropped_unless_typed(run_dir, tmp_path) -> None:
    """A checkpoint's config carried save_path, export_sb3, tensorboard_log and wandb's project into a resumed run,
    which wrote into a folder the user never named. They are dropped (a dropped project said in one line), --dry_run
    lists every path the run writes, and the run writes nothing outside its directory."""
    import torch

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    outputs = {
        "save_path": str(elsewhere / "model"),
        "export_sb3": str(elsewhere / "agent.zip"),
        "tensorboard_log": str(elsewhere / "tb"),
        "project": "attacker",
        "entity": "someone",
    }
    for path in list_checkpoints(str(run_dir / "checkpoints")):
        state = torch.load(path, weights_only=True)
        state["config"].update(outputs)
        torch.save(state, path)
    proc = checked(["--resume", str(run_dir), "--total_timesteps", "320", "--dry_run"])
    assert proc.returncode == 0, proc.stderr
    writes = next(line for line in proc.stdout.splitlines() if line.startswith("writes: "))
    assert writes == f"writes: {run_dir}/ (config.json, progress.csv, monitor.csv, checkpoints/, .lock)", writes
    said = [line for line in proc.stderr.splitlines() if "wandb project" in line]
    assert len(said) == 1 and said[0].endswith(
        "its config logs to the wandb project 'attacker'; "
        "a resumed run logs where its command line says: "
        "pass --project attacker to log there"
    ), proc.stderr
    proc = run_here("--resume", str(run_dir), "--total_timesteps", "320", env_extra={"WANDB_MODE": "disabled"})
    assert proc.returncode == 0, proc.stderr
    assert os.listdir(elsewhere) == [] and summary_line(proc.stdout)["run_dir"] == str(run_dir)
    assert json.loads((run_dir / "config.json").read_text())["save_path"] is None
    typed = checked(["--resume", str(run_dir), "--total_timesteps", "384", "--save_path", str(tmp_path / "mine"), "--dry_run"])
    assert f"{tmp_path / 'mine' / 'model.pt'}" in typed.stdout  # typed again, it is the user's own


def test_a_checkpoint_outside_a_run_directory_starts_a_new_one(earlier_run, tmp_path) -> None:
    """--resume some_folder/downloaded.pt adopted some_folder as the run directory and overwrote its config.json and
    progress.csv. A checkpoint that is not in a run directory's checkpoints/ starts a new run directory instead."""
    downloads = tmp_path / "downloads"
    downloads.mkdir()
    shutil.copy(list_checkpoints(str(earlier_run / "checkpoints"))[-1], downloads / "checkpoint_000000000256.pt")
    (downloads / "config.json").write_text('{"mine": true}\n')
    (downloads / "progress.csv").write_text("step,mine\n1,2\n")
    before = tree_state(downloads)
    work = tmp_path / "work"
    work.mkdir()
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "ppo_dict.main_ppo",
            "--resume",
            str(downloads / "checkpoint_000000000256.pt"),
            "--total_timesteps",
            "320",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=work,
        env={**os.environ, "PYTHONPATH": ROOT},
    )
    assert proc.returncode == 0, proc.stderr
    new = summary_line(proc.stdout)["run_dir"]
    assert os.path.dirname(new) == "runs" and os.path.isfile(work / new / "config.json"), new
    assert (
        f"{downloads / 'checkpoint_000000000256.pt'} is in no run directory (its config.json and checkpoints/): "
        "this run writes a new one"
    ) in proc.stdout
    assert tree_state(downloads) == before
    assert steps_of(work / new) == [320]  # its own log: the folder's progress.csv is no run's
