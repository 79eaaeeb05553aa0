"""README's commands, run as a reader runs them, with their steps cut short.

Every command in README's ``bash`` blocks either runs here (``python -m ppo_dict...``, ``make train``,
``make test``, ``make docs``, ``make lint``), in README's order and in one working folder (so ``--resume runs/hopper``
finds the run the command before it wrote), or carries a marker naming what it needs
(``# needs: root``), one of :data:`NEEDS`. Training commands get :data:`CUT` appended (later flags
win); the system parts a command needs (a GL backend, Godot) skip it where they are missing, as the
rest of the suite does.
"""

from __future__ import annotations

import json
import os
import re
import resource
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import pytest

from tests.conftest import ROOT
from tests.system_parts import needs

README = Path(ROOT) / "README.md"
#: what a command that does not run here needs: the marker's text -> why the suite cannot run it
NEEDS = {
    "a new virtual environment": "makes a virtual environment and installs into it (the suite runs installed)",
    "root": "installs Debian packages (apt-get)",
    "a W&B account": "talks to a W&B server",
    "SLURM": "submits to a SLURM cluster",
    "a CUDA GPU": "trains on a GPU",
    "a quiet machine, ~15 minutes": "benchmarks for minutes",
    "a many-core machine, about an hour": "benchmarks for an hour",
    "a many-core machine, ~6 minutes": "benchmarks on a borrowed many-core host",
}
RUN = ("python -m ppo_dict.", "make train", "make test", "make docs", "make lint")
#: appended to every training command: one or two short rollouts and one epoch
CUT = ["--n_steps", "16", "--batch_size", "16", "--n_epochs", "1", "--total_timesteps", "128", "--progress", "lines"]
#: a sweep's one trial: a rollout long enough to end episodes (Reacher's are 50 steps), whose return is its metric
SWEEP_CUT = ["--n_steps", "64", "--batch_size", "64", "--n_epochs", "1", "--total_timesteps", "512"]
#: flags cut short where a command has them
CUT_IF_GIVEN = {"--eval_freq": "1", "--save_freq": "16"}
#: appended where a command evaluates
CUT_EVAL = ["--eval_episodes", "1"]
TRAINERS = ("python -m ppo_dict.main_ppo ", "python -m ppo_dict.main_ppo_godot")
MARKER = re.compile(r"#\s*needs:\s*([^(]*?)\s*(\(|$)")


@dataclass(frozen=True)
class Command:
    line: str  # as README writes it, continuation lines joined
    need: Optional[str]  # the marker's text, or None

    @property
    def shell(self) -> str:
        """The command without its trailing comment."""
        return re.sub(r"\s+#.*$", "", self.line)


def readme_commands(text: str) -> list[Command]:
    """The commands of README's ``bash`` blocks, in order (comment lines and blank lines left out)."""
    found = []
    for block in re.findall(r"```bash\n(.*?)```", text, flags=re.S):
        for line in block.replace("\\\n", " ").splitlines():
            line = " ".join(line.split())
            if line and not line.startswith("#"):
                marker = MARKER.search(line)
                found.append(Command(line, marker.group(1) if marker else None))
    return found


COMMANDS = readme_commands(README.read_text())


def cut_short(shell: str) -> str:
    """``shell`` with its steps cut short: :data:`CUT` for a trainer, one trial for a sweep; the make
    targets skip their install step (``-o install``: the suite runs installed)."""
    argv = shlex.split(shell)
    if shell.startswith(TRAINERS):
        extra = [arg for flag, value in CUT_IF_GIVEN.items() if flag in argv for arg in (flag, value)]
        extra += CUT_EVAL if "--eval_freq" in argv else []
        total = ["--total_timesteps", "256"] if "--resume" in argv else []  # a resumed run goes on past the first's 128
        return shlex.join([*argv, *CUT, *extra, *total])
    if shell.startswith("python -m ppo_dict.sweep "):
        return shlex.join([*argv, "--count", "1", "--n_jobs", "1", "--", *SWEEP_CUT])
    if shell.startswith("make "):
        return shlex.join(["make", "--no-print-directory", "-C", ROOT, "-o", "install", *argv[1:], f"PYTHON={sys.executable}"])
    return shell


def make_args(target: str, work: Path) -> list[str]:
    """What each make target is given here: a short training, a small test file, a site in ``work``."""
    return {
        "train": [f"TRAIN_ARGS={shlex.join([*CUT, '--run_dir', str(work / 'runs' / 'make-train')])}"],
        "test": ["PYTEST_ARGS=-q -p no:cacheprovider tests/test_parse.py"],
        "docs": [f"SITE_DIR={work / 'site'}"],
        "lint": [],
    }[target]


def parts_needed(shell: str) -> list[pytest.MarkDecorator]:
    marks = []
    if "--pixel_obs_wrapper True" in shell or "--video" in shell:
        marks.append(needs("gl"))
    if "main_ppo_godot" in shell or "--env godot" in shell:
        marks.append(needs("godot"))
    return marks


