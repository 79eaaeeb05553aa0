"""wandb sweeps: the agent's command line (built by wandb's own code) is accepted; grid/random/bayes runs on an
Optuna study that processes share (SQLite, a journal file, a real PostgreSQL server); crashed and stopped sweeps resume."""

import json
import os
import signal
import subprocess
import sys
import time

import optuna
import pytest
import yaml

from ppo_dict.run.checks import validate
from ppo_dict.run.cli import config_from_args
from ppo_dict.run.study import open_storage, retry
from ppo_dict.run.sweep import agent_command
from ppo_dict.sweep import main as sweep_main
from tests.conftest import ROOT
from tests.system_parts import needs


def test_agent_command_from_the_sweep_file_is_what_the_cli_accepts() -> None:
    with open(os.path.join(ROOT, "sweeps", "reacher.yaml")) as f:
        sweep = yaml.safe_load(f)
    params = {
        "env": "gym_Reacher-v2",
        "learning_rate": 0.0003,
        "normalize": True,
        "net_arch": [256, 256],
        "target_kl": None,
        "n_steps": 512,
    }
    argv = agent_command(sweep, params)
    assert argv[2:4] == ["-m", "ppo_dict.main_ppo"]
    assert argv[4:] == [
        "--env=gym_Reacher-v2",
        "--learning_rate=0.0003",
        "--normalize=True",
        "--net_arch=[256, 256]",
        "--target_kl=None",
        "--n_steps=512",
    ]
    cfg = config_from_args(argv[4:])
    validate(cfg)
    assert (cfg.learning_rate, cfg.normalize, cfg.net_arch, cfg.target_kl, cfg.n_steps) == (
        0.0003,
        True,
        [256, 256],
        None,
        512,
    )
    assert sweep["metric"] == {"name": "rollout/ep_rew_mean", "goal": "maximize"}


def write_sweep(tmp_path, method: str) -> str:
    sweep = {
        "method": method,
        "metric": {"name": "rollout/ep_rew_mean", "goal": "maximize"},
        "command": ["${env}", "${interpreter}", "-m", "ppo_dict.main_ppo", "${args}"],
        "parameters": {
            "env": {"value": "gym_CartPole-v1"},
            "learning_rate": {"values": [0.001, 0.0003]}
            if method == "grid"
            else {"distribution": "log_uniform_values", "min": 1e-4, "max": 1e-2},
            "normalize": {"values": [True, False]},
        },
    }
    path = tmp_path / f"{method}.yaml"
    path.write_text(yaml.safe_dump(sweep))
    return str(path)


TINY = [
    "--",
    "--num_workers",
    "0",
    "--n_envs",
    "2",
    "--n_steps",
    "128",
    "--batch_size",
    "64",
    "--n_epochs",
    "1",
    "--total_timesteps",
    "256",
    "--seed",
    "0",
    "--verbose",
    "0",
    "--plot",
    "False",
]


def test_local_sweep_grid_random_and_bayes(tmp_path, capsys) -> None:
    # real ppo_dict trials (the stub tests below cover the rest)
    for method, count in (("grid", 2), ("random", 1), ("bayes", 2)):
        out = tmp_path / method
        assert (
            sweep_main([write_sweep(tmp_path, method), "--count", str(count), "--n_jobs", "2", "--out", str(out), *TINY]) == 0
        )
        printed = capsys.readouterr().out
        results = json.loads((out / "results.json").read_text())
        assert len(results["trials"]) == count and all(t["status"].startswith("ok") for t in results["trials"])
        for trial in results["trials"]:
            summary_value = trial["value"]
            assert isinstance(summary_value, float) and summary_value > 0  # CartPole returns are positive
            assert os.path.isfile(out / f"trial_{trial['trial']:04d}" / "progress.csv")
        best = max(results["trials"], key=lambda t: t["value"])
        assert results["best"]["trial"] == best["trial"]
        header = next(line for line in printed.splitlines() if line.startswith("trial  "))
        assert header.split() == ["trial", "env", "learning_rate", "normalize", "rollout/ep_rew_mean", "status"]
        assert json.loads(printed.strip().splitlines()[-1])["best_params"] == best["params"]
        if method == "grid":  # Optuna's GridSampler: distinct points of the 2 x 2 grid, in a shuffled order
            grid = [
                {"env": "gym_CartPole-v1", "learning_rate": lr, "normalize": n}
                for lr in (0.001, 0.0003)
                for n in (True, False)
            ]
            points = [t["params"] for t in results["trials"]]
            assert all(p in grid for p in points) and points[0] != points[1]
        else:
            assert all(1e-4 <= t["params"]["learning_rate"] <= 1e-2 for t in results["trials"])


