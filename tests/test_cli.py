"""The command line generated from Config: spellings of booleans and of what a wandb agent sends, bad flags."""

import pytest

from ppo_dict.core.parse import make_schedule
from ppo_dict.run import cli
from ppo_dict.run.cli import config_from_args


@pytest.mark.parametrize(
    "argv, expected",
    [
        (["--normalize"], True),
        (["--normalize", "True"], True),
        (["--normalize=False"], False),
        (["--normalize=true"], True),
        (["--normalize", "0"], False),
        ([], False),
    ],
)
def test_boolean_spellings(argv, expected) -> None:
    assert config_from_args(argv).normalize is expected


def test_wandb_agent_command_line() -> None:
    cfg = config_from_args(
        ["--learning_rate=0.0003", "--normalize=True", "--net_arch=[256, 256]", "--target_kl=None", "--clip_range=lin_0.2"]
    )
    assert cfg.learning_rate == 0.0003 and cfg.normalize is True and cfg.net_arch == [256, 256] and cfg.target_kl is None
    assert make_schedule(cfg.clip_range)(0.5) == 0.5 * 0.2
    assert make_schedule(cfg.learning_rate)(0.25) == 0.0003


def test_unknown_and_abbreviated_flags_are_refused(capsys) -> None:
    for argv in (["--bacth_size", "64"], ["--batch", "64"]):
        with pytest.raises(SystemExit) as exc:
            config_from_args(argv)
        assert exc.value.code == 2
    assert "unrecognized arguments: --batch 64" in capsys.readouterr().err


def test_the_command_line_is_parsed_once_on_the_way_to_training(monkeypatch, capsys, tmp_path) -> None:
    """main reads --resume, --trained_agent and the config from one parse (a bad value refused after it)."""
    import argparse

    from ppo_dict import main_ppo

    parses = []
    parse_args = argparse.ArgumentParser.parse_args
    monkeypatch.setattr(
        argparse.ArgumentParser, "parse_args", lambda self, *a, **k: parses.append(1) or parse_args(self, *a, **k)
    )
    assert main_ppo.main(["--env", "gym_CartPole-v1", "--n_steps", "0", "--run_dir", str(tmp_path / "run")]) == 2
    assert "n_steps" in capsys.readouterr().err
    assert len(parses) == 1
    # the one parse keeps list flags
    assert config_from_args(["--n_steps", "7", "--gym_packages", "a", "b"]).gym_packages == ("a", "b")


# ------------------------------------------------------------------------------------------------ what an rl-zoo user types
def dry_run(capsys, *argv: str) -> tuple[int, str, str]:
    """``main_ppo.main(argv + --dry_run)`` here: its exit status, stdout and stderr."""
    from ppo_dict import main_ppo

    code = main_ppo.main([*argv, "--dry_run"])
    out, err = capsys.readouterr()
    return code, out, err


def test_a_plain_gymnasium_id_is_the_prefixed_one(capsys) -> None:
    """rl-zoo's ``--env CartPole-v1``: the ``gym_`` prefix is optional, the run plan the same."""
    from ppo_dict.envs import gym_id_of, resolve_env_name

    code, plain, err = dry_run(capsys, "--env", "CartPole-v1", "--n_envs", "2")
    assert code == 0, err
    code, prefixed, err = dry_run(capsys, "--env", "gym_CartPole-v1", "--n_envs", "2")
    assert code == 0, err

    def plan(text: str) -> list[str]:  # the plan less the machine's free memory, which changes between two looks
        return [line for line in text.splitlines() if not line.startswith("memory:")]

    # the same plan: the env's name as typed is the label and the default run directory's name
    assert (
        plan(
            plain.replace("env: CartPole-v1;", "env: gym_CartPole-v1;").replace("runs/CartPole-v1__", "runs/gym_CartPole-v1__")
        )
        == plan(prefixed)
        and len(plan(prefixed)) > 5
    )
    assert resolve_env_name("Reacher-v2").gym_id == resolve_env_name("gym_Reacher-v2").gym_id == "Reacher-v5"
    # ppo_dict's own names stay its own; a gymnasium env registered under one of them is reached with the prefix
    assert [
        gym_id_of(name) for name in ("test_dummy", "godot", "godot_demo", "gym_test_dummy", "gym_godot_x-v0", "ALE/Pong-v5")
    ] == ["", "", "", "test_dummy", "godot_x-v0", "ALE/Pong-v5"]
    assert resolve_env_name("test_dummy").name == "test_dummy" and resolve_env_name("test_dummy").gym_id != "test_dummy"


