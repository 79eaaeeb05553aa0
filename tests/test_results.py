"""``benchmarks/results.py`` reproduces rl-zoo's setup: each entry beside what rl-zoo's own ``ExperimentManager``
makes of it (PPO's arguments, schedules, ``policy_kwargs``, ``VecNormalize``'s arguments, wrappers, frame stack,
the envs' first observations), every ppo.yml entry reproduced or refused by name, tiny runs of both libraries
whose curves are compared, ``--resume``. No learning run: the runs here stop after one or two rollouts."""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from benchmarks import results
from benchmarks.results_report import check_text, latest, table_markdown
from benchmarks.zoo_setup import ZooEntryError, entry_key, make_envs, published, zoo_entries, zoo_setup

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def zoo_manager(env_id: str, tmp_path) -> tuple[object, dict]:
    """rl-zoo's ``ExperimentManager`` for ``env_id`` after its ``_preprocess_hyperparams``, and the PPO kwargs it keeps."""
    from rl_zoo3.exp_manager import ExperimentManager

    manager = ExperimentManager(argparse.Namespace(), "ppo", env_id, str(tmp_path), verbose=0, seed=0)
    hyperparams, manager.env_wrapper, _, _ = manager._preprocess_hyperparams(manager.read_hyperparameters()[0])
    return manager, hyperparams


def chain(env) -> list[str]:
    names = []
    while env is not None:
        names.append(type(env).__name__)
        env = getattr(env, "venv", None)
    return names


@pytest.mark.parametrize(
    "env_id, zoo_id, key",
    [
        ("Pendulum-v1", "Pendulum-v1", "Pendulum-v1"),
        ("Acrobot-v1", "Acrobot-v1", "Acrobot-v1"),
        ("CartPole-v1", "CartPole-v1", "CartPole-v1"),
        ("LunarLander-v3", "LunarLander-v3", "LunarLander-v3"),
        ("HalfCheetah-v5", "HalfCheetah-v4", "HalfCheetah-v4"),
        ("Hopper-v5", "Hopper-v4", "Hopper-v4"),
        ("Swimmer-v5", "Swimmer-v4", "Swimmer-v4"),
        ("Walker2d-v5", "Walker2d-v4", "Walker2d-v4"),
        ("Ant-v5", "Ant-v4", "Ant-v4"),
        ("BreakoutNoFrameskip-v4", "BreakoutNoFrameskip-v4", "atari"),
        ("CarRacing-v3", "CarRacing-v3", "CarRacing-v3"),
    ],
)
def test_setup_is_what_rl_zoo_makes_of_the_entry(env_id: str, zoo_id: str, key: str, tmp_path, capsys) -> None:
    """``zoo_id``: the id rl-zoo is asked for (the v4 entries are its own for the v4 ids); ``key``: the entry read."""
    setup = zoo_setup(env_id)
    manager, hyperparams = zoo_manager(zoo_id, tmp_path)
    assert setup.key == key and bool(setup.mapping) == (key != env_id)
    assert (setup.n_envs, setup.n_timesteps, setup.frame_stack) == (manager.n_envs, manager.n_timesteps, manager.frame_stack)
    assert setup.normalize == (manager.normalize_kwargs if manager.normalize else None)
    assert setup.policy == hyperparams.pop("policy") and setup.deterministic == manager.deterministic_eval
    ours = dict(setup.ppo_kwargs)
    assert set(ours) == set(hyperparams)
    for name, value in hyperparams.items():
        if callable(value):  # rl-zoo's schedules: the same value at every point of the progress
            assert [ours[name](p) for p in (1.0, 0.37, 0.0)] == [value(p) for p in (1.0, 0.37, 0.0)], name
        else:
            assert ours[name] == value, name  # policy_kwargs too: rl-zoo's eval of the string, ours read without eval


@pytest.mark.parametrize("env_id", ["Acrobot-v1", "HalfCheetah-v4", "BreakoutNoFrameskip-v4"])
def test_envs_are_rl_zoos_envs(env_id: str, tmp_path, capsys) -> None:
    """The vec env (wrappers, VecNormalize's settings, frame stack, transposition) and its first observation, as
    rl-zoo's create_envs gives them for the same seed."""
    from stable_baselines3.common.env_util import make_vec_env

    manager, _ = zoo_manager(env_id, tmp_path)
    theirs = manager.create_envs(2, no_log=True)
    ours = make_envs(zoo_setup(env_id), make_vec_env, 2, seed=0)
    try:
        assert chain(ours) == chain(theirs)
        assert str(ours.observation_space) == str(theirs.observation_space)
        np.testing.assert_array_equal(ours.reset(), theirs.reset())
        if results.vec_normalize(ours) is not None:
            mine, zoo = results.vec_normalize(ours), results.vec_normalize(theirs)
            assert (mine.gamma, mine.norm_obs, mine.norm_reward, mine.clip_obs, mine.clip_reward) == (
                zoo.gamma,
                zoo.norm_obs,
                zoo.norm_reward,
                zoo.clip_obs,
                zoo.clip_reward,
            )
    finally:
        ours.close()
        theirs.close()


