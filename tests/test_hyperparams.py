"""rl-zoo interop: hyperparams/ppo.yml entries, flags over the file, refused keys, rl-zoo's whole table;
vecnormalize.pkl for rl-zoo's enjoy."""

import collections
import importlib.util
import os
import pickle
import re
import warnings

import numpy as np
import pytest

from ppo_dict.core.errors import ConfigError
from ppo_dict.core.files import load_model_state
from ppo_dict.interop.hyperparams import ATARI_WRAPPER, UNSUPPORTED, hyperparams_file, load_hyperparams, translate
from ppo_dict.run.checks import validate
from ppo_dict.run.cli import config_from_args
from tests.conftest import ROOT
from tests.cli_here import run_here
from tests.test_main_ppo import QUICK

ZOO = """
HalfCheetah-v4:
  normalize: true
  n_envs: 1
  policy: 'MlpPolicy'
  n_timesteps: !!float 1e6
  batch_size: 64
  n_steps: 512
  gamma: 0.98
  learning_rate: 2.0633e-05
  clip_range: lin_0.1
  policy_kwargs: "dict(
                    log_std_init=-2,
                    ortho_init=False,
                    activation_fn=nn.ReLU,
                    net_arch=dict(pi=[256, 256], vf=[256, 256])
                  )"
Reacher-v2:
  normalize: "{'norm_obs': False, 'norm_reward': True}"
  n_envs: 4
  env_wrapper: sb3_contrib.common.wrappers.TimeFeatureWrapper
  policy_kwargs: "__import__('os').system('touch PWNED')"
"""


def test_rl_zoo_entry_sets_defaults_and_flags_win(tmp_path) -> None:
    path = tmp_path / "ppo.yml"
    path.write_text(ZOO)
    cfg = config_from_args(["--env", "gym_HalfCheetah-v4", "--hyperparams", str(path), "--n_steps", "128"])
    assert (cfg.normalize, cfg.n_envs, cfg.model, cfg.total_timesteps, cfg.batch_size, cfg.gamma) == (
        True,
        1,
        "mlp",
        1_000_000,
        64,
        0.98,
    )
    assert cfg.n_steps == 128  # the explicit flag, not the file's 512
    assert (cfg.learning_rate, cfg.clip_range) == (2.0633e-05, "lin_0.1")
    assert (cfg.log_std_init, cfg.ortho_init, cfg.activation_fn, cfg.net_arch) == (
        -2.0,
        False,
        "relu",
        {"pi": [256, 256], "vf": [256, 256]},
    )
    validate(cfg)


def test_unsupported_keys_are_reported_with_the_other_problems(tmp_path) -> None:
    path = tmp_path / "ppo.yml"
    path.write_text(ZOO)
    cfg = config_from_args(["--env", "gym_Reacher-v2", "--hyperparams", str(path), "--gamma", "1.5"])
    assert (cfg.normalize, cfg.norm_obs, cfg.norm_reward, cfg.n_envs) == (True, False, True, 4)
    with pytest.raises(ConfigError) as info:
        validate(cfg)
    problems = info.value.problems
    assert len(problems) == 3
    assert problems[0] == "gamma=1.5: must be in [0.0, 1.0]"
    assert problems[1] == (
        f"hyperparams {path}[Reacher-v2]: env_wrapper 'sb3_contrib.common.wrappers.TimeFeatureWrapper' is "
        "not supported: ppo_dict applies only stable_baselines3.common.atari_wrappers.AtariWrapper "
        "(--atari_wrapper True)"
    )
    assert problems[2].startswith(
        f"hyperparams {path}[Reacher-v2]: policy_kwargs=\"__import__('os').system('touch PWNED')\": "
    )
    assert not (tmp_path / "PWNED").exists()
    cfg = config_from_args(["--env", "gym_Hopper-v5", "--hyperparams", str(path)])
    with pytest.raises(
        ConfigError, match=r"no entry for gym_Hopper-v5 or Hopper-v5 or default \(entries: HalfCheetah-v4, Reacher-v2\)"
    ):
        validate(cfg)