def test_the_table_shows_each_parameter_as_the_trial_ran_it(tmp_path, capsys) -> None:
    """A sweep file's ``total_timesteps: 200000`` run with ``-- --total_timesteps 256`` ran 256 steps: the table and
    results.json say 256 (``ran``, from the trial's config.json), results.json keeps the drawn value under ``params``."""
    path = write_sweep(tmp_path, "random")
    sweep = yaml.safe_load(open(path))
    sweep["parameters"]["total_timesteps"] = {"value": 200000}
    open(path, "w").write(yaml.safe_dump(sweep))
    assert sweep_main([path, "--count", "1", "--out", str(tmp_path / "out"), *TINY]) == 0
    printed = capsys.readouterr().out.splitlines()
    header = next(i for i, line in enumerate(printed) if line.startswith("trial  "))
    assert printed[header].split()[4] == "total_timesteps" and printed[header + 2].split()[4] == "256"
    trial = json.loads((tmp_path / "out" / "results.json").read_text())["trials"][0]
    assert (trial["params"]["total_timesteps"], trial["ran"]["total_timesteps"]) == (200000, 256)


def test_a_continued_study_runs_each_trial_in_a_run_directory_of_its_own(tmp_path, capsys) -> None:
    """Run directories are owned (``ppo_dict.run.run_dir``): the same command again continues the study into the same
    --out, each new trial in a fresh directory; another study given that --out has its colliding trial refused by the
    trial's own command line, the earlier trial's files kept byte for byte."""
    out, sweep = tmp_path / "out", write_sweep(tmp_path, "random")
    for _ in range(2):
        assert sweep_main([sweep, "--count", "1", "--out", str(out), *TINY]) == 0
    results = json.loads((out / "results.json").read_text())
    assert [t["trial"] for t in results["trials"]] == [0, 1], results["trials"]
    assert all(t["status"].startswith("ok") for t in results["trials"]), results["trials"]
    assert sorted(p.name for p in out.glob("trial_*")) == ["trial_0000", "trial_0001"]
    for trial in ("trial_0000", "trial_0001"):
        assert json.loads((out / trial / "config.json").read_text())["run_dir"] == str(out / trial)
    first = {p: p.read_bytes() for p in (out / "trial_0000").rglob("*") if p.is_file()}
    other = write_sweep(tmp_path, "grid")
    assert (
        sweep_main(
            [
                other,
                "--count",
                "1",
                "--study_name",
                "other",
                "--storage",
                f"sqlite:///{tmp_path}/other.db",
                "--out",
                str(out),
                *TINY,
            ]
        )
        == 1
    )  # no trial logged the metric
    status = json.loads((out / "results.json").read_text())["trials"][0]["status"]
    assert status.startswith("failed: exit 2: ") and f"run_dir='{out / 'trial_0000'}': holds an earlier run" in status, status
    assert {p: p.read_bytes() for p in (out / "trial_0000").rglob("*") if p.is_file()} == first


