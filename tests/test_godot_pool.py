"""Godot games through the worker pool: the CLI, pool vs in-process bit equality, worker death, refusals.

Every test here that runs the demo uses the real headless engine (``godot3-server``) and skips,
saying so, only when it is not installed. Godot processes are found in /proc by a tag flag each
test passes to its games (``--pool_test_tag=<unique>``, ignored by the demo), so processes of
other runs on the machine never count.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import torch

from ppo_dict.envs import make_env, resolve_env_name
from ppo_dict.envs.godot.spec import godot_spec
from ppo_dict.checks import validate
from ppo_dict.config import Config
from ppo_dict.vec import env_spec, make_env_pool
from ppo_dict.vec.godot import GodotBackend
from ppo_dict.vec.in_process import InProcessEnvPool
from ppo_dict.errors import ConfigError, WorkerDiedError
from ppo_dict.logger import Logger
from ppo_dict.ppo import PPO
from ppo_dict.vec.shm_pool import ShmEnvPool
from tests.test_godot import PLUGIN_STYLE_GAME, assert_learns_the_demo, needs_godot, process_state, wait_gone

ROOT = Path(__file__).resolve().parent.parent
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


# ---------------------------------------------------------------------------------------- helpers
@pytest.fixture
def tag():
    """A unique ``game_args`` flag for this test's games; fails the test if any of them outlives it."""
    value = uuid.uuid4().hex[:12]
    yield value
    left = tagged_godot(value)
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    assert not left, f"Godot processes left running: {left}"


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
        env="godot_demo", env_kwargs={"game_args": {"max_steps": 20, "pool_test_tag": tag}}, n_envs=8, num_workers=2,
        seed=3, total_timesteps=2 * 8 * 32, n_steps=32, batch_size=64, n_epochs=2, gamma=0.98, device="cpu", verbose=0,
    )
    return Config(**{**settings, **overrides})