def test_export_sb3_writes_vecnormalize_pkl_that_sb3_loads(tmp_path) -> None:
    from stable_baselines3.common.vec_env import DummyVecEnv, VecNormalize

    from ppo_dict.envs import make_env, resolve_env_name

    zip_path, save_dir = tmp_path / "CartPole-v1.zip", tmp_path / "model"
    proc = run_here(
        "--env",
        "gym_CartPole-v1",
        "--num_workers",
        "0",
        "--n_envs",
        "2",
        *QUICK,
        "--normalize",
        "True",
        "--norm_reward",
        "False",
        "--run_dir",
        str(tmp_path / "run"),
        "--save_path",
        str(save_dir),
        "--export_sb3",
        str(zip_path),
        "--plot",
        "False",
    )
    assert proc.returncode == 0, proc.stderr
    ours = load_model_state(str(save_dir))["normalizer"]
    pkl = tmp_path / "CartPole-v1" / "vecnormalize.pkl"
    venv = DummyVecEnv([lambda: make_env(resolve_env_name("gym_CartPole-v1"))])
    loaded = VecNormalize.load(str(pkl), venv)
    assert isinstance(loaded, VecNormalize) and loaded.training is True and loaded.norm_reward is False
    assert np.array_equal(loaded.obs_rms.mean, ours["obs_rms"]["obs"]["mean"].numpy())
    assert np.array_equal(loaded.obs_rms.var, ours["obs_rms"]["obs"]["var"].numpy())
    assert loaded.obs_rms.count == float(ours["obs_rms"]["obs"]["count"])
    assert np.array_equal(loaded.ret_rms.var, ours["ret_rms"]["var"].numpy())
    with open(pkl, "rb") as f:
        assert type(pickle.load(f)).__name__ == "VecNormalize"
    assert "normalize: true" in (tmp_path / "CartPole-v1" / "config.yml").read_text()
    venv.close()


# ------------------------------------------------------------------------------------ rl-zoo's whole table
def classify(path: str, names: list) -> dict:
    """``{entry: ("loaded", None) | ("refused", sorted keys) | ("no env", reason)}``, each entry run
    through the user's path: ``--env gym_<entry> --hyperparams <path>``, then the whole check."""
    table = {}
    for name in names:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # sb3's truncated-minibatch warning, deprecated v4 envs
            try:
                validate(config_from_args(["--env", f"gym_{name}", "--hyperparams", path]))
                table[name] = ("loaded", None)
                continue
            except ConfigError as exc:
                problems = exc.problems
        env_problems = [p for p in problems if p.startswith("env=")]
        if env_problems:
            table[name] = ("no env", env_problems[0])
            continue
        # "'use_sde' is not supported: ...", "env_wrapper 'gymnasium...GrayscaleObservation' is not supported: ..."
        pattern = re.compile(rf"^hyperparams {re.escape(path)}\[{re.escape(name)}\]: (\w+ )?'([\w.]+)' is not supported: ")
        keys = {(m.group(1) or m.group(2)).strip() if (m := pattern.match(p)) else p for p in problems}
        table[name] = ("refused", sorted(keys))
    return table


def zoo_document() -> dict:
    import yaml

    with open(hyperparams_file("rl_zoo3")) as f:
        return yaml.safe_load(f)


needs_zoo = pytest.mark.skipif(
    importlib.util.find_spec("rl_zoo3") is None,
    reason="rl_zoo3 is not installed (the zoo and test extras: pip install -e '.[test]')",
)


@needs_zoo
def test_every_rl_zoo_ppo_entry_loads_or_is_refused_naming_exactly_the_unimplemented_keys() -> None:
    document = zoo_document()
    envs = [name for name in document if name not in ("default", "atari")]
    table = classify("rl_zoo3", envs)
    outcome = collections.Counter(kind for kind, _ in table.values())
    refused = {name: keys for name, (kind, keys) in table.items() if kind == "refused"}
    no_env = {name: reason for name, (kind, reason) in table.items() if kind == "no env"}
    print(f"rl_zoo3 ppo.yml: {len(envs)} env entries: {dict(outcome)}; refused {refused}")
    # A refusal names exactly the entry's keys that ppo_dict does not implement, and nothing else.
    for name, keys in refused.items():
        wrappers = [w if isinstance(w, str) else next(iter(w)) for w in document[name].get("env_wrapper") or []]
        other_wrapper = any(w != ATARI_WRAPPER for w in wrappers)
        assert keys == sorted(k for k in document[name] if k in UNSUPPORTED or (k == "env_wrapper" and other_wrapper)), (
            name,
            keys,
        )
    # Every env gymnasium can make here is loaded or refused; the others are PyBullet and MiniGrid,
    # whose packages (pybullet_envs_gymnasium, minigrid) register them.
    assert all(name.startswith("MiniGrid-") or "Bullet" in name for name in no_env), no_env
    assert all("doesn't exist" in reason for reason in no_env.values()), no_env
    assert dict(outcome) == {"loaded": 19, "refused": 1, "no env": 22}
    assert refused == {"CarRacing-v3": ["env_wrapper"]}  # rl-zoo's own FrameSkip, resize and greyscale wrappers
    # The two entries that are not env ids: `default` for envs without an entry (as rl-zoo), `atari`.
    cfg = config_from_args(["--env", "gym_InvertedPendulum-v5", "--hyperparams", "rl_zoo3"])
    assert (cfg.total_timesteps, cfg.model) == (1_000_000, "mlp")
    assert translate(document["atari"], "atari")[1] == []
    cfg = config_from_args(["--env", "gym_BreakoutNoFrameskip-v4", "--hyperparams", "rl_zoo3"])
    assert validate(cfg).observation_space.shape == (84, 84, 4)
    assert (cfg.atari_wrapper, cfg.frame_stack, cfg.model, cfg.n_envs, cfg.total_timesteps) == (True, 4, "cnn", 8, 10_000_000)