def test_bad_sweep_file_lists_every_problem(tmp_path, capsys) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "method": "grid",
                "metric": {"goal": "up"},
                "command": ["python"],
                "parameters": {"lr": {"distribution": "uniform", "min": 0, "max": 1}},
            }
        )
    )
    assert sweep_main([str(path), "--count", "1", "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "metric: needs a name and goal: minimize | maximize" in err
    assert "command: must be a list of strings that contains ${args}" in err
    assert "parameter 'lr': grid search needs values, not a uniform distribution" in err


@pytest.mark.parametrize(
    "text, expected",
    [
        (
            "a: &a [x, x, x, x, x, x, x, x, x]\n"
            + "".join(
                f"{c}: &{c} [*{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}]\n" for p, c in zip("abcdefgh", "bcdefghi")
            ),
            "its aliases expand it to",
        ),
        ("method: [random\n", "not a sweep file"),
        ("- method\n- grid\n", "a sweep file is a mapping"),
    ],
)
def test_a_hostile_or_broken_sweep_file_is_refused_in_one_line(tmp_path, capsys, text: str, expected: str) -> None:
    """An alias bomb (9 levels of 9 aliases: 387 million values) is refused as the hyperparameter files' is,
    a syntax error and a document that is not a mapping by name: exit 2, no traceback, no output directory."""
    path = tmp_path / "hostile.yaml"
    path.write_text(text)
    assert sweep_main([str(path), "--count", "1", "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and expected in err and "Traceback" not in err, err
    assert not (tmp_path / "o").exists()


def refused_sweep(tmp_path, capsys, sweep: dict, *flags: str) -> str:
    """The sweep file ``sweep`` refused before any trial: exit 2, one message, no traceback, no output folder."""
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(sweep))
    assert sweep_main([str(path), "--count", "1", "--out", str(tmp_path / "o"), *flags]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: cannot run this sweep:") and "Traceback" not in err, err
    assert not (tmp_path / "o").exists()
    return err


OWN = ["${env}", "${interpreter}", "-m", "ppo_dict.main_ppo", "${args}"]
GOOD = {"method": "random", "metric": {"name": "score", "goal": "maximize"}, "command": OWN, "parameters": {"x": {"value": 1}}}


def test_a_sweep_file_runs_only_ppo_dicts_own_command_unless_the_command_line_allows_another(tmp_path, capsys) -> None:
    """A sweep file's command is a program it launches: ppo_dict's own runs, any other only with --allow_command,
    which says so in one line before the first trial."""
    sentinel = tmp_path / "ran"
    command = ["${interpreter}", "-c", f"open({str(sentinel)!r}, 'w')", "${args}"]
    err = refused_sweep(tmp_path, capsys, {**GOOD, "command": command})
    assert (
        "is not ppo_dict's own command (${interpreter} -m ppo_dict.main_ppo ${args}): "
        "a sweep file runs another program only when the sweep's command line says so (--allow_command)"
        in err
        and not sentinel.exists()
    )
    path = tmp_path / "allowed.yaml"
    path.write_text(yaml.safe_dump({**GOOD, "command": command}))
    assert sweep_main([str(path), "--count", "1", "--out", str(tmp_path / "out"), ALLOW]) == 1  # it ran, and logged no metric
    said = [line for line in capsys.readouterr().out.splitlines() if line.startswith("--allow_command: ")]
    assert said == [f"--allow_command: each trial runs the sweep file's command, {' '.join(command)}, not ppo_dict's own"]
    assert sentinel.exists()


def test_a_sweep_file_cannot_set_what_only_the_command_line_sets(tmp_path, capsys) -> None:
    """trust_pickles and where a run writes (docs/safety.md): a sweep parameter naming one is refused, each named."""
    from ppo_dict.core.file_effects import COMMAND_LINE_ONLY

    err = refused_sweep(tmp_path, capsys, {**GOOD, "parameters": {name: {"value": "x"} for name in COMMAND_LINE_ONLY}})
    for name in COMMAND_LINE_ONLY:
        assert f"  - parameter {name!r}: set on the command line only (docs/safety.md), never by a sweep file" in err, err


@pytest.mark.parametrize(
    "change, expected",
    [
        ({"metric": "score"}, "metric: needs a name and goal"),
        ({"metric": {"name": ["score"]}}, "metric: needs a name and goal"),
        ({"parameters": ["x", "y"]}, "parameters: a list, not a mapping"),
        ({"parameters": {"x": [1, 2]}}, "parameter 'x': a list, not a mapping"),
        ({"parameters": {"x": {"values": []}}}, "parameter 'x': values must be a non-empty list"),
        ({"parameters": {"x": {"min": "0", "max": 1}}}, "parameter 'x': min, max and q must be finite numbers"),
        (
            {"parameters": {"x": {"distribution": ["uniform"], "min": 0, "max": 1}}},
            "parameter 'x': distribution must be a name",
        ),
        ({"parameters": {"x": {"distribution": "uniform"}}}, "parameter 'x': a uniform distribution needs min and max"),
        ({"method": ["grid"]}, "method=\"['grid']\": must be grid, random or bayes"),
        ({"command": ["${interpreter}", 3, "${args}"]}, "command: must be a list of strings that contains ${args}"),
    ],
    ids=lambda v: str(v)[:30],
)
def test_a_sweep_file_of_values_of_the_wrong_type_is_refused_by_name(tmp_path, capsys, change: dict, expected: str) -> None:
    assert expected in refused_sweep(tmp_path, capsys, {**GOOD, **change})


@pytest.mark.parametrize(
    "name, flag",
    [
        ("tensorboard-log", "tensorboard_log"),
        ("wandb-project-name", "project"),
        ("wandb-entity", "entity"),
        ("tensorboard_log", "tensorboard_log"),
    ],
)
def test_every_spelling_the_command_line_takes_of_a_command_line_setting_is_refused(
    tmp_path, capsys, name: str, flag: str
) -> None:
    """rl-zoo's spellings (--tensorboard-log, --wandb-project-name, --wandb-entity) are the same flags: a sweep parameter
    of that name passed the check, which matched exact names, and set where the trials write."""
    err = refused_sweep(tmp_path, capsys, {**GOOD, "parameters": {name: {"value": "/tmp/elsewhere"}}})
    shown = "" if name == flag else f" (--{flag})"
    assert f"  - parameter {name!r}{shown}: set on the command line only (docs/safety.md)" in err, err


@pytest.mark.parametrize(
    "parameters, effect",
    [
        ({"gym_packages": {"value": "my_envs"}}, "'gym_packages': imports the module(s) it names"),
        ({"gym-packages": {"values": ["a", "b"]}}, "'gym-packages': imports the module(s) it names"),
        (
            {"env": {"values": ["CartPole-v1", "evil_module:Env-v0"]}},
            "'env': names a module to import (<module>:<env id>) or a Godot game to launch",
        ),
        ({"env_path": {"value": "/tmp/game.x86_64"}}, "'env_path': launches the Godot program it names"),
        (
            {"env_kwargs": {"value": "dict(env_path='/tmp/game.x86_64')"}},
            "'env_kwargs': may name the Godot program launched (env_path, project, binary, game_args)",
        ),
    ],
    ids=lambda v: str(v)[:30],
)
def test_a_sweep_parameter_that_imports_or_launches_code_needs_allow_code(
    tmp_path, capsys, parameters: dict, effect: str
) -> None:
    """A sweep's gym_packages imported a local module, a Godot env_path launched a program, silently."""
    err = refused_sweep(tmp_path, capsys, {**GOOD, "parameters": parameters})
    assert (
        f"  - parameter {effect}; a sweep file imports and launches nothing unless the sweep's command line says so "
        "(--allow_code)"
    ) in err


def test_allow_code_says_each_parameter_that_imports_before_the_first_trial(tmp_path, capsys) -> None:
    path = tmp_path / "allowed.yaml"
    path.write_text(
        yaml.safe_dump(
            {**GOOD, "command": [sys.executable, "-c", "pass", "${args}"], "parameters": {"gym_packages": {"value": "math"}}}
        )
    )
    # ran; no metric
    assert sweep_main([str(path), "--count", "1", "--out", str(tmp_path / "out"), ALLOW, "--allow_code"]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "--allow_code: the sweep file's parameter 'gym_packages' imports the module(s) it names", out


@pytest.mark.parametrize(
    "change, expected",
    [
        (
            {"x": {"distribution": "q_uniform", "min": 0, "max": 1, "q": 0}},
            "parameter 'x': q=0: the step of a q_uniform distribution must be above 0",
        ),
        ({"x": {"distribution": "q_uniform", "min": 0, "max": 1, "q": -1}}, "parameter 'x': q=-1: the step"),
        (
            {"x": {"distribution": "log_uniform_values", "min": 0, "max": 1}},
            "parameter 'x': min=0: a log_uniform_values distribution draws from min > 0",
        ),
        (
            {"x": {"distribution": "int_uniform", "min": 0.5, "max": 3}},
            "parameter 'x': an int_uniform distribution needs whole numbers",
        ),
    ],
    ids=lambda v: str(v)[:40],
)
def test_a_range_optuna_cannot_draw_from_is_refused_before_optuna_sees_it(
    tmp_path, capsys, change: dict, expected: str
) -> None:
    """q: 0, q: -1 and a log range from 0 ended in Optuna's tracebacks at the first trial."""
    assert expected in refused_sweep(tmp_path, capsys, {**GOOD, "parameters": change})


def test_a_metric_that_names_text_is_refused_and_a_text_value_fails_its_trial(tmp_path, capsys) -> None:
    from ppo_dict.run.sweep import metric_value

    err = refused_sweep(tmp_path, capsys, {**GOOD, "metric": {"name": "env", "goal": "maximize"}})
    assert "metric: 'env' is text in a run's summary, not a number to minimize or maximize" in err
    assert metric_value({"metrics": {"m": "high"}}, "m") != metric_value({"metrics": {"m": 1.5}}, "m") == 1.5
    assert str(metric_value({"metrics": ["m"], "m": [1]}, "m")) == "nan"


def test_a_sweep_file_that_is_a_fifo_or_a_folder_is_refused_at_once(tmp_path, capsys) -> None:
    os.mkfifo(tmp_path / "fifo.yaml")
    (tmp_path / "folder.yaml").mkdir()
    for name, kind in (("fifo.yaml", "a FIFO (named pipe)"), ("folder.yaml", "a directory")):
        assert sweep_main([str(tmp_path / name), "--out", str(tmp_path / "o")]) == 2
        assert (
            capsys.readouterr().err
            == f"error: cannot read {tmp_path / name}: {tmp_path / name}: is {kind}, not a regular file\n"
        )


# ------------------------------------------------------------------------- studies shared by processes
STUB = os.path.join(ROOT, "tests", "sweep_trial.py")


#: a stub's command is not ppo_dict's own: the sweep runs it when its command line says so
ALLOW = "--allow_command"


def stub_sweep(tmp_path, method: str, parameters: dict) -> str:
    """A sweep file whose trials are tests/sweep_trial.py (run with :data:`ALLOW`): the storage machinery is real,
    a trial costs 0.1 s."""
    path = tmp_path / f"{method}.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "method": method,
                "metric": {"name": "score", "goal": "maximize"},
                "command": ["${interpreter}", STUB, "${args}"],
                "parameters": parameters,
            }
        )
    )
    return str(path)


def start_sweep(*args: str) -> subprocess.Popen:
    """``python -m ppo_dict.sweep ARGS`` of a stub sweep (:func:`stub_sweep`), which the sweep runs with :data:`ALLOW`."""
    return subprocess.Popen(
        [sys.executable, "-m", "ppo_dict.sweep", *args, ALLOW],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": ROOT},
    )


def finish(proc: subprocess.Popen, timeout: float = 240) -> tuple[int, str, str]:
    out, err = proc.communicate(timeout=timeout)
    return proc.returncode, out, err


def trials_of(storage: str, name: str) -> list:
    return optuna.load_study(study_name=name, storage=open_storage(storage, retry)).get_trials()


@pytest.mark.parametrize("kind, processes", [("sqlite", 3), ("journal", 2)])
def test_processes_on_one_machine_share_one_embedded_storage(tmp_path, kind, processes) -> None:
    storage = f"sqlite:///{tmp_path}/study.db" if kind == "sqlite" else str(tmp_path / "study.journal")
    sweep = stub_sweep(tmp_path, "random", {"x": {"min": 0.0, "max": 1.0}})
    procs = [
        start_sweep(
            sweep,
            "--storage",
            storage,
            "--study_name",
            "shared",
            "--count",
            "3",
            "--n_jobs",
            "2",
            "--out",
            str(tmp_path / f"out{i}"),
        )
        for i in range(processes)
    ]
    results = [finish(p) for p in procs]
    assert all(code == 0 for code, _, _ in results), [err[-2000:] for _, _, err in results]
    trials = trials_of(storage, "shared")
    assert sorted(t.number for t in trials) == list(range(3 * processes))  # numbered by the study, across processes
    assert {t.state.name for t in trials} == {"COMPLETE"}
    assert len({t.user_attrs["owner"]["pid"] for t in trials}) == processes  # every process ran its share
    assert all(t.value == -((t.params["x"] - 0.3) ** 2) for t in trials)
    assert all("study shared in " in out for _, out, _ in results)


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGINT])
def test_stopped_sweep_resumes_and_its_running_trial_is_failed_and_run_again(tmp_path, sig) -> None:
    """SIGKILL: nothing is cleaned up, the next start finds the trial's owner gone. SIGINT (Ctrl-C):
    the sweep stops its trial, which is failed as interrupted, and exits 130. Either way the trial
    stays in the study, failed, and its parameters run again when the same command is rerun."""
    marker = tmp_path / "slept"
    sweep = stub_sweep(tmp_path, "grid", {"x": {"values": [0.0, 0.3, 0.6]}, "sleep_once": {"value": str(marker)}})
    args = (sweep, "--count", "10", "--out", str(tmp_path / "out"))  # the default storage: sqlite in --out
    proc = start_sweep(*args)
    pid_file = None
    deadline = time.time() + 60
    while time.time() < deadline and pid_file is None:  # the first trial sleeps: stop the sweep then
        found = list((tmp_path / "out").glob("trial_*/pid")) if marker.exists() else []
        pid_file = found[0] if found else None
        time.sleep(0.1)
    assert pid_file is not None, proc.communicate(timeout=5)
    trial_pid = int(pid_file.read_text())
    proc.send_signal(sig)
    code, _, err = finish(proc, timeout=60)
    assert code == (-9 if sig == signal.SIGKILL else 130), err
    deadline = time.time() + 10
    while time.time() < deadline and alive(trial_pid):  # SIGKILL: the kernel sends the orphaned trial SIGTERM
        time.sleep(0.1)
    assert not alive(trial_pid), "the trial outlived its sweep"
    code, out, err = finish(start_sweep(*args))
    assert code == 0, err
    stopped = int(pid_file.parent.name.split("_")[1])
    gone = f"trial {stopped}: its process ({proc.pid}) is gone: failed, and queued again"
    assert (gone in out) == (sig == signal.SIGKILL)
    trials = trials_of(f"sqlite:///{tmp_path}/out/optuna.db", "grid")
    assert trials[stopped].state.name == "FAIL" and trials[stopped].params  # failed, never lost
    complete = [t for t in trials if t.state.name == "COMPLETE"]
    assert sorted(t.params["x"] for t in complete) == [0, 1, 2]  # every grid point, the stopped one run again
    assert [t.system_attrs.get("failed_trial") for t in complete].count(stopped) == 1
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    assert results["trials"][stopped]["status"] == (
        "failed: its process died" if sig == signal.SIGKILL else "failed: interrupted"
    )


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/status") as f:
            return "\nState:\tZ" not in f.read()
    except OSError:
        return False