def test_a_checkpoints_module_env_is_seen_with_or_without_the_prefix() -> None:
    """``<module>:<id>`` from a checkpoint's config imports its module: named either way (``core.file_effects``)."""
    from ppo_dict.core.config import Config
    from ppo_dict.core.file_effects import config_effects

    for env in ("mymodule:MyEnv-v0", "gym_mymodule:MyEnv-v0"):
        assert config_effects(Config(env=env), typed=()) == {
            "env": "imports the module mymodule (gymnasium's <module>:<env id>)"
        }
        assert config_effects(Config(env=env), typed=("env",)) == {}
    assert config_effects(Config(env="CartPole-v1"), typed=()) == {}


def test_rl_zoos_spellings_are_the_same_flags() -> None:
    """rl_zoo3/train.py's spellings set the same settings as ours (and show in --help beside them)."""
    zoo = config_from_args(
        [
            "-n",
            "2e4",
            "-i",
            "agent.zip",
            "--eval-freq",
            "1000",
            "--eval-episodes",
            "3",
            "--save-freq",
            "500",
            "--log-interval",
            "2",
            "-tb",
            "tb",
            "--num-threads",
            "2",
            "--gym-packages",
            "a",
            "b",
            "--wandb-project-name",
            "p",
            "--wandb-entity",
            "e",
            "--wandb-group",
            "g",
            "-tags",
            "t1",
            "t2",
            "--env-kwargs",
            "a:1",
            "b:'x'",
            "c:lin_1",
        ]
    )
    ours = config_from_args(
        [
            "--total_timesteps",
            "20000",
            "--trained_agent",
            "agent.zip",
            "--eval_freq",
            "1000",
            "--eval_episodes",
            "3",
            "--save_freq",
            "500",
            "--log_interval",
            "2",
            "--tensorboard_log",
            "tb",
            "--torch_threads",
            "2",
            "--gym_packages",
            "a,b",
            "--project",
            "p",
            "--entity",
            "e",
            "--group",
            "g",
            "--tags",
            "t1",
            "t2",
            "--env_kwargs",
            "dict(a=1, b='x', c='lin_1')",
        ]
    )
    assert zoo == ours and zoo.env_kwargs == {"a": 1, "b": "x", "c": "lin_1"}
    assert config_from_args(["--n-timesteps", "300"]).total_timesteps == 300
    assert config_from_args(["--env_kwargs", "dict(a=1,", "b=2)"]).env_kwargs == {"a": 1, "b": 2}  # typed without quotes


def test_rl_zoos_num_threads_minus_one_is_torchs_count_and_device_auto_is_named(capsys, monkeypatch) -> None:
    """rl-zoo's ``--num-threads -1`` (its default: torch left as it is) is torch's own count; N > 0 is --torch_threads N;
    --torch_threads typed wins. rl-zoo's --device auto would put an MLP on CUDA: an --algo command says what ppo_dict's
    does."""
    import torch

    assert config_from_args(["--num-threads", "-1"]).torch_threads == torch.get_num_threads()
    assert config_from_args(["--num-threads", "0", "--torch_threads", "1"]).torch_threads == 1
    assert config_from_args(["--num-threads", "3"]).torch_threads == 3
    code, out, err = dry_run(capsys, "--env", "CartPole-v1", "--num-threads", "two")
    assert code == 2 and "num_threads='two': rl-zoo's --num-threads takes an integer (-1: torch's own count)" in err
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert cli.read_command_line(["--algo", "ppo", "--hyperparams", "gamma:0.9"]).algo_note == cli.DEVICE_NOTE
    assert cli.read_command_line(["--algo", "ppo", "--hyperparams", "gamma:0.9", "--device", "cpu"]).algo_note == ""
    assert cli.read_command_line(["--hyperparams", "gamma:0.9"]).algo_note == ""  # ppo_dict's own form: nothing to say
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    # rl-zoo's auto is the CPU too
    assert cli.read_command_line(["--algo", "ppo", "--hyperparams", "gamma:0.9"]).algo_note == ""


