"""Files you did not write are safe to open (docs/safety.md).

Each malicious file is built here: a pickle whose reduce touches a sentinel file (and then gives a value
that loads), put where sb3 and rl-zoo unpickle it: a ``:serialized:`` value of an sb3 zip's ``data`` entry,
an rl-zoo ``vecnormalize.pkl``; and a checkpoint whose config names a module to import or a Godot program
to launch. The second round (issue 50): statistics and episode buffers of a structured dtype whose field
lies past its item size, zip entries that declare far more than a model holds, counters of 400 digits or
not finite, in a zip and in a VecNormalize file. Without ``--trust_pickles`` the sentinel never appears, the error names
the key, and the command line exits 2 with no traceback (``--dry_run`` too); with it the file loads as sb3 loads it,
after one warning line. Zips written by real sb3 and sb3-contrib (Box, Discrete, MultiDiscrete and Dict spaces,
rl-zoo's ``lin_`` schedules, an activation class) read the same as sb3's own reader gives them, unpickled.
"""

from __future__ import annotations

import base64
import json
import os
import pickle
import re
import zipfile
from typing import Any

import cloudpickle
import numpy as np
import pytest
import torch
from stable_baselines3 import PPO as SB3PPO
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.envs import SimpleMultiObsEnv
from stable_baselines3.common.save_util import load_from_zip_file
from stable_baselines3.common.vec_env import VecNormalize

import ppo_dict
from ppo_dict.core.config import Config
from ppo_dict.core.errors import CheckpointError
from ppo_dict.interop.sb3_zip import Unrebuilt, read_zip
from ppo_dict.interop.trained_agent import read_trained_agent, schedule_value
from ppo_dict.interop.vecnormalize import read_statistics
from ppo_dict.main_ppo import main
from tests.test_main_ppo import run_cli

SMALL = dict(n_steps=32, batch_size=32, n_epochs=1, device="cpu")


def cli(capsys, *argv: str) -> tuple[int, str]:
    """``(exit status, stderr)`` of the command line, in this process: a traceback would be an exception here."""
    capsys.readouterr()
    code = main(list(argv))
    return code, capsys.readouterr().err


class Payload:
    """Unpickled, it touches ``sentinel`` and evaluates to ``value`` (an expression), as an attack that still loads would."""

    def __init__(self, sentinel: str, value: str):
        self.sentinel, self.value = sentinel, value

    def __reduce__(self) -> tuple:
        return eval, (f"__import__('pathlib').Path({self.sentinel!r}).touch() or {self.value}",)


def with_pickled(zip_path: str, out: str, key: str, payload: Payload, keep_json: bool = False) -> str:
    """A copy of the sb3 zip ``zip_path`` whose ``data`` entry holds ``payload`` pickled under ``key``: with the
    JSON sb3 wrote beside the value there (``keep_json``), else as an ``attack.Thing`` described by nothing."""
    with zipfile.ZipFile(zip_path) as archive:
        entries = {name: archive.read(name) for name in archive.namelist()}
    data = json.loads(entries["data"])
    old = data[key] if keep_json else {":type:": "<class 'attack.Thing'>"}
    data[key] = {**old, ":serialized:": base64.b64encode(cloudpickle.dumps(payload)).decode()}
    entries["data"] = json.dumps(data).encode()
    with zipfile.ZipFile(out, "w") as archive:
        for name, content in entries.items():
            archive.writestr(name, content)
    return out


@pytest.fixture(scope="module")
def cartpole_zip(tmp_path_factory) -> str:
    """A zip sb3 wrote, in rl-zoo's layout (``logs/CartPole-v1.zip``), with a VecNormalize beside it."""
    folder = tmp_path_factory.mktemp("logs")
    venv = VecNormalize(make_vec_env("CartPole-v1", n_envs=2, seed=0))
    model = SB3PPO("MlpPolicy", venv, seed=0, **SMALL)
    model.learn(64)
    model.save(str(folder / "CartPole-v1.zip"))
    venv.save(str(folder / "sb3_vecnormalize.pkl"))
    venv.close()
    return str(folder / "CartPole-v1.zip")


