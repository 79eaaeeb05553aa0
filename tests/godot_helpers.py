"""Helpers of the Godot tests: skip without the engine, process checks, the plugin-style stand-in game, pools."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional

import numpy as np
import torch

from ppo_dict.algo.ppo import PPO
from ppo_dict.core.config import Config
from ppo_dict.core.logger import Logger
from ppo_dict.vec.godot import GodotBackend
from ppo_dict.vec.in_process import InProcessEnvPool
from tests.system_parts import needs

ROOT = Path(__file__).resolve().parent.parent
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}

needs_godot = needs("godot")


# ---------------------------------------------------------------------------------------- helpers
def godot_pool(spec, n_envs: int, n_steps: int) -> InProcessEnvPool:
    """``n_envs`` columns of the games ``spec`` describes, stepped in this process."""
    return InProcessEnvPool(GodotBackend.probe(spec), n_envs, n_steps)


def process_state(pid: int) -> str | None:
    """The /proc state letter of ``pid`` (``Z``: zombie), or None when no such process exists."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return None


def godot_children() -> list[int]:
    """Live (non-zombie) Godot processes whose parent is this test process, from /proc."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        comm = stat[stat.index("(") + 1 : stat.rindex(")")]
        state, ppid = stat.rsplit(")", 1)[1].split()[:2]
        if comm.startswith("godot") and int(ppid) == os.getpid() and state != "Z":
            found.append(int(entry))
    return found


def wait_gone(pid: int, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process_state(pid) in (None, "Z"):
            return True
        time.sleep(0.02)
    return False


def toward_goal(obs: np.ndarray) -> np.ndarray:
    """The demo's greedy policy: velocity along (goal - position), scaled to reach the edge of [-1, 1]."""
    delta = obs[:, 2:4]
    return np.clip(delta / np.maximum(np.abs(delta).max(axis=1, keepdims=True), 1e-6), -1, 1).astype(np.float32)


PLUGIN_STYLE_GAME = '''#!{python}
"""Replies as a Godot RL Agents plugin game does: one space dict for all agents, no "truncated",
no "terminal_obs", done every 3rd step (the game resets the agent on a later frame)."""
import json, os, socket, struct, sys
port = int([a for a in sys.argv if a.startswith("--port=")][0].split("=")[1])
if os.environ.get("PLUGIN_GAME_LAUNCH_LOG"):  # one line per launch, for tests that count them
    with open(os.environ["PLUGIN_GAME_LAUNCH_LOG"], "a") as log:
        log.write(str(os.getpid()) + chr(10))
conn = socket.create_connection(("127.0.0.1", port))
def recv():
    def exact(n):
        data = b""
        while len(data) < n:
            data += conn.recv(n - len(data))
        return data
    return json.loads(exact(struct.unpack("<I", exact(4))[0]))
def send(message):
    body = json.dumps(message).encode()
    conn.sendall(struct.pack("<I", len(body)) + body)
assert recv()["type"] == "handshake"
assert recv()["type"] == "env_info"
send({{"type": "env_info", "n_agents": 2, "observation_space": {{"obs": {{"space": "box", "size": [1]}}}},
      "action_space": {{"jump": {{"action_type": "discrete", "size": 2}},
                       "move": {{"action_type": "continuous", "size": 1}}}}}})
steps = 0
while True:
    message = recv()
    if message["type"] == "reset":
        steps = 0
        send({{"type": "reset", "obs": [{{"obs": [0.0]}}, {{"obs": [0.5]}}]}})
    elif message["type"] == "action":
        steps += 1
        a = message["action"]
        send({{"type": "step", "obs": [{{"obs": [a[i]["move"][0] + a[i]["jump"]]}} for i in range(2)], "reward": [1.0, 2.0],
              "done": [steps % 3 == 0, False], "info": [{{}}, {{"TimeLimit.truncated": steps % 3 == 0}}]}})
    elif message["type"] == "close":
        sys.exit(0)
'''


def small_config(seed: int, total_timesteps: int, **overrides: object) -> Config:
    settings = dict(
        env="godot_demo",
        n_envs=8,
        num_workers=0,
        seed=seed,
        total_timesteps=total_timesteps,
        n_steps=128,
        batch_size=256,
        n_epochs=10,
        gamma=0.98,
        device="cpu",
        verbose=0,
    )
    return Config(**{**settings, **overrides})


def assert_learns_the_demo(cfg: Config, pool) -> None:
    """Train on ``pool`` (closed after); the deterministic return on 100 evaluation episodes (games seeded
    apart from training) must go from ~0 (< 2, reaching the goal < 10%) to > 10 (reaching it > 50%)."""
    from benchmarks.bench_godot import evaluate
    from ppo_dict.run.evaluation import EVAL_SEED_OFFSET

    try:
        model = PPO(cfg, pool, Logger(verbose=0))
        before = evaluate(model.policy, {}, 100, EVAL_SEED_OFFSET)
        model.learn()
        after = evaluate(model.policy, {}, 100, EVAL_SEED_OFFSET)
    finally:
        pool.close()
    assert before["return"] < 2.0 and before["success"] < 0.1, before
    assert after["return"] > 10.0 and after["success"] > 0.5, after


def tagged_godot(tag: str) -> list[int]:
    """Live (non-zombie) processes whose command line carries ``--pool_test_tag=<tag>``, from /proc."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if f"--pool_test_tag={tag}".encode() in argv and process_state(int(entry)) not in (None, "Z"):
            found.append(int(entry))
    return found


def demo_config(tag: str, **overrides: object) -> Config:
    settings = dict(
        env="godot_demo",
        env_kwargs={"game_args": {"max_steps": 20, "pool_test_tag": tag}},
        n_envs=8,
        num_workers=2,
        seed=3,
        total_timesteps=2 * 8 * 32,
        n_steps=32,
        batch_size=64,
        n_epochs=2,
        gamma=0.98,
        device="cpu",
        verbose=0,
    )
    return Config(**{**settings, **overrides})


def run_cli(
    args: list[str],
    cwd: Path,
    module: str = "ppo_dict.main_ppo_godot",
    timeout: float = 120,
    env_extra: Optional[dict[str, str]] = None,
) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=cwd,
        env={**ENV, **(env_extra or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def train(cfg: Config, pool) -> tuple[PPO, list[torch.Tensor]]:
    try:
        model = PPO(cfg, pool, Logger(verbose=0)).learn()
    finally:
        pool.close()
    return model, [p.detach().clone() for p in model.policy.parameters()]