def test_algo_is_ppo_or_rl_zoos_ppo_lstm_and_another_is_refused(capsys) -> None:
    """Untyped, --algo is ppo and sb3's defaults; typed without --hyperparams, it reads rl-zoo's tuned entry
    (tests/test_cli.py's test_typed_algo_reads_rl_zoos_entry_as_train_py_does); --hyperparams typed beside it wins."""
    assert config_from_args(["--algo", "ppo", "--hyperparams", "n_epochs:10"]) == config_from_args(
        ["--hyperparams", "n_epochs:10"]
    )
    lstm = config_from_args(["--algo", "ppo_lstm", "--env", "CartPole-v1", "--hyperparams", "gamma:0.99"])
    assert (lstm.model, lstm.n_steps, lstm.batch_size) == ("mlp_lstm", 128, 128)  # RecurrentPPO's defaults
    assert config_from_args(["--algo", "ppo_lstm", "--model", "cnn_lstm", "--hyperparams", "gamma:0.99"]).model == "cnn_lstm"
    code, out, err = dry_run(capsys, "--env", "CartPole-v1", "--algo", "sac", "--model", "mlp_lstm", "--n_epochs", "0")
    assert (
        code == 2
        and out == ""
        and err.splitlines()[1:]
        == [  # listed with the other problems
            "  - algo='sac': ppo_dict trains PPO: --algo ppo (sb3's PPO; sb3-contrib's MaskablePPO with --action_masks True) "
            "or ppo_lstm (sb3-contrib's RecurrentPPO)",
            "  - n_epochs=0: must be in [1, inf]",
        ]
    )
    code, out, err = dry_run(capsys, "--env", "CartPole-v1", "--algo", "ppo_lstm", "--model", "mlp")
    assert (
        code == 2
        and "algo='ppo_lstm': sb3-contrib's RecurrentPPO trains a recurrent model (--model mlp_lstm or cnn_lstm), "
        "not model='mlp'"
        in err
    )


def test_typed_algo_reads_rl_zoos_entry_as_train_py_does(capsys, monkeypatch) -> None:
    """rl-zoo's ``train.py --algo ppo --env CartPole-v1``: its tuned entry (8 envs, n_steps 32, 20 epochs), said at start
    with how to get sb3's defaults, and recorded as --hyperparams rl_zoo3 (config.json: a resume, a sweep see it);
    without rl_zoo3, sb3's defaults and one line saying why."""
    pytest.importorskip("rl_zoo3")
    zoo = config_from_args(["--algo", "ppo", "--env", "CartPole-v1", "-n", "20000"])
    assert zoo == config_from_args(["--hyperparams", "rl_zoo3", "--env", "CartPole-v1", "-n", "20000"])
    assert (zoo.n_envs, zoo.n_steps, zoo.n_epochs, zoo.total_timesteps, zoo.hyperparams) == (8, 32, 20, 20000, ("rl_zoo3",))
    assert config_from_args(["--env", "CartPole-v1"]).hyperparams is None  # untyped: sb3's defaults, as before
    lstm = config_from_args(["--algo", "ppo_lstm", "--env", "CartPoleNoVel-v1"])  # rl-zoo's ppo_lstm.yml
    assert (lstm.model, lstm.n_envs, lstm.hyperparams) == ("mlp_lstm", 8, ("rl_zoo3",))
    code, out, _ = dry_run(capsys, "--algo", "ppo", "--env", "CartPole-v1")
    assert (
        code == 0
        and (
            "--algo ppo: rl-zoo's tuned entry 'CartPole-v1', as rl-zoo's train.py takes it (leave out --algo "
            "for sb3's defaults)"
        )
        in out.splitlines()
    )
    import importlib.util

    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "rl_zoo3" else real_find_spec(name, *a))
    assert config_from_args(["--algo", "ppo", "--env", "CartPole-v1"]) == config_from_args(["--env", "CartPole-v1"])
    code, out, _ = dry_run(capsys, "--algo", "ppo", "--env", "CartPole-v1")
    assert (
        code == 0
        and (
            "--algo ppo: sb3's defaults, not rl-zoo's tuned entry: rl_zoo3 is not installed: "
            "pip install rl_zoo3 (or ppo_dict's zoo extra), or give a file path"
        )
        in out.splitlines()
    )