def case_id(command: Command) -> str:
    """``main_ppo-gym_Hopper-v4``, ``main_ppo-resume``, ``enjoy-runs/hopper``, ``make-train``: the command's
    program, its env or first argument, and the flags that set it apart."""
    argv = shlex.split(command.shell)
    program = argv[2].removeprefix("ppo_dict.") if argv[0] == "python" else "-".join(argv[:2])
    rest = argv[3:] if argv[0] == "python" else []
    env = [rest[rest.index("--env") + 1]] if "--env" in rest else [a for a in rest[:1] if not a.startswith("-")]
    flags = [a.strip("-") for a in rest if a in ("--resume", "--pixel_obs_wrapper", "--action_masks", "--export_sb3")]
    return "-".join([program, *env, *flags])


# Cut short, each case takes 6-18 CPU seconds, its processes included (the most: the ONNX export's check, the
# sweep, Atari's NatureCNN and rendered frames): none is slow, so `make test` runs them all.
RUNNABLE = [pytest.param(c, id=case_id(c), marks=parts_needed(c.shell)) for c in COMMANDS if c.need is None]


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One working folder for the module's commands, with the repository's data folders beside them."""
    folder = tmp_path_factory.mktemp("readme")
    for name in ("hyperparams", "sweeps"):
        (folder / name).symlink_to(Path(ROOT) / name)
    return folder


def run(shell: str, work: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": ROOT, "PYTHONUNBUFFERED": "1"}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.run(["bash", "-c", shell], cwd=work, env=env, capture_output=True, text=True, timeout=600)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    print(f"CPU seconds (the command and its processes): {cpu:.1f}")  # shown with -s or on failure: sizes the case
    return proc


def test_every_command_runs_here_or_names_what_it_needs() -> None:
    assert len(COMMANDS) >= 10, "README's commands were not found"
    for command in COMMANDS:
        if command.need is None:
            assert command.shell.startswith(RUN), f"runs nowhere and names no need (add '# needs: ...'): {command.line}"
        else:
            assert command.need in NEEDS, f"unknown need {command.need!r} (one of {sorted(NEEDS)}): {command.line}"


def test_the_commands_not_run_are_listed() -> None:
    """Each need of :data:`NEEDS` marks a README command, and these are the commands the suite does not run."""
    not_run = {c.need: c.shell for c in COMMANDS if c.need is not None}
    assert sorted(not_run) == sorted(NEEDS), "NEEDS lists a need no README command has, or misses one"
    for need, shell in sorted(not_run.items()):
        print(f"not run ({NEEDS[need]}): {shell}")


def inputs(shell: str) -> list[str]:
    """The run directories a command reads (``runs/NAME`` other than its own ``--run_dir``)."""
    argv = shlex.split(shell)
    own = {argv[i + 1] for i, arg in enumerate(argv[:-1]) if arg == "--run_dir"}
    return [arg for arg in argv if re.fullmatch(r"runs/[\w.-]+", arg) and arg not in own]


def producer(run_dir: str) -> Command:
    """The README command that writes ``run_dir`` (``--run_dir run_dir``)."""
    return next(c for c in COMMANDS if c.need is None and f"--run_dir {run_dir}" in c.shell)


@pytest.mark.parametrize("command", RUNNABLE)
def test_readme_command(command: Command, work: Path) -> None:
    for run_dir in inputs(command.shell):  # run alone (-k), a command first makes the run it reads
        if not (work / run_dir).exists():
            first = run(cut_short(producer(run_dir).shell), work)
            assert first.returncode == 0, first.stderr[-3000:]
    shell = cut_short(command.shell)
    if shell.startswith("make "):
        shell = shlex.join([*shlex.split(shell), *make_args(shlex.split(command.shell)[1], work)])
    proc = run(shell, work)
    assert proc.returncode == 0, f"{shell}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    if command.shell.startswith(TRAINERS) or command.shell == "make train":
        summary = json.loads([line for line in proc.stdout.splitlines() if line.startswith("{")][-1])
        assert summary["env_steps"] > 0 and summary["interrupted"] is False


#: README's Python block cut short as its commands are: one short rollout, one evaluation episode
PYTHON_CUT = {
    "n_steps=1024": "n_steps=64",
    "total_timesteps=50_000": "total_timesteps=64",
    "n_eval_episodes=10": "n_eval_episodes=1",
}


def test_readme_python_block(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """README's Python block (sb3's API with the import changed) runs as written, cut short, in a folder of its own."""
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
    assert len(blocks) == 1 and "from ppo_dict import PPO" in blocks[0]
    code = blocks[0]
    for written, cut in PYTHON_CUT.items():
        assert written in code, written
        code = code.replace(written, cut)
    monkeypatch.chdir(tmp_path)
    exec(compile(code, str(README), "exec"), {"__name__": "readme"})
    assert (tmp_path / "ppo_pendulum.zip").exists()