@needs_zoo
def test_shipped_file_holds_rl_zoos_entries_that_load_unchanged() -> None:
    import yaml

    document = zoo_document()
    shipped_path = os.path.join(ROOT, "hyperparams", "ppo.yml")
    with open(shipped_path) as f:
        shipped = yaml.safe_load(f)
    loaded = [
        name
        for name, (kind, _) in classify("rl_zoo3", [n for n in document if n not in ("default", "atari")]).items()
        if kind == "loaded"
    ]
    assert list(shipped) == ["default", "atari", *loaded]  # rl-zoo's order
    assert all(shipped[name] == document[name] for name in shipped)
    assert classify(shipped_path, loaded) == {name: ("loaded", None) for name in loaded}


def test_rl_zoo3_name_without_the_package_names_the_extra(monkeypatch) -> None:
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    values, problems = load_hyperparams("rl_zoo3", "gym_CartPole-v1")
    assert values == {} and problems == [
        "hyperparams='rl_zoo3': cannot read: rl_zoo3 is not installed: pip install rl_zoo3 "
        "(or ppo_dict's zoo extra), or give a file path"
    ]


ATARI_ZOO = """
atari:
  env_wrapper:
    - stable_baselines3.common.atari_wrappers.AtariWrapper
  frame_stack: 4
  policy: 'CnnPolicy'
  n_envs: 8
PongNoFrameskip-v4:
  env_wrapper:
    - stable_baselines3.common.atari_wrappers.AtariWrapper:
        terminal_on_life_loss: False
        screen_size: 64
  frame_stack: 2
  policy: 'CnnPolicy'
CartPole-v1:
  env_wrapper:
    - sb3_contrib.common.wrappers.TimeFeatureWrapper
    - stable_baselines3.common.atari_wrappers.AtariWrapper:
        noop: 3
"""


def test_rl_zoo_atari_entry_is_the_explicit_flags() -> None:
    """The repository's hyperparams/ppo.yml: any Atari game takes the ``atari`` entry (rl-zoo's lookup)."""
    cfg = config_from_args(["--env", "gym_BreakoutNoFrameskip-v4", "--hyperparams", "hyperparams/ppo.yml"])
    explicit = config_from_args(
        [
            "--env",
            "gym_BreakoutNoFrameskip-v4",
            "--atari_wrapper",
            "True",
            "--frame_stack",
            "4",
            "--model",
            "cnn",
            "--n_envs",
            "8",
            "--n_steps",
            "128",
            "--n_epochs",
            "4",
            "--batch_size",
            "256",
            "--total_timesteps",
            "1e7",
            "--learning_rate",
            "lin_2.5e-4",
            "--clip_range",
            "lin_0.1",
            "--vf_coef",
            "0.5",
            "--ent_coef",
            "0.01",
            "--hyperparams",
            "hyperparams/ppo.yml",
        ]
    )
    assert cfg == explicit and (cfg.atari_wrapper, cfg.frame_stack, cfg.model, cfg.n_envs) == (True, 4, "cnn", 8)
    assert validate(cfg).observation_space.shape == (84, 84, 4)
    # rl-zoo: by entry point
    assert config_from_args(["--env", "gym_ALE/Pong-v5", "--hyperparams", "hyperparams/ppo.yml"]).atari_wrapper