def test_rl_zoos_train_flags_mean_what_they_mean_there_or_name_the_equivalent(tmp_path) -> None:
    """-f/--log-folder numbers the run as rl-zoo's train.py (<folder>/ppo/<env>_<n>); --track logs to wandb's project sb3;
    --vec-env dummy / subproc is every env here / in workers; --n-eval-envs other than 1 is refused naming --eval_episodes."""
    from ppo_dict.core.errors import ConfigError

    logs = tmp_path / "logs"
    assert config_from_args(["--env", "CartPole-v1", "-f", str(logs)]).run_dir == str(logs / "ppo" / "CartPole-v1_1")
    (logs / "ppo" / "CartPole-v1_1").mkdir(parents=True)
    (logs / "ppo" / "CartPole-v1_7").mkdir()
    (logs / "ppo" / "CartPole-v1_9.txt").write_text("")  # not a run
    assert config_from_args(["--env", "gym_CartPole-v1", "--log-folder", str(logs)]).run_dir == str(
        logs / "ppo" / "CartPole-v1_8"
    )
    assert config_from_args(["--env", "CartPole-v1", "-f", str(logs), "--run_dir", "mine"]).run_dir == "mine"
    assert config_from_args(["--track"]).project == "sb3" and config_from_args(["--track", "--project", "p"]).project == "p"
    assert config_from_args(["--track", "False"]).project is None
    assert config_from_args(["--vec-env", "dummy"]).num_workers == 0
    assert config_from_args(["--vec-env", "subproc"]).main_steps_envs is False
    assert config_from_args(["--n-eval-envs", "1"]) == config_from_args([])
    with pytest.raises(ConfigError) as refused:
        config_from_args(["--n-eval-envs", "4", "--vec-env", "shm"])
    assert str(refused.value).splitlines()[1:] == [
        "  - vec_env='shm': rl-zoo's --vec-env takes dummy or subproc",
        "  - n_eval_envs='4': ppo_dict evaluates in one env; --eval_episodes N (rl-zoo's --eval-episodes) sets how many "
        "episodes",
    ]