def run_cli(args: list[str], cwd: Path, module: str = "ppo_dict.main_ppo_godot", timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", module, *args], cwd=cwd, env=ENV, capture_output=True, text=True, timeout=timeout)


def train(cfg: Config, pool) -> tuple[PPO, list[torch.Tensor]]:
    try:
        model = PPO(cfg, pool, Logger(verbose=0)).learn()
    finally:
        pool.close()
    return model, [p.detach().clone() for p in model.policy.parameters()]


# ---------------------------------------------------------------------------------------- names and config, no engine needed
def test_godot_names_resolve_and_refuse_clearly():
    spec = resolve_env_name("godot_demo", kwargs={"speedup": 100})
    assert spec.is_godot and spec.name == "godot_demo" and spec.kwargs["speedup"] == 100
    assert not resolve_env_name("gym_CartPole-v1").is_godot
    with pytest.raises(ValueError, match=r"^unknown env_kwargs bogus, n_agents: a Godot game takes project, env_path, binary, seed, "):
        resolve_env_name("godot_demo", kwargs={"bogus": 1, "n_agents": 4})
    with pytest.raises(ValueError, match=r"--env godot needs a game: --env_kwargs \"dict\(env_path='game.x86_64'\)\""):
        resolve_env_name("godot")
    with pytest.raises(ValueError, match="godot_demo is the demo game: for another game use --env godot"):
        resolve_env_name("godot_demo", kwargs={"env_path": "/bin/true"})
    with pytest.raises(ValueError, match="unknown Godot game 'godot_pong': use godot_demo"):
        resolve_env_name("godot_pong")
    with pytest.raises(ValueError, match=r"write gym_<gymnasium id> \(e.g. gym_Reacher-v2\), test_dummy, godot_demo \(the Godot demo game\) or godot"):
        resolve_env_name("pong")
    with pytest.raises(ValueError, match=r"godot_demo is a Godot game: its agents are env columns of one Godot process, stepped by "
                                         r"the trainer's Godot runner \(ppo_dict.vec.godot\)"):
        make_env(godot_spec())


@needs_godot
def test_validate_names_agents_per_process_and_timeouts():
    cfg = Config(env="godot_demo", env_kwargs={"step_timeout": 60.0, "game_args": {"n_agents": 3}}, n_envs=8, num_workers=2, eval_freq=1000)
    with pytest.raises(ConfigError) as err:
        validate(cfg)
    problems = str(err.value).splitlines()[1:]
    assert problems == [
        "  - envs_per_worker=4: godot_demo runs 3 agents (n_agents) per Godot process and each worker owns whole processes, "
        "so envs_per_worker must be a multiple of 3",
        "  - env_kwargs step_timeout=60.0 (the game's own reply timeout) must be below step_timeout=60.0 (the worker's), so that "
        "a hung game is reported with its output before its worker is declared hung",
        "  - eval_freq: not supported for godot_demo yet (it builds the env alone as a gymnasium env, which this one is not)",
    ]
    backend = validate(Config(env="godot_demo", n_envs=12, num_workers=2))  # 6 agents per worker: one game each
    spec = backend.for_blocks(envs_per_block=6, step_timeout=10.0, in_workers=True).spec
    assert spec.kwargs["game_args"] == {"n_agents": 6} and spec.kwargs["step_timeout"] == 9.0
    # the demo observes an image only when its game_args ask for one: the model check follows the probed space
    with pytest.raises(ConfigError, match="model='mlp': the observation holds images; use --model cnn"):
        validate(Config(env="godot_demo", env_kwargs={"game_args": {"image_size": 8}}, n_envs=4, num_workers=0))


def test_missing_game_is_refused_before_any_process_starts(tmp_path):
    """Exit 2 with the path named, from main_ppo and main_ppo_godot; no run directory, no worker."""
    from_main = run_cli(["--env", "godot", "--env_kwargs", "dict(env_path='/nonexistent')"], tmp_path, module="ppo_dict.main_ppo")
    from_godot = run_cli(["--env_path", "/nonexistent/game.x86_64"], tmp_path)
    assert (from_main.returncode, from_godot.returncode) == (2, 2)
    assert from_main.stderr == (
        "error: 1 invalid setting(s):\n  - env='godot': exported Godot game '/nonexistent' does not exist or is not executable (--env_path)\n"
    )
    assert "exported Godot game '/nonexistent/game.x86_64' does not exist" in from_godot.stderr
    assert from_main.stdout == from_godot.stdout == "" and not (tmp_path / "runs").exists()


def test_plugin_style_game_trains_through_workers_with_env_path(tmp_path):
    """``--env_path`` to an exported game (a stand-in that replies as plugin games do, 2 agents per process)."""
    game = tmp_path / "plugin_game.x86_64"
    game.write_text(PLUGIN_STYLE_GAME.format(python=sys.executable))
    game.chmod(0o755)
    args = ["--env_path", str(game), "--n_envs", "4", "--num_workers", "2", "--n_steps", "16", "--batch_size", "32",
            "--n_epochs", "1", "--total_timesteps", "128", "--seed", "0", "--verbose", "0", "--progress", "none",
            "--plot", "False", "--run_dir", str(tmp_path / "run")]
    result = run_cli(args, tmp_path)
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout.splitlines()[-1])
    assert summary["env"] == "godot" and summary["env_steps"] == 128 and summary["ep_rew_mean"] == 4.5  # 3-step episodes: agent 0 earns 1 a step, agent 1 earns 2
    odd = run_cli([*args[:4], "--n_envs", "6", "--num_workers", "2", "--run_dir", str(tmp_path / "odd")], tmp_path)
    assert odd.returncode == 2 and (
        f"envs_per_worker=3: godot ({game}) runs 2 agents (n_agents) per Godot process and each worker owns whole processes"
    ) in odd.stderr