def test_atari_wrapper_kwargs_and_refused_wrappers(tmp_path) -> None:
    path = tmp_path / "ppo.yml"
    path.write_text(ATARI_ZOO)
    cfg = config_from_args(["--env", "gym_PongNoFrameskip-v4", "--hyperparams", str(path)])  # its own entry wins over atari
    assert (cfg.atari_wrapper, cfg.atari_terminal_on_life_loss, cfg.image_size, cfg.frame_stack, cfg.n_envs) == (
        True,
        False,
        64,
        2,
        None,
    )
    cfg = config_from_args(["--env", "gym_CartPole-v1", "--hyperparams", str(path)])
    with pytest.raises(ConfigError) as info:
        validate(cfg)
    where = f"hyperparams {path}[CartPole-v1]"
    assert info.value.problems[:2] == [
        f"{where}: env_wrapper 'sb3_contrib.common.wrappers.TimeFeatureWrapper' is not supported: ppo_dict applies only "
        "stable_baselines3.common.atari_wrappers.AtariWrapper (--atari_wrapper True)",
        f"{where}: env_wrapper: 'noop' is not an AtariWrapper argument (noop_max, frame_skip, screen_size, "
        "terminal_on_life_loss, clip_reward, action_repeat_probability)",
    ]
    assert info.value.problems[2].startswith(
        "env='gym_CartPole-v1': --atari_wrapper applies sb3's AtariWrapper to Atari games"
    )
    with pytest.raises(
        ConfigError,
        match=r"no entry for gym_Hopper-v5 or Hopper-v5 or default \(entries: atari, "
        r"PongNoFrameskip-v4, CartPole-v1\)",
    ):
        validate(config_from_args(["--env", "gym_Hopper-v5", "--hyperparams", str(path)]))


def test_monitor_kwargs_info_keywords_are_the_flag(tmp_path) -> None:
    """rl-zoo passes ``monitor_kwargs`` to sb3's Monitor; its ``info_keywords`` are ``--info_keywords``, other keys are
    refused."""
    path = tmp_path / "ppo.yml"
    path.write_text("CartPole-v1:\n  monitor_kwargs: \"dict(info_keywords=('is_success', 'distance'))\"\n")
    assert config_from_args(["--env", "gym_CartPole-v1", "--hyperparams", str(path)]).info_keywords == (
        "is_success",
        "distance",
    )
    assert config_from_args(
        ["--env", "gym_CartPole-v1", "--hyperparams", str(path), "--info_keywords", "x"]
    ).info_keywords == ("x",)
    values, problems = translate({"monitor_kwargs": {"info_keywords": ["a"], "reset_keywords": ["b"]}}, "f[e]")
    assert values == {"info_keywords": ("a",)} and problems == [
        "f[e]: monitor_kwargs: 'reset_keywords' is not supported (supported: info_keywords)"
    ]


# ------------------------------------------------------------------------------------------------ rl-zoo's command line
def dry_run(capsys, *argv: str) -> tuple[int, str, str]:
    from ppo_dict import main_ppo

    code = main_ppo.main([*argv, "--dry_run"])
    out, err = capsys.readouterr()
    return code, out, err


def test_key_value_overrides_as_rl_zoo_takes_them(tmp_path, capsys) -> None:
    """``--hyperparams key:value`` (rl-zoo's ``-params``) beside a file (rl-zoo's ``-conf``), in any order: rl-zoo's keys
    over the file's entry, the flags typed over both; without a file over sb3's defaults."""
    path = tmp_path / "ppo.yml"
    path.write_text(ZOO)
    cfg = config_from_args(
        [
            "--env",
            "gym_HalfCheetah-v4",
            "--hyperparams",
            str(path),
            "n_steps:256",
            "policy_kwargs:dict(net_arch=[64, 64])",
            "n_timesteps:1e4",
            "learning_rate:lin_1e-3",
            "policy:'MlpPolicy'",
        ]
    )
    assert (cfg.n_steps, cfg.net_arch, cfg.total_timesteps, cfg.learning_rate) == (256, [64, 64], 10_000, "lin_1e-3")
    # the rest of the entry; policy_kwargs replaced whole, as rl-zoo
    assert (cfg.normalize, cfg.gamma, cfg.log_std_init) == (True, 0.98, 0.0)
    spelled = config_from_args(
        ["-params", "n_steps:256", "--env", "gym_HalfCheetah-v4", "-conf", str(path), "--n_steps", "64"]
    )
    assert spelled.n_steps == 64 and spelled.batch_size == 64  # the flag typed wins over the override
    alone = config_from_args(["--hyperparams", "n_epochs:3", "normalize:True"])
    # recorded as typed
    assert (alone.n_epochs, alone.normalize, alone.hyperparams) == (3, True, ("n_epochs:3", "normalize:True"))
    code, out, err = dry_run(
        capsys, "--env", "CartPole-v1", "--hyperparams", str(path), "foo:1", "n_steps:abc", "other.yml", "--gamma", "2"
    )
    assert code == 2 and out == ""
    assert err.splitlines()[1:] == [
        "  - gamma=2.0: must be in [0.0, 1.0]",
        f"  - hyperparams=['{path}', 'foo:1', 'n_steps:abc', 'other.yml']: one file at most (the others are key:value "
        "overrides)",
        "  - hyperparams key:value: 'foo' is not an rl-zoo PPO hyperparameter",
        "  - hyperparams key:value: n_steps='abc': invalid literal for int() with base 10: 'abc'",
    ]


