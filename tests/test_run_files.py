"""Files you did not write, third round (issue 59): what a resumed run reads of its run directory is read bounded
and checked whole before anything is written (``ppo_dict.run.run_files``), and a checkpoint's tensors are sized from
their storage and finite in every dtype (``ppo_dict.core.files.tensor_problems``).

Each hostile file is built here in a copy of a real run directory; each case is refused in one message, exit 2,
no traceback, by ``--dry_run`` and by the run alike, and the directory stays byte for byte as it was.
"""

from __future__ import annotations

import os
import shutil
import stat

import pytest
import torch

from ppo_dict.core.files import finite_tensor, tensor_problems
from ppo_dict.run.checkpoint import list_checkpoints
from tests.cli_here import run_here
from tests.test_run_dir import TINY, assert_refused, checked, tree_state
from tests.test_safe_files import cartpole_zip  # noqa: F401 (a fixture)


@pytest.fixture(scope="module")
def evaluated_run(tmp_path_factory):
    """A finished run of 256 steps, a checkpoint every 64, evaluated every 128 steps on 2 episodes."""
    run_dir = tmp_path_factory.mktemp("evaluated") / "run"
    proc = run_here(
        *TINY,
        "--total_timesteps",
        "256",
        "--save_freq",
        "64",
        "--keep_checkpoints",
        "10",
        "--eval_freq",
        "128",
        "--eval_episodes",
        "2",
        "--run_dir",
        str(run_dir),
    )
    assert proc.returncode == 0, proc.stderr
    return run_dir


@pytest.fixture
def run_dir(evaluated_run, tmp_path):
    """A copy of the evaluated run, to spoil."""
    return shutil.copytree(evaluated_run, tmp_path / "run")


def monitor_header(run_dir, header: str) -> None:
    lines = (run_dir / "monitor.csv").read_text().splitlines(keepends=True)
    (run_dir / "monitor.csv").write_text(header + "\n" + "".join(lines[1:]))


def sparse_monitor(run_dir) -> None:
    (run_dir / "monitor.csv").unlink()
    with open(run_dir / "monitor.csv", "wb") as f:
        f.truncate(256 * 2**20)  # 256 MiB of holes: no bytes on disk, 256 MiB to read


def extra_cells(run_dir) -> None:
    width = len((run_dir / "progress.csv").read_text().splitlines()[0].split(","))
    with open(run_dir / "progress.csv", "a") as f:
        f.write("256" + ",1" * (width + 1) + "\n")


