"""docs/examples.md's blocks, run as a reader runs them, with their steps cut short, so that none can rot.

Every ``bash`` and ``python`` block of the page is a case, in the page's order, in one working folder
(with the repository's ``hyperparams/`` and ``sweeps/`` beside it, as the page's commands expect). A
block that reads what an earlier block writes (a run directory, a saved model, an ONNX file) has that
block run first when it runs alone (``-k``). Commands are cut short as README's are
(:func:`tests.test_readme.cut_short`); Python blocks get :data:`PYTHON_CUT`'s smaller numbers. Training commands after
the first call main_ppo's entry point in this process (:data:`HERE`).
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.cli_here import run_here
from tests.conftest import ROOT
from tests.test_readme import cut_short, parts_needed, work  # noqa: F401 (work: README's working folder, a fixture)

PAGE = Path(ROOT) / "docs" / "examples.md"
#: Python blocks: ``keyword=<number>`` -> the number it is cut to (at most), so that a block trains a
#: rollout or two and evaluates one episode
PYTHON_CUT = {"total_timesteps": 256, "n_steps": 64, "batch_size": 64, "n_epochs": 2, "n_eval_episodes": 1}
#: what each kind of command is given besides :func:`cut_short`'s cut
COMMAND_CUT = {"python -m ppo_dict.enjoy ": ["--episodes", "1"], "python -m ppo_dict.export_onnx ": ["--check", "16"]}


@dataclass(frozen=True)
class Block:
    index: int
    kind: str  # "bash" or "python"
    text: str
    heading: str  # the section it stands in

    @property
    def writes(self) -> set[str]:
        """The files and run directories the block writes (``--run_dir``, ``--out``, ``.save("...")``)."""
        return set(re.findall(r"--(?:run_dir|out) (\S+)", self.text)) | set(re.findall(r"\.save\(\"([^\"]+)\"\)", self.text))


def page_blocks(text: str) -> list[Block]:
    """The page's ``bash`` and ``python`` blocks, in order, each with the heading above it."""
    blocks, heading = [], ""
    for match in re.finditer(r"^## ([^\n]*)$|^```(bash|python)\n(.*?)^```", text, flags=re.M | re.S):
        if match.group(1):
            heading = match.group(1)
        else:
            blocks.append(Block(len(blocks), match.group(2), match.group(3), heading))
    return blocks


BLOCKS = page_blocks(PAGE.read_text())


def reads(block: Block) -> list[Block]:
    """The earlier blocks whose files this block reads."""
    return [
        earlier
        for earlier in BLOCKS[: block.index]
        if any(re.search(rf"(?<![\w/.]){re.escape(name)}(?![\w/])", block.text) for name in earlier.writes - block.writes)
    ]


def commands(block: Block) -> list[str]:
    """A ``bash`` block's commands, continuation lines joined, comments left out."""
    lines = [re.sub(r"\s+#.*$", "", " ".join(line.split())) for line in block.text.replace("\\\n", " ").splitlines()]
    return [line for line in lines if line and not line.startswith("#")]


def cut_command(shell: str) -> str:
    """``shell`` cut short: :func:`cut_short`'s cut (a sweep's trial flags after ``--`` replaced by its
    own), then :data:`COMMAND_CUT`'s."""
    argv = shlex.split(shell)
    if shell.startswith("python -m ppo_dict.sweep ") and "--" in argv:
        shell = shlex.join(argv[: argv.index("--")])
    extra = next((flags for start, flags in COMMAND_CUT.items() if shell.startswith(start)), [])
    return shlex.join([*shlex.split(cut_short(shell)), *extra])


def cut_python(code: str) -> str:
    """``code`` with each :data:`PYTHON_CUT` keyword's number lowered to its cut."""

    def lower(match: re.Match) -> str:
        return f"{match.group(1)}={min(int(match.group(2).replace('_', '')), PYTHON_CUT[match.group(1)])}"

    return re.sub(rf"\b({'|'.join(PYTHON_CUT)})=([\d_]+)\b", lower, code)


#: (heading, kind) of the blocks that take more than ~20 CPU seconds even cut short: run by `make test-all`
#: (RecurrentPPO's Python block: about 75 CPU seconds, its per-step LSTM update and predict loop)
#: blocks that run in make test-all only: what they run, make test runs elsewhere (the rendered pixels:
#: tests/envs/test_pixels.py)
SLOW = {("Recurrent policies", "python"), ("Pixels", "bash")}


