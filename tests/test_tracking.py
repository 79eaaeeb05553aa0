"""Logging outputs: wandb (offline, for real, read back from its .wandb file), CSV, TensorBoard."""

import json
import os
import struct

import pytest

from ppo_dict.run.tracking import CSVWriter, read_csv, resolve_wandb_mode
from tests.test_main_ppo import run_cli

import numpy as np


def read_wandb_records(path: str) -> list:
    """Records of a ``.wandb`` file: wandb's leveldb-style log (header ``:W&B``, 0xBEE1, version 0;
    32 KiB blocks; chunks of checksum u32, length u16, type u8: 1 full, 2 first, 3 middle, 4 last)."""
    from wandb.proto import wandb_internal_pb2

    data = open(path, "rb").read()
    assert data[:4] == b":W&B" and struct.unpack("<H", data[4:6])[0] == 0xBEE1
    records, pending, pos, block = [], b"", 7, 32768
    while pos + 7 <= len(data):
        left = block - pos % block
        if left < 7:
            pos += left
            continue
        crc, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        chunk = data[pos + 7 : pos + 7 + length]
        pos += 7 + length
        if kind == 0 and length == 0:
            continue
        pending = chunk if kind in (1, 2) else pending + chunk
        if kind in (1, 4):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            records.append(record)
    return records


def test_wandb_offline_run_holds_config_sb3_keys_and_eval(tmp_path) -> None:
    home, wandb_dir, run_dir = tmp_path / "home", tmp_path / "wandb", tmp_path / "run"
    home.mkdir()
    env = {"HOME": str(home), "WANDB_DIR": str(wandb_dir), "WANDB_API_KEY": None, "WANDB_MODE": None, "NETRC": None}
    proc = run_cli(
        "--env",
        "gym_CartPole-v1",
        "--num_workers",
        "0",
        "--n_envs",
        "2",
        "--n_steps",
        "128",
        "--batch_size",
        "64",
        "--n_epochs",
        "2",
        "--total_timesteps",
        "512",
        "--seed",
        "0",
        "--verbose",
        "0",
        "--run_dir",
        str(run_dir),
        "--eval_freq",
        "256",
        "--eval_episodes",
        "1",
        "--project",
        "ppo-test",
        "--group",
        "g1",
        "--tags",
        "a,b",
        "--run_name",
        "r1",
        "--tensorboard_log",
        str(tmp_path / "tb"),
        env_extra=env,
    )
    assert proc.returncode == 0, proc.stderr
    assert "wandb: no W&B API key configured (WANDB_API_KEY or ~/.netrc): logging offline" in proc.stderr
    offline = [d for d in os.listdir(wandb_dir / "wandb") if d.startswith("offline-run-")]
    assert len(offline) == 1
    sync_dir = wandb_dir / "wandb" / offline[0]
    assert f"wandb sync {sync_dir}" in proc.stdout
    run_id = (run_dir / "wandb_run_id").read_text()
    assert offline[0].endswith(run_id)
    records = read_wandb_records(str(sync_dir / f"run-{run_id}.wandb"))
    run = next(r.run for r in records if r.WhichOneof("record_type") == "run")
    assert (run.project, run.run_group, list(run.tags), run.display_name) == ("ppo-test", "g1", ["a", "b"], "r1")
    config = {
        item.key: json.loads(item.value_json)
        for r in records
        if r.WhichOneof("record_type") == "config"
        for item in r.config.update
    }
    config.update({item.key: json.loads(item.value_json) for item in run.config.update})
    assert config["n_steps"] == 128 and config["learning_rate"] == 0.0003 and config["project"] == "ppo-test"
    # history items name their key in `key`, or (keys with "/") in the repeated `nested_key`
    history = [
        {(i.key or "/".join(i.nested_key)): json.loads(i.value_json) for i in r.history.item}
        for r in records
        if r.WhichOneof("record_type") == "history"
    ]
    keys = set().union(*history)
    for key in (
        "rollout/ep_rew_mean",
        "rollout/ep_len_mean",
        "time/fps",
        "time/total_timesteps",
        "train/value_loss",
        "train/approx_kl",
        "train/learning_rate",
        "eval/mean_reward",
        "eval/mean_ep_length",
        "step",
    ):
        assert key in keys, key
    csv_rows = [r for r in read_csv(str(run_dir / "progress.csv")) if "rollout/ep_rew_mean" in r]
    last_reward = [h for h in history if "rollout/ep_rew_mean" in h][-1]
    assert last_reward["rollout/ep_rew_mean"] == pytest.approx(csv_rows[-1]["rollout/ep_rew_mean"], rel=1e-12)
    assert [h["step"] for h in history if "eval/mean_reward" in h] == [256, 512]
    # TensorBoard event files with the same scalars
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    board = EventAccumulator(str(tmp_path / "tb" / "PPO_1"))
    board.Reload()
    rewards = board.Scalars("rollout/ep_rew_mean")
    assert [e.step for e in rewards] == [256, 512]
    assert rewards[-1].value == pytest.approx(csv_rows[-1]["rollout/ep_rew_mean"], rel=1e-6)
    assert (run_dir / "learning_curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_wandb_mode_resolution(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.delenv("NETRC", raising=False)
    assert resolve_wandb_mode(None) == ("offline", "no W&B API key configured (WANDB_API_KEY or ~/.netrc): logging offline")
    assert resolve_wandb_mode("disabled") == ("disabled", "--wandb_mode disabled")
    (tmp_path / ".netrc").write_text("machine api.wandb.ai\n  login user\n  password " + "a" * 40 + "\n")
    os.chmod(tmp_path / ".netrc", 0o600)
    assert resolve_wandb_mode(None) == ("online", "an API key is configured")
    (tmp_path / ".netrc").unlink()
    monkeypatch.setenv("WANDB_API_KEY", "b" * 40)
    assert resolve_wandb_mode(None)[0] == "online"
    monkeypatch.setenv("WANDB_MODE", "offline")
    assert resolve_wandb_mode(None) == (None, "WANDB_MODE=offline")  # wandb.init reads it itself


def test_csv_writer_widens_header_and_resume_drops_later_rows(tmp_path) -> None:
    path = str(tmp_path / "progress.csv")
    writer = CSVWriter(path)
    writer({"rollout/ep_rew_mean": np.float64(-5.5), "time/iterations": 1}, 100)
    writer({"rollout/ep_rew_mean": -4.0, "train/loss": np.float32(0.25), "text": "x"}, 200)
    writer({"rollout/ep_rew_mean": -3.0}, 300)
    lines = open(path).read().splitlines()
    assert lines == ["step,rollout/ep_rew_mean,time/iterations,train/loss", "100,-5.5,1,", "200,-4.0,,0.25", "300,-3.0,,"]
    CSVWriter(path, resume_step=200)
    assert [r["step"] for r in read_csv(path)] == [100.0, 200.0]