def test_enjoy_finds_a_run_as_rl_zoos_enjoy_does(tmp_path, capsys) -> None:
    """``python -m ppo_dict.enjoy --algo ppo --env ID -f FOLDER``: the latest <env>_<n> of FOLDER/ppo (--exp-id N: that one);
    --no-render accepted; rl-zoo's -n (timesteps) refused naming --episodes; no run named, one line, exit 2."""
    import json

    from ppo_dict import enjoy
    from tests.cli_here import run_here

    logs = tmp_path / "logs"
    for _ in range(2):
        assert run_here("--env", "CartPole-v1", "-f", str(logs), *TINY).returncode == 0
    assert enjoy.main(["--algo", "ppo", "--env", "CartPole-v1", "-f", str(logs), "--no-render", "--episodes", "1"]) == 0
    assert json.loads(capsys.readouterr().out.splitlines()[-1])["model"].startswith(
        str(logs / "ppo" / "CartPole-v1_2" / "checkpoints")
    )
    assert enjoy.main(["--env", "CartPole-v1", "-f", str(logs), "--exp-id", "1", "--episodes", "1"]) == 0
    assert json.loads(capsys.readouterr().out.splitlines()[-1])["model"].startswith(
        str(logs / "ppo" / "CartPole-v1_1" / "checkpoints")
    )
    for argv, error in [
        (
            ["--env", "CartPole-v1", "-f", str(logs), "-n", "1000"],
            "-n 1000: rl-zoo's enjoy counts timesteps; ppo_dict's plays whole episodes: --episodes N",
        ),
        (["--env", "Pendulum-v1", "-f", str(logs)], f"no run Pendulum-v1_<n> in {logs / 'ppo'}"),
        (["--env", "CartPole-v1", "-f", str(logs), "--exp-id", "3"], f"no run CartPole-v1_3 in {logs / 'ppo'}"),
        ([], "give the run directory, or rl-zoo's --env ID -f FOLDER (--algo ppo, --exp-id N)"),
    ]:
        with pytest.raises(SystemExit) as exited:
            enjoy.main(argv)
        assert (
            exited.value.code == 2
            and capsys.readouterr().err == f"python -m ppo_dict.enjoy: error: {error} (--help lists every flag)\n"
        )