def test_a_trial_that_fails_by_itself_is_failed_for_good_and_the_sweep_goes_on(tmp_path, capsys) -> None:
    sweep = stub_sweep(tmp_path, "grid", {"crash": {"values": [False, True]}, "x": {"value": 0.3}})
    assert sweep_main([sweep, "--count", "5", "--out", str(tmp_path / "out"), ALLOW]) == 0
    printed = capsys.readouterr().out
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    statuses = {t["params"]["crash"]: t["status"] for t in results["trials"]}
    assert len(results["trials"]) == 2 and statuses[False].startswith("ok")
    assert statuses[True] == "failed: exit 1: RuntimeError: boom"  # the trial's own last stderr line
    assert results["best"]["params"] == {"crash": False, "x": 0.3} and "failed: exit 1: RuntimeError: boom" in printed


def test_bad_storage_or_another_sweep_on_the_same_study_is_refused_before_any_trial(tmp_path, capsys) -> None:
    sweep = stub_sweep(tmp_path, "random", {"x": {"min": 0.0, "max": 1.0}})
    assert (
        sweep_main([sweep, "--storage", "postgresql://me:s3cret@127.0.0.1:1/optuna", "--out", str(tmp_path / "out"), ALLOW])
        == 2
    )
    err = capsys.readouterr().err
    assert err.startswith("error: cannot open the Optuna storage postgresql://me:***@127.0.0.1:1/optuna: OperationalError:")
    assert not (tmp_path / "out").exists()
    storage = f"sqlite:///{tmp_path}/s.db"
    assert (
        sweep_main([sweep, "--storage", storage, "--study_name", "s", "--count", "1", "--out", str(tmp_path / "a"), ALLOW])
        == 0
    )
    other = stub_sweep(tmp_path, "grid", {"x": {"values": [0.1]}})
    assert (
        sweep_main([other, "--storage", storage, "--study_name", "s", "--count", "1", "--out", str(tmp_path / "b"), ALLOW])
        == 2
    )
    assert "error: study 's' was made from another sweep (method, parameters differ)" in capsys.readouterr().err
    assert len(trials_of(storage, "s")) == 1


