"""A script without ``if __name__ == "__main__":`` (as sb3's documentation writes them) runs once and
gives sb3's numbers, with ppo_dict's envs in worker processes.

``tests/api/unguarded_script.py`` runs as a subprocess under sb3's import and under ppo_dict's with
its ``make_vec_env`` (training envs in the trainer's workers, an evaluation env of one env in
this process, an evaluation env of two in workers of its own, loaded by ``VecNormalize.load``); its
top level must run once (no worker imports the main module again), and what it trained and
evaluated must equal sb3's (``==``).
"""

from __future__ import annotations

import os
import subprocess
import sys

import torch

from tests.parity.sides import assert_same_value

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run_script(which: str, out: str) -> dict:
    os.makedirs(out)
    proc = subprocess.run(
        [sys.executable, os.path.join("tests", "api", "unguarded_script.py"), which, out],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": ROOT},
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    with open(os.path.join(out, "runs")) as f:
        runs = f.read().split()
    assert runs[1::2] == ["__main__"], f"the script's top level ran {len(runs) // 2} times: {runs}"
    return torch.load(os.path.join(out, "record.pt"), weights_only=False)


def test_a_script_without_a_main_guard_runs_once_with_sb3s_numbers(tmp_path) -> None:
    """ppo_dict's import with its make_vec_env (sb3's make_vec_env starts no process under either import)."""
    sb3 = run_script("sb3", os.path.join(tmp_path, "sb3"))
    ours = run_script("ppo_dict_envs", os.path.join(tmp_path, "ours"))
    # the training envs' worker (beside the main process's share); none for one eval env; two for the two loaded by
    # VecNormalize.load
    assert ours.pop("processes") == [1, 0, 2]
    sb3.pop("processes")
    assert len(sb3["evaluations"]["timesteps"]) == 2
    assert_same_value(sb3, ours, "the unguarded script under ppo_dict's import")