def test_a_pickle_in_a_zip_is_never_run_by_load_and_its_key_is_named(cartpole_zip, tmp_path, capsys) -> None:
    sentinel = str(tmp_path / "ran")
    evil = with_pickled(cartpole_zip, str(tmp_path / "evil.zip"), "clip_range", Payload(sentinel, "0.2"))
    with pytest.raises(
        CheckpointError,
        match=r"not unpickled, as pickles run code: 'clip_range' \(a pickled attack.Thing: "
        r"its JSON does not describe it\)",
    ):
        ppo_dict.PPO.load(evil)
    assert not os.path.exists(sentinel)
    model = ppo_dict.PPO.load(evil, clip_range=0.1)  # a value given is not read from the file
    assert model.clip_range(1.0) == 0.1 and not os.path.exists(sentinel)  # sb3 holds a FloatSchedule of it
    capsys.readouterr()
    model = ppo_dict.PPO.load(evil, trust_pickles=True)  # as sb3 loads it: the pickle runs
    assert os.path.exists(sentinel)
    warning = [line for line in capsys.readouterr().err.splitlines() if "--trust_pickles" in line]
    assert len(warning) == 1 and evil in warning[0] and warning[0].startswith("warning: ")


def test_the_episode_buffers_are_read_as_data_and_a_pickle_in_them_never_runs(cartpole_zip, tmp_path) -> None:
    """sb3 pickles ``ep_info_buffer`` (a deque of Monitor's dicts): read through an unpickler of plain data, it
    holds what sb3's load gives; one that names anything else is left unread, and its code never runs."""

    def episodes(cls: type, path: str) -> list:
        return list(cls.load(path, env=make_vec_env("CartPole-v1", n_envs=1, seed=0)).ep_info_buffer)

    assert episodes(ppo_dict.PPO, cartpole_zip) == episodes(SB3PPO, cartpole_zip) != []
    sentinel = str(tmp_path / "ran")
    evil = with_pickled(cartpole_zip, str(tmp_path / "evil.zip"), "ep_info_buffer", Payload(sentinel, "[]"), keep_json=True)
    assert episodes(ppo_dict.PPO, evil) == [] and not os.path.exists(sentinel)


def test_a_space_is_rebuilt_from_its_json_and_its_pickle_ignored(cartpole_zip, tmp_path) -> None:
    sentinel = str(tmp_path / "ran")
    space = "__import__('gymnasium').spaces.Box(-1.0, 1.0, (4,))"
    evil = with_pickled(
        cartpole_zip, str(tmp_path / "evil.zip"), "observation_space", Payload(sentinel, space), keep_json=True
    )
    model = ppo_dict.PPO.load(evil)
    assert model.observation_space == SB3PPO.load(cartpole_zip).observation_space and not os.path.exists(sentinel)


def test_the_command_line_refuses_a_pickle_in_a_trained_agent_zip(cartpole_zip, tmp_path, capsys) -> None:
    sentinel = str(tmp_path / "ran")
    evil = with_pickled(cartpole_zip, str(tmp_path / "evil.zip"), "policy_kwargs", Payload(sentinel, "{}"))
    for extra in ((), ("--dry_run",)):
        code, err = cli(
            capsys,
            "--env",
            "gym_CartPole-v1",
            "--trained_agent",
            evil,
            "--num_workers",
            "0",
            "--total_timesteps",
            "64",
            *extra,
            "--run_dir",
            str(tmp_path / "run"),
        )
        assert code == 2 and "'policy_kwargs' (a pickled attack.Thing" in err and "--trust_pickles" in err, err
        assert not os.path.exists(sentinel) and not os.path.exists(tmp_path / "run")
    code, err = cli(
        capsys, "--env", "gym_CartPole-v1", "--trained_agent", evil, "--trust_pickles", "--num_workers", "0", "--dry_run"
    )
    assert code == 0, err
    assert os.path.exists(sentinel) and sum("--trust_pickles" in line for line in err.splitlines()) == 1


def test_the_command_lines_refusal_is_one_message_without_a_traceback(cartpole_zip, tmp_path) -> None:
    sentinel = str(tmp_path / "ran")
    evil = with_pickled(cartpole_zip, str(tmp_path / "evil.zip"), "policy_kwargs", Payload(sentinel, "{}"))
    proc = run_cli("--env", "gym_CartPole-v1", "--trained_agent", evil, "--dry_run")
    assert proc.returncode == 2 and proc.stderr.startswith("error: 1 invalid setting(s):"), proc.stderr
    assert "Traceback" not in proc.stderr and not os.path.exists(sentinel)