def test_the_entry_taken_and_its_values_are_said(capsys) -> None:
    """rl-zoo prints the entry it applied; so does --dry_run (and the run, at start: tests/test_cli.py), also when the
    id's version has no entry of its own (Reacher-v5 against rl-zoo's Reacher-v2): never sb3's defaults silently."""
    import yaml

    with open(os.path.join(ROOT, "hyperparams", "ppo.yml")) as f:
        entry = yaml.safe_load(f)["Reacher-v2"]
    code, out, err = dry_run(capsys, "--env", "Reacher-v2", "--hyperparams", "hyperparams/ppo.yml", "n_epochs:5")
    assert code == 0, err
    lines = out.splitlines()
    lines = lines[lines.index("hyperparameters: entry 'Reacher-v2' of hyperparams/ppo.yml") :]  # after the policy line
    assert lines[1 : 1 + len(entry)] == [f"  {key}: {value!r}" for key, value in sorted(entry.items())]
    assert lines[1 + len(entry) :][:2] == [
        "hyperparameters set by --hyperparams key:value (over the entry's; a flag typed wins over them):",
        "  n_epochs: 5",
    ]
    code, out, err = dry_run(capsys, "--env", "Reacher-v5", "--hyperparams", "hyperparams/ppo.yml")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[5:8] == [
        "hyperparameters: entry 'default' of hyperparams/ppo.yml, as it has no entry for Reacher-v5 (its entries for other "
        "versions: Reacher-v2; --env Reacher-v2 takes that one)",
        "  n_timesteps: 1000000.0",
        "  policy: 'MlpPolicy'",
    ]
    code, out, err = dry_run(capsys, "--env", "CartPole-v1")
    assert (
        code == 0
        and out.splitlines()[4].startswith("policy: ")
        and out.splitlines()[5] == "hyperparameters: sb3's defaults, and the flags typed"
    )


def test_a_file_missing_outside_the_checkout_points_at_rl_zoo3(tmp_path, monkeypatch) -> None:
    """The README's ``--hyperparams hyperparams/ppo.yml`` run elsewhere: the message names ``--hyperparams rl_zoo3``, as
    the help does."""
    from ppo_dict.core.config import FIELDS

    monkeypatch.chdir(tmp_path)
    values, problems = load_hyperparams("hyperparams/ppo.yml", "CartPole-v1")
    assert values == {} and problems == [
        "hyperparams='hyperparams/ppo.yml': cannot read: "
        "[Errno 2] No such file or directory: 'hyperparams/ppo.yml' (rl-zoo's own file, "
        "outside this repository's checkout: --hyperparams rl_zoo3)"
    ]
    assert "rl_zoo3 (the installed rl-zoo's own ppo.yml" in FIELDS["hyperparams"].metadata["help"]


def test_a_hyperparameter_file_of_values_of_the_wrong_type_is_refused_by_name(tmp_path) -> None:
    """``policy`` as a list was a TypeError (a traceback); each value of the wrong type is now a problem naming it, and a
    file that is a FIFO (which a reader waits on forever) or a folder is refused at once."""
    path = tmp_path / "ppo.yml"
    path.write_text("CartPole-v1:\n  policy: [MlpPolicy]\n  n_steps: [8]\n  normalize: [true]\n  monitor_kwargs: 5\n")
    _, problems = load_hyperparams(str(path), "gym_CartPole-v1")
    where = f"hyperparams {path}[CartPole-v1]"
    assert sorted(p.split(": ")[1].split("=")[0] for p in problems) == ["monitor_kwargs", "n_steps", "normalize", "policy"]
    assert all(p.startswith(where) for p in problems) and any(
        p.startswith(f"{where}: policy=['MlpPolicy']: must be one of MlpPolicy") for p in problems
    )
    os.mkfifo(tmp_path / "fifo.yml")
    (tmp_path / "folder.yml").mkdir()
    for name, kind in (("fifo.yml", "a FIFO (named pipe)"), ("folder.yml", "a directory")):
        target = str(tmp_path / name)
        assert load_hyperparams(target, "gym_CartPole-v1") == (
            {},
            [f"hyperparams={target!r}: cannot read: {target}: is {kind}, not a regular file"],
        )