def test_every_entry_is_reproduced_or_refused_by_name(capsys) -> None:
    assert results.main(["--envs", "all", "--dry_run"]) == 1  # some entries need packages this machine lacks
    out, err = capsys.readouterr()
    for key in zoo_entries():
        if key in ("atari", "default"):
            continue
        described = any(line.startswith(f"{key}: rl_zoo3 ppo.yml[{key}]") for line in out.splitlines())
        refused = any(line.startswith(f"cannot reproduce {key}: ") for line in err.splitlines())
        assert described != refused, key
    assert "cannot reproduce Reacher-v2: gymnasium registers it only to say it needs mujoco-py" in err


def test_entry_lookup_names_the_version_it_maps_and_refuses_unknown_ids() -> None:
    entries = zoo_entries()
    assert entry_key("Walker2d-v5", entries) == (
        "Walker2d-v4",
        "rl_zoo3 has Walker2d-v4's entry, not Walker2d-v5's: Walker2d-v5 trained with Walker2d-v4's settings",
    )
    assert entry_key("PongNoFrameskip-v4", entries)[0] == "atari"
    assert entry_key("Reacher-v5", entries)[0] == "Reacher-v2"
    with pytest.raises(ZooEntryError, match="NoSuchEnv-v0: not a registered gymnasium id"):
        zoo_setup("NoSuchEnv-v0", entries)
    assert published("LunarLander-v3").env == "LunarLander-v2" and published("Hopper-v5").mean == 2410.435
    assert published("Humanoid-v5") is None


def test_an_entry_it_cannot_read_is_refused_naming_every_key() -> None:
    entries = {
        "Pendulum-v1": {
            "policy": "MlpPolicy",
            "n_timesteps": 1000,
            "callback": "my.Callback",
            "env_wrapper": "no_such_module.Wrapper",
            "policy_kwargs": "dict(no_such_kwarg=1)",
        }
    }
    with pytest.raises(ZooEntryError) as refused:
        zoo_setup("Pendulum-v1", entries)
    text = str(refused.value)
    assert "ppo.yml[Pendulum-v1]: 'callback' is not supported" in text
    assert "env_wrapper 'no_such_module.Wrapper' cannot be built here" in text and "policy_kwargs: 'no_such_kwarg'" in text


def test_refused_envs_start_no_run(tmp_path, capsys) -> None:
    assert results.main(["--envs", "CartPole-v1,Reacher-v2", "--out", str(tmp_path)]) == 1
    assert "cannot reproduce Reacher-v2" in capsys.readouterr().err and not os.listdir(tmp_path)


def tiny_run(out, work, *extra: str) -> int:
    """Both libraries on CartPole for one rollout (8 envs x 32 steps), evaluated on one episode."""
    return results.main(
        [
            "--envs",
            "CartPole-v1",
            "--seeds",
            "3",
            "--steps",
            "256",
            "--eval_episodes",
            "1",
            "--out",
            str(out),
            "--work",
            str(work),
            *extra,
        ]
    )


def test_tiny_runs_of_both_libraries_give_the_same_curve_and_resume_skips_them(tmp_path, capsys) -> None:
    assert tiny_run(tmp_path / "out", tmp_path / "work") == 0
    final, curves = (results.read(str(tmp_path / "out" / name)) for name in ("final.csv", "curves.csv"))
    assert [(r["lib"], r["timesteps"], r["planned"], r["budget"], r["eval_episodes"]) for r in final] == [
        ("ppo_dict", "256", "256", "100000", "1"),
        ("sb3", "256", "256", "100000", "1"),
    ]
    assert final[0]["eval_mean"] == final[1]["eval_mean"] and final[0]["last_ep_rew_mean"] == final[1]["last_ep_rew_mean"]
    assert len(curves) == 2 and curves[0]["ep_rew_mean"] == curves[1]["ep_rew_mean"]
    text, differ = check_text(final, curves)
    assert text == "CartPole-v1 seed 3: ep_rew_mean the same number at all 1 rollouts to step 256\n" and not differ
    table = table_markdown(final, curves)
    assert "256 of 100,000" in table  # the runs table; the returns table shows a part of the budget as one
    assert f"| - | {float(final[0]['eval_mean']):g} (seed 3, 0.256k of 100k steps) |" in table
    assert tiny_run(tmp_path / "out", tmp_path / "work", "--resume") == 0
    assert len(results.read(str(tmp_path / "out" / "final.csv"))) == 2
    assert "CartPole-v1 sb3 seed 3 (256 steps): in final.csv already" in capsys.readouterr().out
    assert not os.path.exists(tmp_path / "work" / "CartPole-v1" / "sb3-seed3-256")


