"""Bad input refused in one clean message before anything starts (docs/bad_input.md): the issue's six
commands, the machine's resources, the Python face's path through the same check, ``--dry_run``,
and the failures the command-line fuzzer found (``test_fuzz_cli.py``), kept as ordinary tests."""

from __future__ import annotations

import dataclasses
import multiprocessing.process
import os
import subprocess
import sys
import tempfile

import pytest

from ppo_dict import main_ppo
from ppo_dict.core.config import Config
from ppo_dict.core.errors import ConfigError
from ppo_dict.core.machine import Machine
from ppo_dict.run.checks import check_run
from tests.cli_here import run_here
from tests.conftest import ROOT

GB = 2**30
#: A roomy machine: 8 cores, 16 GB, a large /dev/shm, no process limit.
ROOMY = Machine(
    cpus=8,
    memory_available=16 * GB,
    shm_free=8 * GB,
    tmp_free=100 * GB,
    nproc_limit=None,
    user_tasks=0,
    task_room=30000,
    nofile_limit=1024,
    open_files=10,
)


@pytest.fixture
def started(monkeypatch) -> list[str]:
    """The processes of the run that the code under test starts (workers; the forkserver starts with the first).
    (Imports may run short helpers of their own: glfw's, imported with MuJoCo, asks a subprocess its version.)"""
    starts: list[str] = []
    start = multiprocessing.process.BaseProcess.start
    monkeypatch.setattr(multiprocessing.process.BaseProcess, "start", lambda self: starts.append(self.name) or start(self))
    return starts


def refuse(capsys, *argv: str) -> list[str]:
    """Run the command line here; it must exit 2 with one clean message: its problem lines."""
    code = main_ppo.main(list(argv))
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err, err
    problems = [line.removeprefix("  - ") for line in err.splitlines() if line.startswith("  - ")]
    assert err.startswith(f"error: {len(problems)} invalid setting(s):\n  - "), err
    return problems


# ------------------------------------------------------------------------------ the issue's six commands
def test_the_issues_six_commands_give_one_clean_message_each_and_start_nothing(capsys, started, tmp_path) -> None:
    run_dir = ["--run_dir", str(tmp_path / "run")]
    assert refuse(capsys, "--env", "gym_CartPole-v1", "--num_workers", "99999", "--total_timesteps", "100", *run_dir)[
        0
    ].startswith("num_workers=99999: more than 4x the ")
    shm = refuse(
        capsys, "--env", "test_dummy", "--model", "cnn", "--n_envs", "64", "--num_workers", "2", "--n_steps", "65536", *run_dir
    )
    assert any(
        p.startswith("n_steps x n_envs = 65536 x 64: rollout storage needs 84698.6 MB of shared memory") for p in shm
    ) or any(p.startswith("n_steps x n_envs = 65536 x 64: the run needs about ") for p in shm), shm
    assert refuse(
        capsys, "--env", "gym_CartPole-v1", "--n_envs", "0", "--batch_size", "3", "--learning_rate", "abc", *run_dir
    ) == ["learning_rate='abc': could not convert string to float: 'abc'", "n_envs=0: must be in [1, inf]"]
    assert refuse(capsys, "--net_arch", "64,,64", *run_dir) == ["net_arch='64,,64': item 2 is empty (write sizes as 64,64)"]
    threads = refuse(capsys, "--env", "gym_CartPole-v1", "--torch_threads", "1000000", *run_dir)
    assert threads[0].startswith("torch_threads=1000000: more than 4x the ")
    assert refuse(capsys, "--env", "gym_CartPole-v1", "--env_kwargs", "{", *run_dir) == [
        "env_kwargs='{': not a Python literal ('{' was never closed): '{'"
    ]
    assert started == [] and not os.path.exists(tmp_path / "run")