@needs("postgresql")
def test_processes_join_one_study_on_a_real_postgresql_server(tmp_path) -> None:
    """The multi-machine case: every process talks to the server over TCP, as on other machines."""
    from tests.postgres_helpers import private_postgres

    sweep = stub_sweep(tmp_path, "bayes", {"x": {"min": 0.0, "max": 1.0}, "bonus": {"values": [0, 1]}})
    with private_postgres() as url:
        procs = [
            start_sweep(
                sweep,
                "--storage",
                url,
                "--study_name",
                "pg",
                "--count",
                "3",
                "--n_jobs",
                "2",
                "--out",
                str(tmp_path / f"host{i}"),
            )
            for i in range(2)
        ]
        results = [finish(p) for p in procs]
        assert all(code == 0 for code, _, _ in results), [err[-2000:] for _, _, err in results]
        trials = trials_of(url, "pg")
        assert sorted(t.number for t in trials) == list(range(6)) and {t.state.name for t in trials} == {"COMPLETE"}
        assert len({t.user_attrs["owner"]["pid"] for t in trials}) == 2
        best = optuna.load_study(study_name="pg", storage=open_storage(url, retry)).best_trial
        last = json.loads(results[-1][1].strip().splitlines()[-1])  # the summary line of a process that finished
        assert last["best_value"] <= best.value