def test_check_names_the_first_rollout_that_differs() -> None:
    row = dict(env="E-v0", seed="0", planned="10", budget="10", timesteps="10", resumed_at="")
    final = [dict(row, lib="ppo_dict", run="a"), dict(row, lib="sb3", run="b", resumed_at="30")]
    curves = [
        dict(run=run, timesteps=str(t), ep_rew_mean=str(v))
        for run, pts in (
            ("a", [(10, 1.0), (20, 2.0), (30, 3.0), (40, 9.0)]),
            ("b", [(10, 1.0), (20, 2.5), (30, 3.0), (40, 4.0)]),
        )
        for t, v in pts
    ]
    text, differ = check_text(final, curves)
    assert differ and text.startswith("E-v0 seed 0: DIFFERENT at rollout 2 (step 20): sb3 2.5, ppo_dict 2.0")
    curves[5]["ep_rew_mean"] = "2.0"  # equal up to sb3's resume at step 30; the difference after it does not count
    assert check_text(final, curves) == ("E-v0 seed 0: ep_rew_mean the same number at all 3 rollouts to step 30\n", False)


def test_merge_appends_another_folders_runs_once_and_the_tables_show_the_last(tmp_path, capsys) -> None:
    """A run made again elsewhere (another --out) joins the CSVs with --merge: its rows and curve once, the older run
    kept in the files, the newer one in the tables."""
    row = {field: "" for field in results.FINAL_FIELDS}
    row.update(env="E-v0", lib="ppo_dict", seed="0", planned="10", budget="10", timesteps="10")
    here, there = tmp_path / "here", tmp_path / "there"
    os.makedirs(here), os.makedirs(there)
    old, again, other = (
        dict(row, run="old", eval_mean="1.0"),
        dict(row, run="again", eval_mean="2.0"),
        dict(row, run="other", seed="1"),
    )
    results.append(str(here / "final.csv"), results.FINAL_FIELDS, [old])
    results.append(str(there / "final.csv"), results.FINAL_FIELDS, [old, again, other])
    curves = [
        dict(env="E-v0", lib="ppo_dict", seed="0", commit="c", timesteps="10", ep_rew_mean=str(i), run=run)
        for i, run in enumerate(["old", "again", "other"])
    ]
    results.append(str(there / "curves.csv"), results.CURVE_FIELDS, curves)
    assert results.main(["--merge", str(there), "--out", str(here)]) == 0
    assert capsys.readouterr().out == "merged again\nmerged other\n"
    final = results.read(str(here / "final.csv"))
    assert [r["run"] for r in final] == ["old", "again", "other"]
    assert [r["run"] for r in results.read(str(here / "curves.csv"))] == ["again", "other"]
    assert [r["run"] for r in latest(final)] == ["again", "other"]
    assert results.main(["--merge", str(there), "--out", str(here)]) == 0
    assert "nothing to merge" in capsys.readouterr().out and len(results.read(str(here / "final.csv"))) == 3
    assert results.main(["--merge", str(tmp_path / "nowhere"), "--out", str(here)]) == 2
    assert "no final.csv there" in capsys.readouterr().err
    os.makedirs(tmp_path / "fifo"), os.mkfifo(tmp_path / "fifo" / "final.csv")  # read without waiting for a writer
    assert results.main(["--merge", str(tmp_path / "fifo"), "--out", str(here)]) == 2
    assert "is a FIFO (named pipe), not a regular file" in capsys.readouterr().err


@pytest.mark.slow
def test_a_stopped_run_continues_from_its_checkpoint(tmp_path) -> None:
    """A run killed after a checkpoint resumes there with ``--resume``: its row says where, its curve is whole."""
    args = [
        "--envs",
        "CartPole-v1",
        "--seeds",
        "4",
        "--libs",
        "ppo_dict",
        "--steps",
        "4096",
        "--eval_episodes",
        "1",
        "--checkpoint_every",
        "1e-9",
        "--out",
        str(tmp_path / "out"),
        "--work",
        str(tmp_path / "work"),
    ]
    state = tmp_path / "work" / "CartPole-v1" / "ppo_dict-seed4-4096" / "state.json"
    process = subprocess.Popen([sys.executable, os.path.join(ROOT, "benchmarks", "results.py"), *args], start_new_session=True)
    deadline = time.monotonic() + 120
    while not state.exists() and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    assert state.exists()
    assert results.main([*args, "--resume"]) == 0
    (row,) = results.read(str(tmp_path / "out" / "final.csv"))
    curve = [int(c["timesteps"]) for c in results.read(str(tmp_path / "out" / "curves.csv"))]
    assert row["resumed_at"] and 0 < int(row["resumed_at"]) < 4096 and row["timesteps"] == "4096"
    assert curve == list(range(256, 4097, 256))
    assert not state.parent.exists()