@pytest.mark.parametrize(
    "flags, first",
    [
        (("--num_workers", "99999", "--total_timesteps", "100"), "  - num_workers=99999: more than 4x the "),
        (("--torch_threads", "1000000"), "  - torch_threads=1000000: more than 4x the "),
    ],
)
def test_the_issues_worst_commands_as_real_commands(flags: tuple[str, ...], first: str) -> None:
    """Today's 99,999 worker starts and SIGSEGV: exit 2, one message, no traceback, no process left."""
    proc = subprocess.run(
        [sys.executable, "-m", "ppo_dict.main_ppo", "--env", "gym_CartPole-v1", *flags],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": ROOT},
        start_new_session=True,
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.splitlines()[1].startswith(first) and "--oversubscribe True" in proc.stderr


# ------------------------------------------------------------------------------ resources (a machine described)
def problems(cfg: Config, machine: Machine) -> list[str]:
    with pytest.raises(ConfigError) as exc:
        check_run(cfg, machine=machine)
    return exc.value.problems


def test_more_workers_or_threads_than_4x_the_cores_need_oversubscribe() -> None:
    two_cores = dataclasses.replace(ROOMY, cpus=2)
    cfg = Config(env="gym_CartPole-v1", num_workers=9, n_envs=9, update_threads=9, n_steps=8, batch_size=8)
    assert problems(cfg, two_cores) == [
        "num_workers=9: more than 4x the 2 CPUs this process may run on (8); use at most 8, "
        "or --oversubscribe True if you mean it (slow envs, such as games, may want more workers than cores)",
        "update_threads=9: more than 4x the 2 CPUs this process may run on (8); use at most 8, "
        "or --oversubscribe True if you mean it (slow envs, such as games, may want more workers than cores)",
    ]
    check = check_run(cfg.replace(oversubscribe=True), machine=two_cores)
    assert check.needs.workers == 8 and check.needs.threads == 9  # the main process steps one worker's share


def test_process_and_file_limits_and_docker_shm_are_judged_before_start() -> None:
    cfg = Config(env="gym_CartPole-v1", num_workers=8, n_envs=8, n_steps=8, batch_size=8)
    low = dataclasses.replace(ROOMY, nproc_limit=40, user_tasks=30, nofile_limit=64, open_files=20, task_room=None)
    assert problems(cfg, low) == [
        "num_workers=8: the run needs about 20 processes and threads (7 workers, 1 torch threads), "
        "this user runs 30 of the 40 that ulimit -u allows; use fewer, or raise ulimit -u",
        "num_workers=8: 7 workers need about 112 open files, ulimit -n allows 64; raise it (ulimit -n 128), "
        "or use fewer workers",
    ]
    docker = dataclasses.replace(ROOMY, shm_free=64 * 2**20, tmp_free=32 * 2**20)
    big = Config(env="gym_Pendulum-v1", num_workers=2, n_envs=64, n_steps=100_000)
    assert problems(big, docker) == [
        "n_steps x n_envs = 100000 x 64: rollout storage needs 231.9 MB of shared memory, /dev/shm has 64.0 MB free and "
        f"{tempfile.gettempdir()} has 32.0 MB; use docker run --shm-size=1g, or fewer n_steps x n_envs"
    ]
    # where the temp dir has room, multiprocessing puts the storage there: taken (the pool warns when it starts)
    assert check_run(big, machine=dataclasses.replace(docker, tmp_free=100 * GB)).needs.shared > docker.shm_free


def test_memory_names_the_largest_part() -> None:
    small = dataclasses.replace(ROOMY, memory_available=2 * GB)
    assert problems(Config(env="gym_CartPole-v1", net_arch="10000,10000", num_workers=0), small)[0].startswith(
        "net_arch=[10000, 10000]: the run needs about "
    )
    assert problems(Config(env="gym_CartPole-v1", n_envs=2000, num_workers=0, n_steps=50_000), small)[0].startswith(
        "n_steps x n_envs = 50000 x 2000: the run needs about "
    )
    assert problems(Config(env="gym_CartPole-v1", num_workers=64, n_envs=64, mp_method="spawn", oversubscribe=True), small)[
        0
    ].startswith("num_workers=64: the run needs about ")


def test_a_recurrent_runs_stored_lstm_states_are_counted() -> None:
    """Each env's (h, c) of both LSTMs at every step: 128 x 8192 x 256 x 16 bytes = 4.3 GB, where the
    same rollout of a feed-forward policy needs about 100 MB."""
    small = dataclasses.replace(ROOMY, memory_available=2 * GB)
    settings = dict(env="gym_CartPole-v1", n_envs=128, num_workers=0, n_steps=8192, batch_size=8192)
    check_run(Config(**settings), machine=small)  # fits
    assert problems(Config(model="mlp_lstm", **settings), small)[0].startswith(
        "n_steps x n_envs = 8192 x 128: the run needs about "
    )


# ------------------------------------------------------------------------------ the Python face: the same check
def test_keyword_arguments_go_through_the_same_check_every_problem_listed() -> None:
    """``Config.read`` (what a Python API gives its keyword arguments to) never raises; ``check_run``
    lists the unreadable values, unknown names and every other problem together."""
    cfg, unreadable = Config.read(dict(env="gym_CartPole-v1", learning_rate="abc", n_envs=0, bacth_size=3, net_arch="64,,64"))
    assert unreadable == {
        "learning_rate": "learning_rate='abc': could not convert string to float: 'abc'",
        "net_arch": "net_arch='64,,64': item 2 is empty (write sizes as 64,64)",
        "bacth_size": "bacth_size: no such setting (did you mean batch_size?)",
    }
    with pytest.raises(ConfigError) as exc:
        check_run(cfg, unreadable=unreadable, machine=ROOMY)
    assert exc.value.problems == [*unreadable.values(), "n_envs=0: must be in [1, inf]"]
    with pytest.raises(ConfigError, match="learning_rate='abc'"):  # built directly, a Config refuses what it cannot read
        Config(learning_rate="abc")


def test_sb3s_python_api_judges_the_machine_as_the_command_line_does(started) -> None:
    """``from ppo_dict import PPO`` with an env ppo_dict's workers will step: the machine's resources
    are judged before the pool starts, in the command line's words."""
    from ppo_dict import PPO

    with pytest.raises(ConfigError) as exc:
        PPO("MlpPolicy", "CartPole-v1", torch_threads=10**6)
    assert exc.value.problems[0].startswith("torch_threads=1000000: more than 4x the ")
    assert any("processes and threads" in p for p in exc.value.problems)
    with pytest.raises(ConfigError, match=r"n_steps x n_envs = 100000000 x 64: "):
        PPO("MlpPolicy", "CartPole-v1", n_envs=64, n_steps=10**8)
    assert [name for name in started if name.startswith("ppo_dict")] == []


# ------------------------------------------------------------------------------ --dry_run
def test_dry_run_prints_the_plan_starts_nothing_and_writes_nothing(capsys, started, tmp_path) -> None:
    code = main_ppo.main(
        [
            "--env",
            "gym_CartPole-v1",
            "--n_envs",
            "4",
            "--num_workers",
            "2",
            "--n_steps",
            "64",
            "--run_dir",
            str(tmp_path / "run"),
            "--dry_run",
        ]
    )
    out = capsys.readouterr().out
    assert code == 0 and started == [] and not os.path.exists(tmp_path / "run")
    lines = out.splitlines()
    assert lines[0] == "dry run: the config passes every check; nothing was started"
    assert lines[2].startswith(
        "layout: 4 envs: 1 worker process x 2 envs (forkserver) + 2 in this process; as asked (num_workers 2); "
    )
    assert (
        lines[3]
        == "rollout: n_steps 64 x 4 envs = 256 transitions; minibatches of 64, 10 epochs; 1000000 steps = 3907 rollouts"
    )
    assert lines[4] == "policy: mlp, 9,155 parameters, on cpu; torch threads 1 (update: auto)"
    assert lines[-2] == f"seed: drawn at start; run directory: {tmp_path / 'run'} (not created)"
    assert (
        lines[-1]
        == f"writes: {tmp_path / 'run'}/ (config.json, progress.csv, monitor.csv, checkpoints/, .lock, learning_curve.png)"
    )


# ------------------------------------------------------------------------------ found by the fuzzer
@pytest.mark.parametrize(
    "argv, expected",
    [
        (["--resume", "/etc/hostname"], "resume='/etc/hostname': cannot load /etc/hostname: UnpicklingError: "),
        (["--device", "cuda:x"], "device='cuda:x': must be auto, cpu, cuda or cuda:N"),
        (["--step_timeout", "1e308"], "step_timeout=1e+308: must be in (0.0, 2000000.0]"),
        (["--total_timesteps", "inf"], "total_timesteps='inf': cannot convert float infinity to integer"),
        (
            ["--num_workers", "2", "--n_envs", "4", "--main_envs", "99"],
            "main_envs=99: must be a multiple of 1 in [0, 3] for 4 envs beside 1 worker process, each keeping some",
        ),
        (
            ["--gym_packages", "no_such_package_xyz"],
            "gym_packages=no_such_package_xyz: cannot be imported: ModuleNotFoundError: ",
        ),
        (["--env_kwargs", "{1: 2}"], "env_kwargs='{1: 2}': keyword argument names must be identifiers, got 1"),
        (
            ["--n_steps", "1000000000000000000"],
            "n_steps x n_envs = 1000000000000000000 x 1: the rollout storage cannot be laid out",
        ),
        (["--n_steps", "1000000000000000000000"], "n_steps=1000000000000000000000: must be in [1, 9223372036854775807]"),
        (["--batch_size", "1" + "0" * 400], "batch_size=1" + "0" * 400 + ": must be in [1, 9223372036854775807]"),
        (
            ["--num_workers", "1" + "0" * 30, "--oversubscribe", "True"],
            "num_workers=1" + "0" * 30 + ": must be in [0, 9223372036854775807]",
        ),
        (["--model", "mlp_lstm", "--n_lstm_layers", "1000000000"], "n_lstm_layers=1000000000: must be in [1, 100]"),
        # each once planned a layout of a billion envs or workers, env by env (an OOM kill after 20 GB)
        (["--n_envs", "1000000000"], "n_steps x n_envs = 2048 x 1000000000: the rollout storage cannot be laid out"),
        (
            ["--n_envs", "1000000000", "--double_buffer"],
            "n_steps x n_envs = 2048 x 1000000000: the rollout storage cannot be laid out",
        ),
        (
            ["--num_workers", "1000000000", "--oversubscribe", "True"],
            "n_steps x n_envs = 2048 x 1000000000: the rollout storage cannot be laid out",
        ),
    ],
)
def test_fuzzer_findings_are_refused_naming_the_setting(capsys, argv: list[str], expected: str) -> None:
    assert refuse(capsys, "--env", "gym_CartPole-v1", *argv)[0].startswith(expected)


def test_an_env_setting_out_of_range_is_not_built_to_probe_it(capsys) -> None:
    """``frame_stack=1000000`` once stacked a million observations while probing the env (an OOM kill)."""
    assert refuse(capsys, "--env", "gym_PPODictToy-v0", "--gym_packages", "ppo_dict.envs.toy", "--frame_stack", "1000000") == [
        "frame_stack=1000000: must be in [1, 64]"
    ]


def test_a_policy_that_cannot_take_the_observation_is_refused(capsys) -> None:
    """NatureCNN on 8x8 images raised inside PPO (a traceback); the check builds the policy on the meta device first."""
    assert refuse(capsys, "--env", "test_dummy", "--model", "cnn", "--env_kwargs", "dict(image_size=8)")[0].startswith(
        "model='cnn': the policy cannot be built for test_dummy = PPODictTestDummy-v0's observations (Box(0, 255, (3, 8, 8), "
        "uint8)): RuntimeError: "
    )


def test_a_refused_lstm_setting_is_listed_alone_not_again_as_a_policy_that_cannot_be_built(capsys) -> None:
    """sb3-contrib's own refusal of shared_lstm with a critic LSTM was listed a second time, as the measured policy's failure;
    a billion LSTM layers were built on the meta device to be measured (a hang)."""
    assert refuse(capsys, "--env", "gym_CartPole-v1", "--model", "mlp_lstm", "--shared_lstm", "True") == [
        "shared_lstm=True: the critic either shares the actor's LSTM or has its own (enable_critic_lstm, True by default): "
        "add --enable_critic_lstm False (sb3-contrib refuses both)"
    ]


# ------------------------------------------------------------------------------ numbers, YAML, env infos, the other tools
@pytest.mark.parametrize("value", ["1e300", "lin_1e38", "3.5e37"])
def test_a_learning_rate_where_adams_step_overflows_float32_is_refused(capsys, tmp_path, value: str) -> None:
    """Adam's first step is 10 x lr, handed to torch as a float32: 1e300 was a traceback
    ("value cannot be converted to type float without overflow") in the first update."""
    for dry_run in ((), ("--dry_run",)):
        problems = refuse(
            capsys, "--env", "gym_CartPole-v1", "--learning_rate", value, "--run_dir", str(tmp_path / "run"), *dry_run
        )
        assert problems == [f"learning_rate={float(value.removeprefix('lin_'))!r}: must be in [0.0, 3.4028234663852886e+37)"]
    assert not (tmp_path / "run").exists()
    assert Config(learning_rate=3e37).problems() == []  # below the bound: a run that diverges says so itself (NonFiniteError)


def test_a_yaml_alias_bomb_or_recursive_alias_is_refused_not_expanded(capsys, tmp_path) -> None:
    """A "billion laughs" file hung while its value was formatted (memory growing without bound)."""
    laughs = ["a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    laughs += [f"{b}: &{b} [{', '.join([f'*{a}'] * 9)}]" for a, b in zip("abcdefgh", "bcdefghi")]
    bomb, loop, deep = tmp_path / "bomb.yml", tmp_path / "loop.yml", tmp_path / "deep.yml"
    bomb.write_text("\n".join(laughs) + "\nCartPole-v1:\n  n_steps: *i\n")
    loop.write_text("CartPole-v1: &loop\n  n_steps: 8\n  again: [*loop]\n")
    deep.write_text("CartPole-v1: " + "[" * 5000 + "]" * 5000 + "\n")
    assert refuse(capsys, "--env", "gym_CartPole-v1", "--hyperparams", str(bomb)) == [
        f"hyperparams='{bomb}': cannot read: its aliases expand it to 926,177,117 values; "
        "a hyperparameter file holds at most 100,000"
    ]
    assert refuse(capsys, "--env", "gym_CartPole-v1", "--hyperparams", str(loop), "--dry_run") == [
        f"hyperparams='{loop}': cannot read: an alias refers to a node that contains it (a recursive document)"
    ]
    assert refuse(capsys, "--env", "gym_CartPole-v1", "--hyperparams", str(deep)) == [
        f"hyperparams='{deep}': cannot read: nested too deeply"
    ]


def test_rl_zoos_own_aliases_still_read() -> None:
    """rl-zoo's ppo.yml uses aliases (``<<: *pybullet-defaults``): bounded, not refused."""
    pytest.importorskip("rl_zoo3")
    from ppo_dict.interop.hyperparams import load_hyperparams

    values, problems = load_hyperparams("rl_zoo3", "gym_HopperBulletEnv-v0")
    assert values["normalize"] is True and not any("cannot read" in p for p in problems)


def test_info_keywords_the_env_does_not_give_are_refused_before_start(capsys) -> None:
    """CartPole's infos hold no is_success: --dry_run accepted it and the run died at the first episode end (a KeyError)."""
    for dry_run in ((), ("--dry_run",)):
        assert refuse(
            capsys, "--env", "gym_CartPole-v1", "--seed", "0", "--info_keywords", "is_success,distance", *dry_run
        ) == [
            "info_keywords=is_success,distance: gym_CartPole-v1's info at an episode end has no 'is_success' or 'distance' "
            "(its keys: []; one env was played to its first episode end to check)"
        ]
    assert (
        main_ppo.main(
            [
                "--env",
                "gym_PPODictGoal-v0",
                "--gym_packages",
                "ppo_dict.envs.goal",
                "--info_keywords",
                "is_success,distance",
                "--dry_run",
            ]
        )
        == 0
    )


def tool(module: str, *argv: str) -> subprocess.CompletedProcess:
    """``python -m <module> <argv>``, its entry point called in this process (tests/cli_here.py)."""
    return run_here(*argv, module=module)


def save_cartpole_model(path) -> None:
    """An untrained CartPole model, saved at ``path`` as training saves one (for enjoy and the ONNX export)."""
    from ppo_dict.algo.model import Model, build_normalizer, build_policy
    from ppo_dict.vec import env_spec, probe_env

    cfg = Config(env="gym_CartPole-v1", seed=0)
    backend = probe_env(env_spec(cfg))
    obs, act = backend.observation_space, backend.action_space
    Model(cfg, build_policy(cfg, obs, act), build_normalizer(cfg, obs, 1), obs, act).save(str(path))


def test_enjoy_and_onnx_export_refuse_cleanly(tmp_path) -> None:
    """``enjoy --seed -5`` was gymnasium's traceback at the first reset; a Godot model was make_env's ValueError in
    both tools; an unwritable --out was found only when the export wrote it."""
    import torch

    path = tmp_path / "model.pt"
    save_cartpole_model(path)
    proc = tool("ppo_dict.enjoy", str(tmp_path), "--model", str(path), "--seed", "-5")
    assert proc.returncode == 2 and proc.stderr.endswith(
        "python -m ppo_dict.enjoy: error: --seed -5: must be >= 0 (--help lists every flag)\n"
    ), proc.stderr
    assert "Traceback" not in proc.stderr and proc.stdout == ""
    proc = tool("ppo_dict.export_onnx", str(path), "--out", str(path / "policy.onnx"))
    assert (
        proc.returncode == 2
        and proc.stderr == f"error: out='{path / 'policy.onnx'}': {path} is a file, so nothing can be created under it\n"
    )
    state = torch.load(path, weights_only=True)
    state["config"]["env"] = "godot_demo"
    godot = tmp_path / "godot.pt"
    torch.save(state, godot)
    refusal = (
        f"error: {godot}: trained on the Godot game godot_demo, which is played through the trainer's worker pool "
        "(python -m ppo_dict.main_ppo_godot), not built as a gymnasium env here: "
        "enjoy and the ONNX export take models of gymnasium envs\n"
    )
    for proc in (tool("ppo_dict.enjoy", str(tmp_path), "--model", str(godot)), tool("ppo_dict.export_onnx", str(godot))):
        assert proc.returncode == 2 and proc.stderr == refusal, proc.stderr
    assert sorted(os.listdir(tmp_path)) == ["godot.pt", "model.pt"]