CASES = {
    "monitor t_start text": (
        lambda d: monitor_header(d, '#{"t_start": "noon", "env_id": "CartPole-v1"}'),
        "monitor.csv: line 1 is not Monitor's header (a JSON object whose t_start is a time, not 'noon')",
    ),
    "monitor header nested deep": (
        lambda d: monitor_header(d, "#" + "[" * 30_000 + "]" * 30_000),
        "monitor.csv: line 1: its JSON nests 30000 deep; ppo_dict reads at most 32",
    ),
    "monitor header nested past its line": (
        lambda d: monitor_header(d, "#" + "[" * 100_000),
        "monitor.csv: not a monitor file",
    ),
    "monitor sparse 256 MiB": (sparse_monitor, "monitor.csv: not a monitor file"),
    "monitor not utf-8": (lambda d: open(d / "monitor.csv", "ab").write(b"\xff\xfe,1,2\n"), "monitor.csv: not UTF-8 text"),
    "monitor row of text": (lambda d: open(d / "monitor.csv", "a").write("many,9,1.0\n"), ": its r is not a number"),
    "progress cell of 200 KB": (
        lambda d: open(d / "progress.csv", "a").write("320," + "1" * 200_000 + "\n"),
        ": not CSV (field larger than field limit",
    ),
    "progress extra cells": (extra_cells, " cells, its header "),
    "progress text value": (
        lambda d: open(d / "progress.csv", "a").write(
            "320" + ",x" * (len(open(d / "progress.csv").readline().split(",")) - 1) + "\n"
        ),
        "is 'x', not a number",
    ),
    "progress not utf-8": (lambda d: open(d / "progress.csv", "ab").write(b"320,\xff\xfe\n"), "progress.csv: not UTF-8 text"),
    "checkpoint temp name a folder": (
        lambda d: os.mkdir(d / "checkpoints" / ".checkpoint_000000000320.pt.x1.tmp"),
        ".checkpoint_000000000320.pt.x1.tmp is a directory, named like the temp file of an interrupted checkpoint",
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_resumed_runs_own_files_are_read_bounded_before_anything_is_written(run_dir, case: str) -> None:
    """Each of these passed --dry_run or the check, then ended in a traceback once the run had its directory
    (a RecursionError, a csv.Error, a TypeError, an IsADirectoryError), or read 256 MiB of holes into memory."""
    spoil, text = CASES[case]
    spoil(run_dir)
    before = tree_state(run_dir)
    for dry_run in ([], ["--dry_run"]):
        proc = checked(
            ["--resume", str(run_dir), "--total_timesteps", "320", "--eval_freq", "128", "--eval_episodes", "2", *dry_run]
        )
        assert_refused(proc, text)
        assert f"resume='{run_dir}': " in proc.stderr
        assert tree_state(run_dir) == before, dry_run


@pytest.mark.parametrize("run_id", ["../../elsewhere", "a b", "x" * 100, "id#1"])
def test_a_wandb_run_id_that_is_no_id_is_refused_before_wandb_sees_it(run_dir, run_id: str) -> None:
    (run_dir / "wandb_run_id").write_text(run_id)
    before = tree_state(run_dir)
    for dry_run in ([], ["--dry_run"]):
        proc = checked(
            [
                "--resume",
                str(run_dir),
                "--total_timesteps",
                "320",
                "--project",
                "p",
                "--wandb_mode",
                "disabled",
                "--eval_freq",
                "128",
                "--eval_episodes",
                "2",
                *dry_run,
            ]
        )
        assert_refused(proc, "wandb_run_id: ")
        assert "is not a wandb run id (1 to 64 letters, digits, '_' or '-')" in proc.stderr
        assert tree_state(run_dir) == before


def test_a_resume_with_other_eval_episodes_is_refused_naming_the_ones_it_had(run_dir) -> None:
    """Its evaluations.npz holds rows of 2 episodes: appending rows of 3 ended in numpy's traceback mid-run."""
    before = tree_state(run_dir)
    for dry_run in ([], ["--dry_run"]):
        proc = checked(
            ["--resume", str(run_dir), "--total_timesteps", "320", "--eval_freq", "128", "--eval_episodes", "3", *dry_run]
        )
        assert_refused(
            proc, "evaluations.npz holds evaluations of 2 episodes and this run evaluates 3: pass --eval_episodes 2"
        )
        assert tree_state(run_dir) == before


def test_the_files_a_run_wrote_read_back_and_the_run_continues(run_dir) -> None:
    proc = run_here("--resume", str(run_dir), "--total_timesteps", "320", "--eval_freq", "128", "--eval_episodes", "2")
    assert proc.returncode == 0, proc.stderr
    assert (run_dir / "progress.csv").read_text().splitlines()[-1].startswith("320,")


def test_tensors_are_sized_from_their_storage_and_finite_in_every_dtype() -> None:
    huge = torch.zeros(1).as_strided((10**12,), (0,))  # 4 bytes of storage, 10**12 elements in view
    assert tensor_problems({"w": huge}, "state") == [
        "state['w']: a tensor of 1,000,000,000,000 elements on 4 bytes of storage"
    ]
    assert not finite_tensor(huge)
    assert not finite_tensor(torch.tensor([complex(float("nan"), 0.0)])) and finite_tensor(torch.tensor([1 + 2j]))
    assert tensor_problems([torch.arange(10.0)[2:5], (torch.ones(2),)], "ok") == []
    assert tensor_problems({"a": [torch.tensor([float("inf")])]}, "s") == ["s['a'][0]: not finite"]


@pytest.mark.parametrize(
    "command",
    [
        ["ppo_dict.main_ppo", "--resume", "{checkpoint}", "--total_timesteps", "320", "--dry_run"],
        ["ppo_dict.enjoy", "{run}", "--model", "last", "--episodes", "1"],
        ["ppo_dict.export_onnx", "{checkpoint}"],
    ],
)
def test_a_checkpoint_holding_a_view_larger_than_its_bytes_is_refused_before_it_is_computed_on(run_dir, command) -> None:
    """A 10**12-element view of 4 bytes: resume, enjoy and export_onnx tried to allocate it."""
    import subprocess
    import sys

    newest = list_checkpoints(str(run_dir / "checkpoints"))[-1]
    state = torch.load(newest, weights_only=True)
    first = next(iter(state["policy"]))
    state["policy"][first] = torch.zeros(1).as_strided((10**12,), (0,))
    torch.save(state, newest)
    (run_dir / "best_model.pt").unlink()
    before = tree_state(run_dir)
    argv = [a.format(run=run_dir, checkpoint=newest) for a in command]
    proc = subprocess.run([sys.executable, "-m", *argv], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert f"state['policy'][{first!r}]: a tensor of 1,000,000,000,000 elements on 4 bytes of storage" in proc.stderr
    assert tree_state(run_dir) == before


@pytest.mark.parametrize("entry", ["policy.pth", "policy.optimizer.pth"])
def test_an_sb3_zip_of_nan_parameters_or_adam_state_is_refused_before_the_run_directory_exists(
    cartpole_zip, tmp_path, capsys, entry: str
) -> None:
    """Its run directory was created before the NaN surfaced; now the zip's tensors are checked as they are read."""
    import io
    import zipfile

    from ppo_dict.main_ppo import main

    evil = tmp_path / "nan.zip"
    with zipfile.ZipFile(cartpole_zip) as source, zipfile.ZipFile(evil, "w") as out:
        for info in source.infolist():
            data = source.read(info)
            if info.filename == entry:
                state = torch.load(io.BytesIO(data), weights_only=True)
                tensors = state["state"][0] if entry == "policy.optimizer.pth" else state
                name = next(
                    k for k, v in tensors.items() if isinstance(v, torch.Tensor) and v.is_floating_point() and v.numel()
                )
                tensors[name] = torch.full_like(tensors[name], float("nan"))
                buffer = io.BytesIO()
                torch.save(state, buffer)
                data = buffer.getvalue()
            out.writestr(info, data)
    for dry_run in ([], ["--dry_run"]):
        capsys.readouterr()
        code = main(
            [
                "--env",
                "gym_CartPole-v1",
                "--trained_agent",
                str(evil),
                "--num_workers",
                "0",
                "--total_timesteps",
                "64",
                "--run_dir",
                str(tmp_path / "run"),
                *dry_run,
            ]
        )
        err = capsys.readouterr().err
        assert code == 2 and "its parameters are not an sb3 model's: parameters[" in err and ": not finite" in err, err
        assert "Traceback" not in err and not (tmp_path / "run").exists()


def test_a_video_is_written_in_a_private_folder_never_through_a_planted_link(tmp_path) -> None:
    """OpenCV wrote the evaluation's video to the predictable name .<video>.tmp.mp4 beside it, following a link planted
    there: the file the link named was overwritten. Now the frames go to a folder mkdtemp makes, then os.replace."""
    import numpy as np

    from ppo_dict.run.evaluation import VideoWriter

    victim = tmp_path / "bashrc"
    victim.write_text("export PATH=/usr/bin\n")
    videos = tmp_path / "videos"
    videos.mkdir()
    os.symlink(victim, videos / ".eval-000000000064.mp4.tmp.mp4")  # the old temp name
    writer = VideoWriter(str(videos / "eval-000000000064.mp4"), 30)
    for i in range(3):
        writer.add(np.full((32, 48, 3), 40 * i, np.uint8))
    assert os.path.dirname(writer.tmp) != str(videos) and stat.S_IMODE(os.stat(os.path.dirname(writer.tmp)).st_mode) == 0o700
    assert writer.close() == str(videos / "eval-000000000064.mp4")
    assert victim.read_text() == "export PATH=/usr/bin\n"
    assert sorted(os.listdir(videos)) == [".eval-000000000064.mp4.tmp.mp4", "eval-000000000064.mp4"]
    assert (videos / "eval-000000000064.mp4").stat().st_size > 0
    discarded = VideoWriter(str(videos / "eval-000000000128.mp4"), 30)
    discarded.add(np.zeros((32, 48, 3), np.uint8))
    discarded.discard()
    assert sorted(os.listdir(videos)) == [".eval-000000000064.mp4.tmp.mp4", "eval-000000000064.mp4"]


def test_a_dangling_link_at_the_branch_name_is_skipped_not_retried_forever(run_dir, tmp_path) -> None:
    """A dangling symlink at branches/from_<N> was taken for a free name: the run said "created by another run a
    moment ago; start again", every time. Now the next name is taken, and the link (and where it points) left alone."""
    older = list_checkpoints(str(run_dir / "checkpoints"))[1]
    (run_dir / "branches").mkdir()
    os.symlink(tmp_path / "nowhere", run_dir / "branches" / "from_128")
    proc = run_here("--resume", older, "--total_timesteps", "192")
    assert proc.returncode == 0, proc.stderr
    assert f"this run is a branch, written to {run_dir / 'branches' / 'from_128_2'}" in proc.stdout
    assert os.path.islink(run_dir / "branches" / "from_128") and not (tmp_path / "nowhere").exists()


def test_a_resume_needs_only_its_checkpoint_not_the_hyperparameter_file_it_names(tmp_path) -> None:
    """A resume read the YAML its checkpoint's config names: a moved file blocked it, a hostile one gave a traceback."""
    from tests.conftest import ROOT

    hyperparams = tmp_path / "ppo.yml"
    shutil.copy(os.path.join(ROOT, "hyperparams", "ppo.yml"), hyperparams)
    run_dir = tmp_path / "run"
    proc = run_here(
        *TINY,
        "--hyperparams",
        str(hyperparams),
        "n_envs:2",
        "n_steps:32",
        "--total_timesteps",
        "64",
        "--run_dir",
        str(run_dir),
    )
    assert proc.returncode == 0, proc.stderr
    for steps, spoil in (
        ("128", hyperparams.unlink),
        ("192", lambda: hyperparams.write_text("CartPole-v1: [[[\n" + "[" * 100_000)),
    ):
        spoil()
        assert checked(["--resume", str(run_dir), "--total_timesteps", steps, "--dry_run"]).returncode == 0
        proc = run_here("--resume", str(run_dir), "--total_timesteps", steps)
        assert proc.returncode == 0, proc.stderr
        assert (run_dir / "progress.csv").read_text().splitlines()[-1].startswith(f"{steps},")


@pytest.mark.parametrize(
    "raised", [OSError(5, "Input/output error"), ValueError("a reader not bounded yet"), RecursionError("deep")]
)
def test_what_a_check_raises_besides_ppo_dicts_errors_is_one_message(monkeypatch, capsys, tmp_path, raised) -> None:
    """main_ppo's main re-raised what was not a ppo_dict error: a file a check read ended in a traceback."""
    from ppo_dict import main_ppo
    from ppo_dict.run import ranks

    def check_run(*args, **kwargs):
        raise raised

    monkeypatch.setattr(ranks, "check_run", check_run)
    code = main_ppo.main([*TINY, "--total_timesteps", "64", "--run_dir", str(tmp_path / "run"), "--dry_run"])
    err = capsys.readouterr().err
    assert (
        code == 2
        and err.startswith("error: 1 invalid setting(s):\n  - the run cannot be checked: ")
        and type(raised).__name__ in err
    )
    assert "Traceback" not in err and not (tmp_path / "run").exists()