# ---------------------------------------------------------------------------------------- the real engine
@needs_godot
def test_cli_trains_the_demo_through_the_worker_pool(tmp_path, tag):
    args = ["--total_timesteps", "2048", "--seed", "1", "--verbose", "0", "--progress", "none", "--plot", "False",
            "--run_dir", str(tmp_path / "run"), "--env_kwargs", f"dict(game_args=dict(pool_test_tag='{tag}'))"]
    result = run_cli(args, tmp_path)
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout.splitlines()[-1])
    # the demo's defaults: 8 envs x n_steps 128 = 1024 per rollout, 2 rollouts
    assert (summary["env"], summary["env_steps"], summary["iterations"]) == ("godot_demo", 2048, 2)
    assert summary["ep_rew_mean"] is not None and summary["fps"] > 0
    config = json.loads((tmp_path / "run" / "config.json").read_text())
    assert (config["n_envs"], config["num_workers"], config["n_steps"], config["batch_size"], config["gamma"]) == (8, 2, 128, 256, 0.98)


@needs_godot
def test_worker_pool_equals_in_process_pool_bit_for_bit(tag):
    """2 workers x (one game of 4 agents) == the same two games in this process == one game of 8 agents here."""
    cfg = demo_config(tag)
    workers = make_env_pool(cfg)
    assert isinstance(workers, ShmEnvPool) and workers.backend.spec.kwargs["game_args"]["n_agents"] == 4
    pooled, pooled_params = train(cfg, workers)
    two_games = InProcessEnvPool(GodotBackend.probe(env_spec(cfg)).for_blocks(4, cfg.step_timeout, in_workers=False), cfg.n_envs, cfg.n_steps)
    assert len(two_games.runner.games) == 2
    here, here_params = train(cfg.replace(num_workers=0), two_games)
    one_game_pool = make_env_pool(cfg.replace(num_workers=0))
    assert len(one_game_pool.runner.games) == 1
    one_game, one_game_params = train(cfg.replace(num_workers=0), one_game_pool)
    assert pooled.num_timesteps == 512 and len(pooled.ep_info_buffer) >= 16
    for other, params in ((here, here_params), (one_game, one_game_params)):
        assert [(e["r"], e["l"]) for e in other.ep_info_buffer] == [(e["r"], e["l"]) for e in pooled.ep_info_buffer]
        assert all(torch.equal(a, b) for a, b in zip(pooled_params, params))


def game_pids_of(worker_pid: int) -> list[int]:
    """Godot processes whose parent is ``worker_pid``, from /proc."""
    pids = []
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except (OSError, ValueError):
            continue
        if stat[stat.index("(") + 1 : stat.rindex(")")].startswith("godot") and int(stat.rsplit(")", 1)[1].split()[1]) == worker_pid:
            pids.append(int(entry))
    return pids


@needs_godot
def test_sigkilled_worker_gives_worker_died_error_and_kills_its_game(tag):
    cfg = demo_config(tag, main_steps_envs=False)  # two worker processes, each owning one game
    pool = make_env_pool(cfg)
    try:
        pool.reset(seed=0)
        pool.step(0)
        games = [game_pids_of(pid) for pid in pool.pids]
        assert [len(g) for g in games] == [1, 1]  # one Godot process per worker
        os.kill(pool.pids[1], signal.SIGKILL)
        with pytest.raises(WorkerDiedError, match=r"^worker 1 \(envs 4..7, godot_demo, pid \d+\) died with exit code -9 \(SIGKILL\) during 'step'"):
            pool.step(1)
    finally:
        pool.close()
    # the killed worker's game by PR_SET_PDEATHSIG, the other closed with its worker (a zombie is dead)
    for pid in games[0] + games[1]:
        assert wait_gone(pid), f"Godot {pid} outlived its worker: state {process_state(pid)}"


@needs_godot
@pytest.mark.slow
def test_demo_learns_through_the_worker_pool(tag):
    """150k agent steps through 2 workers x 4 agents (the demo's settings): deterministic return from ~0 to
    > 10 (the greedy optimum is ~12), within 150 s on 2 cores."""
    cfg = demo_config(tag, env_kwargs={"game_args": {"pool_test_tag": tag}}, seed=0, total_timesteps=150_000, n_steps=128,
                      batch_size=256, n_epochs=10)
    start = time.perf_counter()
    assert_learns_the_demo(cfg, make_env_pool(cfg))
    assert time.perf_counter() - start < 150