#: the training commands after the page's first run main_ppo's entry point in this process (tests/cli_here.py): what they
#: claim is that the command as written runs; the first one, enjoy, export_onnx, the sweep and the Python blocks run as typed
HERE = "python -m ppo_dict.main_ppo "
FIRST = next(b.index for b in BLOCKS if b.kind == "bash" and any(shell.startswith(HERE) for shell in commands(b)))


def block_marks(block: Block) -> list[pytest.MarkDecorator]:
    marks = [mark for shell in (commands(block) if block.kind == "bash" else []) for mark in parts_needed(shell)]
    return marks + ([pytest.mark.slow] if (block.heading, block.kind) in SLOW else [])


def run_block(block: Block, work: Path, done: set[int]) -> None:
    """Run ``block`` (cut short) in ``work``, the blocks it reads first; each block once per module."""
    for earlier in reads(block):
        if earlier.index not in done:
            run_block(earlier, work, done)
    env = {**os.environ, "PYTHONPATH": ROOT, "PYTHONUNBUFFERED": "1", "MPLBACKEND": "Agg"}
    if block.kind == "python":
        script = work / f"example_{block.index}.py"
        script.write_text(cut_python(block.text))
        runs = [[sys.executable, str(script)]]
    else:
        runs = [["bash", "-c", cut_command(shell)] for shell in commands(block)]
    for argv in runs:
        if argv[0] == "bash" and argv[-1].startswith(HERE) and block.index != FIRST:
            proc = run_here(*shlex.split(argv[-1])[len(HERE.split()) :], cwd=str(work), env_extra={"MPLBACKEND": "Agg"})
        else:
            proc = subprocess.run(argv, cwd=work, env=env, capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, f"{block.heading}: {argv[-1]}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    done.add(block.index)


@pytest.fixture(scope="module")
def done() -> set[int]:
    return set()


def test_the_page_has_its_examples() -> None:
    """Every kind of example the page promises is there, and every block is a program (no fragments)."""
    headings = {block.heading for block in BLOCKS}
    for wanted in (
        "Train from the command line",
        "Evaluate and replay a run",
        "Continue a run",
        "A callback",
        "Pixels",
        "Atari",
        "Action masking",
        "Recurrent policies",
        "A hyperparameter sweep",
        "Export to ONNX",
    ):
        assert wanted in headings, wanted
    assert any("VecNormalize" in heading for heading in headings)
    assert sum(block.kind == "python" for block in BLOCKS) >= 6
    for block in BLOCKS:
        if block.kind == "bash":
            assert all(shell.startswith("python -m ppo_dict.") for shell in commands(block)), block.text
        else:
            compile(block.text, f"examples.md block {block.index}", "exec")


def test_python_blocks_are_cut_short() -> None:
    assert (
        cut_python("learn(total_timesteps=100_000); PPO(n_steps=1024, batch_size=32)")
        == "learn(total_timesteps=256); PPO(n_steps=64, batch_size=32)"
    )


@pytest.mark.parametrize(
    "block",
    [
        pytest.param(b, id=f"{b.index}-{b.kind}-{re.sub(r'[^a-z]+', '_', b.heading.lower()).strip('_')}", marks=block_marks(b))
        for b in BLOCKS
    ],
)
def test_example_runs(block: Block, work: Path, done: set[int]) -> None:
    run_block(block, work, done)


def test_getting_started_own_env_runs_under_both_imports(tmp_path: Path) -> None:
    """Getting started's "Your own env": its module written under the name its first line gives, then its command
    line and its script run beside it (cut short), the script under ppo_dict's import and sb3's alike."""
    blocks = [b for b in page_blocks((Path(ROOT) / "docs" / "getting-started.md").read_text()) if b.heading == "Your own env"]
    assert [b.kind for b in blocks] == ["python", "bash", "python"]
    module, shell, script = blocks
    (tmp_path / re.match(r"# (\w+\.py):", module.text).group(1)).write_text(module.text)
    sb3_script = cut_python(script.text).replace("from ppo_dict.api import PPO", "from stable_baselines3 import PPO")
    assert sb3_script != cut_python(script.text)
    (tmp_path / "ours.py").write_text(cut_python(script.text))
    (tmp_path / "sb3s.py").write_text(sb3_script)
    env = {**os.environ, "PYTHONPATH": ROOT, "PYTHONUNBUFFERED": "1", "MPLBACKEND": "Agg"}
    runs = [["bash", "-c", cut_command(line)] for line in commands(shell)] + [
        [sys.executable, "ours.py"],
        [sys.executable, "sb3s.py"],
    ]
    for argv in runs:
        proc = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, f"{argv[-1]}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    assert (tmp_path / "runs" / "goright" / "config.json").exists() and (tmp_path / "goright_ppo.zip").exists()
