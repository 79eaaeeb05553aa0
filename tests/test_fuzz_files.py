"""A fuzz of the readers of files from elsewhere: mutations of real sb3 zips and VecNormalize pickles, each
read in a child process under a memory limit and a deadline (``tests/fuzz_files.py``).

Each case ends in a value or one clean refusal (a ``CheckpointError``; ``UnpicklingError`` for the bare
unpickler), within the deadline and the memory limit: never a crash (a segfault ends the child, not
pytest), a hang, an allocation past the limit or another exception; and nothing a file names runs (the
sentinel a spliced ``eval`` would touch never appears). ``make test`` reads a few hundred; the slow test
thousands.
"""

from __future__ import annotations

import os
from collections import Counter

import pytest
from stable_baselines3 import PPO as SB3PPO
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.vec_env import VecNormalize

from tests.fuzz_files import SENTINEL_NAME, Isolated, clean, mutated_pickles, mutated_zips


@pytest.fixture(scope="module")
def real_files(tmp_path_factory) -> dict[str, str]:
    """A zip and a VecNormalize pickle written by real sb3 (CartPole, a few updates, episodes in its buffer)."""
    folder = tmp_path_factory.mktemp("real")
    venv = VecNormalize(make_vec_env("CartPole-v1", n_envs=2, seed=0))
    model = SB3PPO("MlpPolicy", venv, seed=0, n_steps=64, batch_size=64, n_epochs=1, device="cpu")
    model.learn(256)
    model.save(str(folder / "agent.zip"))
    venv.save(str(folder / "vecnormalize.pkl"))
    venv.close()
    return {"zip": str(folder / "agent.zip"), "vecnormalize": str(folder / "vecnormalize.pkl")}


def fuzz(worker: Isolated, real_files: dict[str, str], folder: str, zips: int, pickles: int, seed: int) -> Counter:
    """Read ``zips`` mutations of the zip and ``pickles`` of the VecNormalize pickle (each through the bare
    unpickler too); every outcome clean, no sentinel. Returns the outcomes' kinds (the test checks both happen)."""
    kinds: Counter = Counter()
    cases = [("zip", path) for path in mutated_zips(real_files["zip"], folder, zips, seed)]
    cases += [
        (reader, path)
        for path in mutated_pickles(real_files["vecnormalize"], folder, pickles, seed)
        for reader in ("vecnormalize", "pickle")
    ]
    for reader, path in cases:
        outcome = worker.read(reader, path)
        problem = clean(outcome)
        assert problem is None, f"{reader} of {path} (seed {seed}): {problem}"
        assert not os.path.exists(os.path.join(folder, SENTINEL_NAME)), f"{reader} of {path} ran what it names"
        kinds[(reader, outcome["outcome"].split(":")[0])] += 1
    return kinds


def test_mutated_sb3_files_read_as_a_value_or_one_clean_refusal(file_reader, real_files, tmp_path) -> None:
    worker = file_reader
    assert clean(worker.read("zip", real_files["zip"])) is None and worker.read("zip", real_files["zip"])[
        "outcome"
    ].startswith("value")
    kinds = fuzz(worker, real_files, str(tmp_path), zips=80, pickles=110, seed=0)  # 300 reads
    assert kinds[("zip", "refused")] and kinds[("zip", "value")] and kinds[("vecnormalize", "refused")], kinds


@pytest.mark.slow
def test_thousands_of_mutated_sb3_files(file_reader, real_files, tmp_path) -> None:
    worker = file_reader
    for seed in range(1, 6):
        fuzz(worker, real_files, str(tmp_path), zips=400, pickles=400, seed=seed)