@pytest.mark.parametrize(
    "zip_name, folder", [("model.zip", "CartPole-v1"), ("agent.zip", "agent")], ids=["env_id_folder", "zip_stem_folder"]
)
def test_a_vecnormalize_pickle_where_rl_zoo_looks_is_never_run(
    cartpole_zip, tmp_path, capsys, zip_name: str, folder: str
) -> None:
    """``<zip folder>/<env id>/vecnormalize.pkl`` and ``<zip folder>/<zip stem>/vecnormalize.pkl``: its pickle gives
    sb3's VecNormalize after running code."""
    sentinel, real = str(tmp_path / "ran"), os.path.join(os.path.dirname(cartpole_zip), "sb3_vecnormalize.pkl")
    logs = tmp_path / "logs"
    (logs / folder).mkdir(parents=True)
    zip_path = str(logs / zip_name)
    with open(cartpole_zip, "rb") as src, open(zip_path, "wb") as dst:
        dst.write(src.read())
    with open(logs / folder / "vecnormalize.pkl", "wb") as f:
        pickle.dump(Payload(sentinel, f"__import__('pickle').load(open({real!r}, 'rb'))"), f)
    for extra in ((), ("--dry_run",)):
        code, err = cli(
            capsys,
            "--env",
            "gym_CartPole-v1",
            "--trained_agent",
            zip_path,
            "--num_workers",
            "0",
            "--total_timesteps",
            "64",
            *extra,
            "--run_dir",
            str(tmp_path / "run"),
        )
        assert code == 2 and "vecnormalize.pkl: not unpickled, as pickles run code: the pickle names builtins.eval" in err, err
        assert not os.path.exists(sentinel) and not os.path.exists(tmp_path / "run")
    code, err = cli(
        capsys, "--env", "gym_CartPole-v1", "--trained_agent", zip_path, "--trust_pickles", "--num_workers", "0", "--dry_run"
    )
    assert code == 0, err
    warning = [line for line in err.splitlines() if "--trust_pickles" in line]
    assert os.path.exists(sentinel) and len(warning) == 1 and "vecnormalize.pkl" in warning[0] and zip_path in warning[0]


def test_sb3s_vecnormalize_pickle_reads_as_sb3_loads_it(cartpole_zip) -> None:
    path = os.path.join(os.path.dirname(cartpole_zip), "sb3_vecnormalize.pkl")
    sb3 = VecNormalize.load(path, make_vec_env("CartPole-v1", n_envs=2))
    pinned, state, keys, _ = read_statistics(path)
    assert keys == ("obs",) and pinned["norm_gamma"] == sb3.gamma and pinned["clip_obs"] == sb3.clip_obs
    for ours, theirs in ((state["obs_rms"]["obs"], sb3.obs_rms), (state["ret_rms"], sb3.ret_rms)):
        assert (
            np.array_equal(ours["mean"], theirs.mean)
            and np.array_equal(ours["var"], theirs.var)
            and ours["count"] == theirs.count
        )
    sb3.close()


def checkpoint(tmp_path, **config: Any) -> str:
    """A real checkpoint of a short CartPole run, its config's values replaced by ``config``."""
    from ppo_dict.algo.ppo import PPO
    from ppo_dict.run.checkpoint import CheckpointManager
    from ppo_dict.vec import InProcessEnvPool, env_spec, probe_env

    cfg = Config(
        env="gym_CartPole-v1",
        n_envs=1,
        num_workers=0,
        n_steps=32,
        batch_size=32,
        n_epochs=1,
        total_timesteps=32,
        seed=1,
        verbose=0,
    )
    model = PPO(cfg, InProcessEnvPool(probe_env(env_spec(cfg)), 1, 32))
    model.learn()
    path = CheckpointManager(str(tmp_path / "run" / "checkpoints"), keep=1).save(model)
    model.pool.close()
    state = torch.load(path, map_location="cpu", weights_only=True)
    state["config"].update(config)
    torch.save(state, path)
    return path


