"""A rollout step's books are written once (ppo_dict/algo/rollout/books.py) and every schedule runs them: the central
and double-buffered collector, each process's columns of the sharded step, the device rollout's batched bootstrap. The
schedules' equality to sb3, bit for bit, is the parity suite's (tests/parity/test_env_counts.py: central, sharded at
several granules, in-process and on workers); here, that no schedule keeps a rule of its own, and the bootstrap's
arithmetic is sb3's."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import torch

from ppo_dict.algo.rollout.books import add_bootstrap

ROOT = Path(__file__).resolve().parent.parent
#: the storage's rows only the books write during a rollout: the learner's rewards (with their bootstrap) and the
#: episode starts
BOOKS_ROWS = {"rewards", "episode_starts"}


def writes(tree: ast.AST) -> list[str]:
    """The subscripted arrays named in :data:`BOOKS_ROWS` that a module assigns to (``x.rewards[...] = ...``,
    ``rewards[i] += ...``)."""
    found = []
    for node in ast.walk(tree):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AugAssign) else []
        for target in targets:
            if isinstance(target, ast.Subscript):
                base = target.value
                name = base.attr if isinstance(base, ast.Attribute) else base.id if isinstance(base, ast.Name) else None
                if name in BOOKS_ROWS:
                    found.append(f"{name} (line {node.lineno})")
    return found


def test_no_schedule_writes_the_books_rows_itself() -> None:
    assert writes(ast.parse("s.rewards[t, rows] = r\nrewards[idx] += g * v\nstarts = s.episode_starts[t]")) == [
        "rewards (line 1)",
        "rewards (line 2)",
    ]  # the check finds what it is for
    elsewhere = {
        str(path.relative_to(ROOT)): writes(ast.parse(path.read_text()))
        for path in sorted((ROOT / "ppo_dict").rglob("*.py"))
        if path.name != "books.py"
    }
    assert {path: found for path, found in elsewhere.items() if found} == {}
    assert writes(ast.parse((ROOT / "ppo_dict" / "algo" / "rollout" / "books.py").read_text()))


def test_the_bootstrap_is_sb3s_arithmetic_one_env_or_a_batch() -> None:
    """sb3's ``rewards[idx] += self.gamma * terminal_value`` (a float32 tensor of one value, a Python float); the batched
    forms give each env the same bits."""
    rng = np.random.default_rng(0)
    for gamma in (0.99, 0.9, 0.999, 0.98765):
        rewards = rng.standard_normal(64).astype(np.float32) * 10
        values = rng.standard_normal(64).astype(np.float32) * 100
        sb3, ours, batched = rewards.copy(), rewards.copy(), rewards.copy()
        for idx in range(64):
            sb3[idx] += gamma * torch.tensor(values[idx])
            add_bootstrap(ours, idx, gamma, float(torch.tensor(values[idx]).item()))
        add_bootstrap(batched, np.arange(64), gamma, values)
        assert sb3.tobytes() == ours.tobytes() == batched.tobytes()