def merge_folders(tmp_path):
    """``(here, there)``: ``here`` holds one run; ``there`` a good run then the rows a test spoils."""
    row = {field: "" for field in results.FINAL_FIELDS}
    row.update(env="E-v0", lib="ppo_dict", seed="0", planned="10", budget="10", timesteps="10")
    here, there = tmp_path / "here", tmp_path / "there"
    os.makedirs(here), os.makedirs(there)
    results.append(str(here / "final.csv"), results.FINAL_FIELDS, [dict(row, run="old")])
    results.append(
        str(here / "curves.csv"),
        results.CURVE_FIELDS,
        [dict(env="E-v0", lib="ppo_dict", seed="0", commit="c", timesteps="10", ep_rew_mean="1.0", run="old")],
    )
    results.append(str(there / "final.csv"), results.FINAL_FIELDS, [dict(row, run="good")])
    results.append(
        str(there / "curves.csv"),
        results.CURVE_FIELDS,
        [dict(env="E-v0", lib="ppo_dict", seed="0", commit="c", timesteps="10", ep_rew_mean="2.0", run="good")],
    )
    return here, there


@pytest.mark.parametrize(
    "spoil, said",
    [
        (lambda there: (there / "final.csv").write_text("env,lib,seed\nE-v0,ppo_dict,0\n"), "its header has no "),
        (
            lambda there: open(there / "final.csv", "a").write("E-v0,x," + "9" * 200_000 + "\n"),
            "not CSV (field larger than field limit",
        ),
        (lambda there: open(there / "final.csv", "ab").write(b"E-v0,\xff\xfe\n"), "not UTF-8 text"),
        (
            lambda there: open(there / "final.csv", "a").write(
                ",".join(["E-v0", "", "ppo_dict", "zero"] + ["10"] * 3 + [""] * 7 + ["c", "h", "d", "bad"]) + "\r\n"
            ),
            "seed is 'zero', not a whole number",
        ),
        (
            lambda there: open(there / "curves.csv", "a").write("E-v0,ppo_dict,0,c,1e30,1.0,good\r\n"),
            "timesteps is '1e30', not a whole number",
        ),
        (
            lambda there: open(there / "curves.csv", "a").write("E-v0,ppo_dict,0,c,10,high,good\r\n"),
            "ep_rew_mean is 'high', not a number",
        ),
        (lambda there: open(there / "final.csv", "a").write("E-v0,ppo_dict,0,1,2\r\n"), "cells, its header 18"),
    ],
    ids=["no run column", "200 KB cell", "not utf-8", "text seed", "1e30 steps", "text return", "short row"],
)
def test_merge_validates_every_row_first_and_writes_both_files_or_neither(tmp_path, capsys, spoil, said: str) -> None:
    """A CSV without a run column, a 200 KB cell, non-UTF-8 bytes or a non-numeric number ended in tracebacks, and a
    good row then a bad one appended final.csv and never curves.csv. Now: one message, nothing written."""
    here, there = merge_folders(tmp_path)
    spoil(there)
    before = {name: (here / name).read_bytes() for name in ("final.csv", "curves.csv")}
    assert results.main(["--merge", str(there), "--out", str(here)]) == 2
    err = capsys.readouterr().err
    assert (
        err.startswith(f"--merge {there}: ")
        and said in err
        and err.rstrip().endswith("nothing merged")
        and "Traceback" not in err
    ), err
    assert {name: (here / name).read_bytes() for name in ("final.csv", "curves.csv")} == before
    assert sorted(os.listdir(here)) == ["curves.csv", "final.csv"]
    for name in ("final.csv", "curves.csv"):  # --check of a spoiled folder: one message too
        (here / name).write_bytes((there / name).read_bytes())
    assert results.main(["--check", "--out", str(here)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and said in err and "Traceback" not in err, err


def test_merge_of_good_rows_writes_both_files(tmp_path, capsys) -> None:
    here, there = merge_folders(tmp_path)
    assert results.main(["--merge", str(there), "--out", str(here)]) == 0
    assert [r["run"] for r in results.read(str(here / "final.csv"))] == ["old", "good"]
    assert [r["run"] for r in results.read(str(here / "curves.csv"))] == ["old", "good"]