def test_a_checkpoints_config_imports_and_launches_nothing_under_dry_run(tmp_path, capsys, monkeypatch) -> None:
    sentinel = tmp_path / "ran"
    # imported, it touches the sentinel, then fails: the run stops at the check, after the import
    (tmp_path / "attack_module.py").write_text(
        f"import pathlib\npathlib.Path({str(sentinel)!r}).touch()\nraise RuntimeError('attack')\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    script = tmp_path / "game.x86_64"
    script.write_text(f"#!/bin/sh\ntouch {sentinel}\n")
    script.chmod(0o755)
    for name, config in (
        ("gym_packages", {"gym_packages": ["attack_module"]}),
        ("env", {"env": "gym_attack_module:Thing-v0"}),
        ("env_kwargs", {"env": "godot", "env_kwargs": {"env_path": str(script)}}),
    ):
        path = checkpoint(tmp_path / name, **config)
        code, err = cli(capsys, "--resume", path, "--dry_run")
        assert code == 2 and f"{name}=" in err and "--dry_run imports and launches nothing a file names" in err, err
        assert not sentinel.exists()
    path = checkpoint(tmp_path / "said", gym_packages=["attack_module"])
    code, err = cli(capsys, "--resume", path, "--total_timesteps", "64")
    said = f"{path}: its config imports the module(s) attack_module (gym_packages)"
    # said, then imported
    assert code == 2 and err.index(said) < err.index("gym_packages=attack_module: cannot be imported"), err
    assert sentinel.exists()
    sentinel.unlink()
    from ppo_dict.algo.model import Model

    with pytest.raises(RuntimeError, match="attack"):  # enjoy and export_onnx build the env of the file's config so
        Model.from_file(path)
    assert said in capsys.readouterr().err and sentinel.exists()
    sentinel.unlink()
    path = checkpoint(tmp_path / "launched", env="godot", env_kwargs={"env_path": str(script)})
    code, err = cli(capsys, "--resume", path, "--total_timesteps", "64")
    assert f"{path}: its config launches the Godot program of env_path={str(script)!r} (env_kwargs)" in err, err
    assert code == 2 and "Traceback" not in err and sentinel.exists(), err  # said, then launched (it exits at once: refused)


@pytest.fixture(scope="module")
def real_zips(tmp_path_factory) -> dict[str, str]:
    """Zips written by sb3 and sb3-contrib: Box/Discrete, Dict/Discrete, Box/Box with rl-zoo's lin_ schedules
    and ReLU (RecurrentPPO), Discrete/Discrete (MaskablePPO)."""
    from sb3_contrib import MaskablePPO, RecurrentPPO
    from sb3_contrib.common.envs import InvalidActionEnvDiscrete

    folder, zips = tmp_path_factory.mktemp("zips"), {}

    def lin(initial: float):  # rl-zoo's SimpleLinearSchedule, without importing rl_zoo3 (which patches gymnasium)
        from rl_zoo3.utils import SimpleLinearSchedule

        return SimpleLinearSchedule(initial)

    from ppo_dict.interop.sb3_zip import gymnasium_unpatched

    with gymnasium_unpatched():
        models = {
            "box": SB3PPO("MlpPolicy", "CartPole-v1", **SMALL),
            "dict": SB3PPO("MultiInputPolicy", SimpleMultiObsEnv(), **SMALL),
            "recurrent": RecurrentPPO(
                "MlpLstmPolicy",
                "Pendulum-v1",
                learning_rate=lin(1e-3),
                clip_range=lin(0.3),
                policy_kwargs=dict(activation_fn=torch.nn.ReLU, lstm_hidden_size=16, net_arch=[8]),
                **SMALL,
            ),
            "maskable": MaskablePPO("MlpPolicy", InvalidActionEnvDiscrete(dim=20, n_invalid_actions=10), **SMALL),
        }
        for name, model in models.items():
            model.learn(32)
            zips[name] = str(folder / f"{name}.zip")
            model.save(zips[name])
    return zips


@pytest.mark.parametrize("name", ["box", "dict", "recurrent", "maskable"])
def test_real_sb3_zips_read_as_sb3_reads_them(real_zips, name) -> None:
    ours, params = read_zip(real_zips[name])
    theirs, their_params, _ = load_from_zip_file(real_zips[name], device="cpu")
    assert set(params) == set(their_params)
    for key in ("observation_space", "action_space"):
        assert ours[key] == theirs[key] and ours[key].dtype == theirs[key].dtype, key
    assert ours["policy_class"] is theirs["policy_class"]
    assert {k: v for k, v in ours["policy_kwargs"].items()} == theirs["policy_kwargs"]
    for key in ("learning_rate", "clip_range"):
        assert schedule_value(ours[key]) == schedule_value(theirs[key]) is not None, key
    plain = [k for k, v in theirs.items() if isinstance(v, (int, float, str, bool, type(None), list))]
    assert {k: ours[k] for k in plain} == {k: theirs[k] for k in plain}
    left = sorted(k for k, v in ours.items() if isinstance(v, Unrebuilt))  # nobody reads them: sb3's learn() resets them
    assert set(left) <= {
        "_last_obs",
        "_last_episode_starts",
        "_last_original_obs",
        "_last_lstm_states",
        "ep_info_buffer",
        "ep_success_buffer",
    }


@pytest.mark.parametrize("name", ["recurrent", "maskable"])
def test_sb3_contrib_zips_load_without_trust(real_zips, name) -> None:
    cls = ppo_dict.RecurrentPPO if name == "recurrent" else ppo_dict.MaskablePPO
    model = cls.load(real_zips[name])
    theirs, their_params, _ = load_from_zip_file(real_zips[name], device="cpu")
    for key, value in their_params["policy"].items():
        assert torch.equal(model.policy.state_dict()[key], value), key
    assert model.observation_space == theirs["observation_space"]


def test_a_trained_agent_reads_its_schedules_without_unpickling(real_zips, tmp_path) -> None:
    agent = read_trained_agent(real_zips["recurrent"], "gym_Pendulum-v1")
    assert agent.saved["learning_rate"] == "lin_0.001" and agent.saved["clip_range"] == "lin_0.3"
    assert (
        agent.pinned["model"] == "mlp_lstm"
        and agent.pinned["activation_fn"] == "relu"
        and agent.pinned["lstm_hidden_size"] == 16
    )


def test_what_export_writes_reads_back_without_unpickling(tmp_path) -> None:
    """``--export_sb3``'s zip describes its schedules in JSON (a constant, ``lin_``), and it writes
    ``vecnormalize.npz`` beside rl-zoo's pickle: the same statistics and settings, read first; the pickle
    (a real sb3 VecNormalize) reads the same through the restricted unpickler."""
    from ppo_dict.algo.ppo import PPO
    from ppo_dict.interop.sb3 import export_sb3
    from ppo_dict.interop.trained_agent import vecnormalize_candidates
    from ppo_dict.vec import make_env_pool

    cfg = Config(
        env="gym_Pendulum-v1",
        n_envs=2,
        num_workers=0,
        n_steps=16,
        batch_size=16,
        n_epochs=1,
        seed=3,
        normalize=True,
        norm_gamma=0.9,
        clip_obs=5.0,
        learning_rate="lin_0.001",
        clip_range=0.3,
        verbose=0,
    )
    ppo = PPO(cfg, make_env_pool(cfg))
    try:
        ppo.learn(total_timesteps=64)
        zip_path = export_sb3(ppo, str(tmp_path / "logs" / "Pendulum-v1.zip"))
    finally:
        ppo.close()
    npz, pkl = vecnormalize_candidates(zip_path, "gym_Pendulum-v1")[:2]
    assert npz.endswith("vecnormalize.npz") and os.path.isfile(npz) and os.path.isfile(pkl)
    ours, theirs = read_statistics(npz), read_statistics(pkl)
    assert (
        ours[0] == theirs[0]
        and ours[0]["norm_gamma"] == 0.9
        and ours[0]["clip_obs"] == 5.0
        and ours[2] == theirs[2] == ("obs",)
    )
    for key in ("obs_rms", "ret_rms"):
        a, b = (ours[1][key], theirs[1][key]) if key == "ret_rms" else (ours[1][key]["obs"], theirs[1][key]["obs"])
        assert np.array_equal(a["mean"], b["mean"]) and np.array_equal(a["var"], b["var"]) and a["count"] == b["count"]
    agent = read_trained_agent(zip_path, "gym_Pendulum-v1")
    assert agent.vecnormalize == npz and agent.saved["learning_rate"] == "lin_0.001" and agent.saved["clip_range"] == 0.3
    data, _ = read_zip(zip_path)
    assert not [k for k in ("learning_rate", "clip_range", "lr_schedule") if isinstance(data[k], Unrebuilt)]
    ours, theirs = ppo_dict.PPO.load(zip_path), SB3PPO.load(zip_path)  # saved again, it still describes its schedules
    assert ours.learning_rate(0.5) == theirs.learning_rate(0.5) == 0.5 * 0.001 and theirs.clip_range(0.5) == 0.3
    ours.save(str(tmp_path / "again.zip"))
    assert read_zip(str(tmp_path / "again.zip"))[0]["learning_rate"] == "lin_0.001"


# ------------------------------------------------------------------------------------------ second round (issue 50)


def rl_zoo_layout(cartpole_zip: str, folder, vecnormalize: object = None) -> str:
    """``folder/logs/CartPole-v1.zip`` (the real zip) with ``vecnormalize`` pickled in
    ``logs/CartPole-v1/vecnormalize.pkl``."""
    logs = folder / "logs"
    (logs / "CartPole-v1").mkdir(parents=True)
    with open(cartpole_zip, "rb") as src, open(logs / "CartPole-v1.zip", "wb") as dst:
        dst.write(src.read())
    if vecnormalize is not None:
        with open(logs / "CartPole-v1" / "vecnormalize.pkl", "wb") as f:
            pickle.dump(vecnormalize, f, protocol=4)
    return str(logs / "CartPole-v1.zip")


def real_vecnormalize(cartpole_zip: str) -> Any:
    """sb3's VecNormalize that the fixture saved, loaded here (a file this test wrote) to be made hostile."""
    return VecNormalize.load(
        os.path.join(os.path.dirname(cartpole_zip), "sb3_vecnormalize.pkl"), make_vec_env("CartPole-v1", n_envs=2)
    )


def test_statistics_of_a_structured_dtype_are_refused_not_read_out_of_bounds(
    file_reader, cartpole_zip, tmp_path, capsys
) -> None:
    """A dtype given a field at an offset past its item size: read as statistics through pickle, the array reads
    outside its memory (a segfault under --dry_run, in issue 50); here it is refused by name, in one line (read
    first in a child, where a crash would not end pytest)."""
    from tests.test_plain_pickle import FIELD_PAST_ITEM, reconstructed

    vecnormalize = real_vecnormalize(cartpole_zip)
    vecnormalize.obs_rms.mean = reconstructed(FIELD_PAST_ITEM, (4,), bytes(32))
    zip_path = rl_zoo_layout(cartpole_zip, tmp_path, vecnormalize)
    refusal = "vecnormalize.pkl: cannot read as an sb3 VecNormalize pickle: a dtype 'V8': not a plain number type"
    outcome = file_reader.read("vecnormalize", os.path.join(os.path.dirname(zip_path), "CartPole-v1", "vecnormalize.pkl"))
    assert outcome["outcome"].startswith("refused: ") and refusal in outcome["outcome"], outcome
    code, err = cli(capsys, "--env", "gym_CartPole-v1", "--trained_agent", zip_path, "--num_workers", "0", "--dry_run")
    assert code == 2 and refusal in err and "Traceback" not in err, err


def test_episode_buffers_of_a_structured_dtype_are_left_unread(cartpole_zip, tmp_path) -> None:
    from collections import deque

    from tests.test_plain_pickle import FIELD_PAST_ITEM, reconstructed

    buffer = deque([{"r": reconstructed(FIELD_PAST_ITEM, (4,), bytes(32)), "l": 3}])
    with zipfile.ZipFile(cartpole_zip) as archive:
        entries = {name: archive.read(name) for name in archive.namelist()}
    data = json.loads(entries["data"])
    data["ep_info_buffer"][":serialized:"] = base64.b64encode(pickle.dumps(buffer, protocol=4)).decode()
    entries["data"] = json.dumps(data).encode()
    evil = str(tmp_path / "evil.zip")
    with zipfile.ZipFile(evil, "w") as archive:
        for name, content in entries.items():
            archive.writestr(name, content)
    read, _ = read_zip(evil)
    assert (
        isinstance(read["ep_info_buffer"], Unrebuilt) and "a dtype 'V8': not a plain number type" in read["ep_info_buffer"].why
    )
    loaded = ppo_dict.PPO.load(evil, env=make_vec_env("CartPole-v1", n_envs=1, seed=0))
    assert list(loaded.ep_info_buffer) == []  # episodes start afresh, as after learn()'s reset


def padded_zip(cartpole_zip: str, out: str, entry: str, size: int) -> str:
    """The real zip with ``entry`` deflated and ``size`` zero bytes after its content: a few hundred KiB on disk."""
    from tests.fuzz_files import write_zip, zip_entries

    return write_zip(zip_entries(cartpole_zip), out, {entry: size})


@pytest.mark.parametrize("entry, size", [("data", 80 * 2**20), ("policy.pth", 40 * 2**20)])
def test_a_zip_entry_larger_than_a_models_is_refused_naming_it_and_both_sizes(
    file_reader, cartpole_zip, tmp_path, capsys, entry: str, size: int
) -> None:
    """A 410 KiB zip whose data entry declared 300 MiB cost 525 MiB of memory: each entry has a cap now, above which
    it is refused before it is inflated (the read's resident memory grows by less than 64 MiB)."""
    from ppo_dict.interop.zip_entries import MAX_DATA_BYTES, PARAMETER_INFLATION

    evil = padded_zip(cartpole_zip, str(tmp_path / "big.zip"), entry, size)
    assert os.path.getsize(evil) < 2**20
    with zipfile.ZipFile(evil) as archive:
        info = archive.getinfo(entry)
    cap = MAX_DATA_BYTES if entry == "data" else PARAMETER_INFLATION * info.compress_size
    refusal = (
        f"its entry {entry!r} holds {info.file_size:,} bytes; ppo_dict reads at most {cap:,} for it (an sb3 model's is "
        "smaller)"
    )
    with pytest.raises(CheckpointError, match=re.escape(f"{evil}: {refusal}")):
        ppo_dict.PPO.load(evil)
    outcome = file_reader.read("zip", evil, deadline=20)
    assert outcome["outcome"] == f"refused: {evil}: {refusal}" and outcome["grew"] < 64 * 2**20, outcome
    code, err = cli(capsys, "--env", "gym_CartPole-v1", "--trained_agent", evil, "--num_workers", "0", "--dry_run")
    assert code == 2 and err == f"error: 1 invalid setting(s):\n  - trained_agent={evil!r}: {refusal}\n", err


@pytest.mark.parametrize(
    "key, value",
    [("num_timesteps", 10**400), ("_n_updates", -1), ("_current_progress_remaining", float("nan")), ("_episode_num", 1.5)],
    ids=["400 digits", "negative", "nan", "not whole"],
)
def test_a_zips_counters_that_are_not_counts_are_refused(cartpole_zip, tmp_path, capsys, key: str, value: Any) -> None:
    """A non-finite or 400-digit counter was an OverflowError (a traceback); now one message naming it."""
    from tests.fuzz_files import write_zip, zip_entries

    entries = zip_entries(cartpole_zip)
    entries["data"] = json.dumps({**json.loads(entries["data"]), key: value}).encode()
    evil = write_zip(entries, str(tmp_path / "counters.zip"))
    with pytest.raises(CheckpointError, match=f"its data entry's counters are not counts: {key}="):
        ppo_dict.PPO.load(evil)
    code, err = cli(capsys, "--env", "gym_CartPole-v1", "--trained_agent", evil, "--num_workers", "0", "--dry_run")
    assert code == 2 and f"counters are not counts: {key}=" in err and "Traceback" not in err, err


@pytest.mark.parametrize("count", [10**400, float("nan"), float("inf"), -1.0], ids=["400 digits", "nan", "inf", "negative"])
def test_a_vecnormalize_count_that_is_not_a_count_is_refused(cartpole_zip, tmp_path, capsys, count: Any) -> None:
    vecnormalize = real_vecnormalize(cartpole_zip)
    vecnormalize.ret_rms.count = count
    zip_path = rl_zoo_layout(cartpole_zip, tmp_path, vecnormalize)
    with pytest.raises(CheckpointError, match="ret_rms: statistics"):
        read_statistics(os.path.join(os.path.dirname(zip_path), "CartPole-v1", "vecnormalize.pkl"))
    code, err = cli(capsys, "--env", "gym_CartPole-v1", "--trained_agent", zip_path, "--num_workers", "0", "--dry_run")
    assert code == 2 and "ret_rms: statistics" in err and "Traceback" not in err, err
