"""A fuzz of the text readers of issue 59 (``tests/fuzz_text.py``): mutations of a real run's ``progress.csv``,
``monitor.csv``, ``config.json`` and ``wandb_run_id``, of ``results.py``'s CSVs and of a sweep file, each read in a
child process under a memory limit and a deadline (``tests/fuzz_files.py``'s worker).

Each case ends in a value or one clean refusal (a ``ValueError``, ``OSError`` or ``SweepError`` of one message):
never a crash, a hang, an allocation past the limit, another exception, and nothing a file names runs. ``make test``
reads a few hundred; the slow test thousands.
"""

from __future__ import annotations

import json
import os
import shutil
from collections import Counter

import pytest

from benchmarks import results
from ppo_dict.run.tracking import CSVWriter
from tests.conftest import ROOT
from tests.fuzz_files import SENTINEL_NAME, clean
from tests.fuzz_text import mutated_texts

#: the file each reader reads, by the name it has in a run directory, a results folder or sweeps/
FILES = {
    "progress": "progress.csv",
    "monitor": "monitor.csv",
    "plot_config": "config.json",
    "wandb_id": "wandb_run_id",
    "results_final": "final.csv",
    "results_curves": "curves.csv",
    "sweep": "reacher.yaml",
}


@pytest.fixture(scope="module")
def real_texts(tmp_path_factory) -> dict[str, str]:
    """One real file of each kind, as ppo_dict, results.py and the repository write them."""
    folder = tmp_path_factory.mktemp("texts")
    writer = CSVWriter(str(folder / "progress.csv"))
    for step in (64, 128, 192):
        writer({"rollout/ep_rew_mean": step / 10, "time/fps": 300, **({"train/loss": 0.5} if step > 64 else {})}, step)
    (folder / "monitor.csv").write_text(
        '#{"t_start": 1700000000.5, "env_id": "CartPole-v1"}\nr,l,t,is_success\n'
        + "".join(f"{10.0 + i},{10 + i},{0.1 * i:.6f},0\n" for i in range(8))
    )
    (folder / "config.json").write_text(
        json.dumps(
            {
                "env": "gym_CartPole-v1",
                "info_keywords": ["is_success"],
                "net_arch": [64, 64],
                "policy_kwargs": {"a": {"b": [1, 2]}},
                "seed": 0,
            },
            indent=2,
        )
    )
    (folder / "wandb_run_id").write_text("a1b2c3d4")
    row = {field: "" for field in results.FINAL_FIELDS}
    row.update(
        env="CartPole-v1",
        lib="ppo_dict",
        seed="0",
        planned="100",
        budget="100",
        timesteps="100",
        eval_mean="9.5",
        run="r0",
        wall_s="1.5",
        resumed_at="50;75",
    )
    results.append(str(folder / "final.csv"), results.FINAL_FIELDS, [row, dict(row, run="r1", lib="sb3")])
    results.append(
        str(folder / "curves.csv"),
        results.CURVE_FIELDS,
        [
            dict(env="CartPole-v1", lib="ppo_dict", seed="0", commit="c", timesteps=str(t), ep_rew_mean=repr(t / 3), run="r0")
            for t in (10, 20, 30)
        ],
    )
    shutil.copy(os.path.join(ROOT, "sweeps", "reacher.yaml"), folder / "reacher.yaml")
    return {reader: str(folder / name) for reader, name in FILES.items()}


def fuzz(worker, real_texts: dict[str, str], folder: str, count: int, seed: int) -> Counter:
    """``count`` mutations of each real file, each read by its reader; every outcome clean, no sentinel."""
    kinds: Counter = Counter()
    for reader, real in real_texts.items():
        for path in mutated_texts(real, folder, count, seed):
            outcome = worker.read(reader, path)
            problem = clean(outcome)
            assert problem is None, f"{reader} of {path} (seed {seed}): {problem}"
            assert outcome["grew"] < 512 * 2**20, f"{reader} of {path}: {outcome}"
            kinds[(reader, outcome["outcome"].split(":")[0])] += 1
    assert not os.path.exists(os.path.join(folder, SENTINEL_NAME)) and not os.path.exists("/tmp/fuzz_sentinel_ran")
    return kinds


def test_mutated_text_files_read_as_a_value_or_one_clean_refusal(file_reader, real_texts, tmp_path) -> None:
    for reader, real in real_texts.items():  # the real files read
        assert file_reader.read(reader, real)["outcome"].startswith("value: "), (reader, file_reader.read(reader, real))
    kinds = fuzz(file_reader, real_texts, str(tmp_path), count=43, seed=0)  # 301 reads
    for reader in ("progress", "monitor", "results_final", "results_curves", "sweep"):
        assert kinds[(reader, "refused")] and kinds[(reader, "value")], kinds


@pytest.mark.slow
def test_thousands_of_mutated_text_files(file_reader, real_texts, tmp_path) -> None:
    for seed in range(1, 6):
        fuzz(file_reader, real_texts, str(tmp_path / str(seed)), count=100, seed=seed)