def test_enjoy_replays_rl_zoos_own_folder_as_rl_zoos_enjoy(tmp_path, capsys) -> None:
    """rl-zoo's folder (``<f>/ppo/<env>_1/<env>.zip`` and ``<env>/vecnormalize.pkl``, as its train.py saves them, written
    here by sb3) replayed by ``ppo_dict.enjoy --algo ppo --env ID -f FOLDER``, both files read as data: the episode sb3's
    model plays with its VecNormalize frozen (rl-zoo's enjoy: training and norm_reward off, deterministic)."""
    import json
    import warnings

    import gymnasium as gym
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import VecNormalize

    from ppo_dict import enjoy

    run = tmp_path / "logs" / "ppo" / "Pendulum-v1_1"
    (run / "Pendulum-v1").mkdir(parents=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        venv = VecNormalize(make_vec_env("Pendulum-v1", n_envs=2, seed=0))
        model = PPO("MlpPolicy", venv, n_steps=128, batch_size=64, n_epochs=2, seed=0).learn(512)
    model.save(run / "Pendulum-v1.zip")
    venv.save(run / "Pendulum-v1" / "vecnormalize.pkl")
    env, total, length, done = gym.make("Pendulum-v1"), 0.0, 0, False
    obs, _ = env.reset(seed=3)
    while not done:
        action, _ = model.predict(venv.normalize_obs(obs), deterministic=True)
        obs, reward, terminated, truncated, _ = env.step(action)
        total, length, done = total + float(reward), length + 1, terminated or truncated
    assert (
        enjoy.main(["--algo", "ppo", "--env", "Pendulum-v1", "-f", str(tmp_path / "logs"), "--episodes", "1", "--seed", "3"])
        == 0
    )
    result = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert (result["model"], result["num_timesteps"]) == (str(run / "Pendulum-v1.zip"), 512)
    assert (result["returns"], result["lengths"]) == ([total], [length])


# ------------------------------------------------------------------------------------------------ what a run says
TINY = [
    "--n_steps",
    "16",
    "--batch_size",
    "16",
    "--n_epochs",
    "1",
    "--total_timesteps",
    "16",
    "--seed",
    "0",
    "--progress",
    "none",
    "--plot",
    "False",
    "--verbose",
    "0",
]


def test_a_one_env_run_says_what_it_took_in_plain_lines(tmp_path) -> None:
    """A one-env CartPole run with a video, on a machine without a desktop session (no XDG_RUNTIME_DIR): the entry of
    the hyperparameter file it took, then one layout line; no XDG_RUNTIME_DIR error from pygame's display probe; a
    monitor.csv and a config.json saying which gymnasium id ran."""
    import json

    from tests.test_main_ppo import run_cli, summary_line

    run_dir = tmp_path / "run"
    proc = run_cli(
        "--env",
        "CartPole-v1",
        "--hyperparams",
        "hyperparams/ppo.yml",
        "--n_envs",
        "1",
        *TINY,
        "--eval_freq",
        "16",
        "--eval_episodes",
        "1",
        "--video",
        "True",
        "--video_length",
        "5",
        "--run_dir",
        str(run_dir),
        "--verbose",
        "1",
        env_extra={"XDG_RUNTIME_DIR": None, "SDL_VIDEODRIVER": None, "WAYLAND_DISPLAY": None},
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "hyperparameters: entry 'CartPole-v1' of hyperparams/ppo.yml" and "  n_envs: 8" in lines
    layout = [line for line in lines if line.startswith("layout: ")]
    assert (
        layout == ["layout: 1 env in this process; " + layout[0].split("; ", 1)[1]]
        and "the main process steps" not in proc.stdout
    )
    assert "XDG_RUNTIME_DIR" not in proc.stderr and "\x1b[" not in proc.stdout + proc.stderr, proc.stderr
    assert [p.name for p in (run_dir / "videos").iterdir()] == ["eval-000000000016.mp4"]
    config = json.loads((run_dir / "config.json").read_text())
    assert (config["env"], config["env_id"], config["hyperparams"]) == ("CartPole-v1", "CartPole-v1", ["hyperparams/ppo.yml"])
    assert summary_line(proc.stdout)["run_dir"] == str(run_dir) and (run_dir / "monitor.csv").is_file()


@pytest.mark.slow  # a worker process starts (about 5 s of CPU); make test runs the next test's part of it
def test_gymnasiums_out_of_date_warning_is_said_once_in_plain_words(tmp_path) -> None:
    """Reacher-v4 (gymnasium has v5) in this process and a worker process: one plain note, not gymnasium's coloured
    warning from every process that builds the env."""
    from tests.test_main_ppo import run_cli

    proc = run_cli("--env", "Reacher-v4", "--n_envs", "2", "--num_workers", "2", *TINY, "--run_dir", str(tmp_path / "run"))
    assert proc.returncode == 0, proc.stderr
    note = "note: gymnasium has a newer version of Reacher-v4, Reacher-v5; training Reacher-v4 as asked"
    assert proc.stdout.count(note) == 1 and "out of date" not in proc.stdout + proc.stderr and "\x1b[" not in proc.stderr, (
        proc.stderr
    )


def test_making_an_env_leaves_out_the_out_of_date_warning_its_notice_said() -> None:
    """The spec of an old version says it once (its notice, printed by the main process); building its env, in any
    process, shows gymnasium's own warning of it no more."""
    import warnings

    from ppo_dict.envs import make_env, resolve_env_name

    spec = resolve_env_name("Reacher-v4")
    assert spec.notice == "note: gymnasium has a newer version of Reacher-v4, Reacher-v5; training Reacher-v4 as asked"
    with warnings.catch_warnings(record=True) as shown:
        warnings.simplefilter("always")  # gymnasium's own filter shows it once per process: here it would be shown every time
        make_env(spec).close()
    assert not [w for w in shown if "out of date" in str(w.message)], [str(w.message) for w in shown]
    with warnings.catch_warnings(record=True) as shown:
        warnings.simplefilter("always")
        make_env(spec.__class__(**{**spec.__dict__, "notice": ""})).close()  # without the notice it is shown, plainly
    assert [str(w.message) for w in shown if "out of date" in str(w.message)] == [
        "The environment Reacher-v4 is out of date. You should consider upgrading to version `v5`."
    ]


def test_gymnasiums_other_warnings_are_shown_once_without_colour_codes() -> None:
    """A warning gymnasium's logger raises while an env is built: its text without ANSI escapes nor ``WARN:``, once."""
    import warnings

    import gymnasium as gym

    from ppo_dict.envs.make import plain_warnings

    with warnings.catch_warnings(record=True) as shown:
        warnings.simplefilter("always")
        for _ in range(3):
            with plain_warnings(notice=""):
                gym.logger.warn("the env %s did something", "X")
    assert [str(w.message) for w in shown] == ["the env X did something"]
