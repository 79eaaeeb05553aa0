"""python -m ppo_dict.main_ppo_godot (and main_ppo with a Godot env): the demo through workers, other games by path,
refusals."""

from __future__ import annotations

import json
import sys


from tests.cli_here import run_here
from tests.godot_helpers import PLUGIN_STYLE_GAME, needs_godot, run_cli

GODOT = "ppo_dict.main_ppo_godot"


def test_missing_game_is_refused_before_any_process_starts(tmp_path):
    """Exit 2 with the path named, from main_ppo and main_ppo_godot; no run directory, no worker."""
    from_main = run_cli(
        ["--env", "godot", "--env_kwargs", "dict(env_path='/nonexistent')"], tmp_path, module="ppo_dict.main_ppo"
    )
    from_godot = run_cli(["--env_path", "/nonexistent/game.x86_64"], tmp_path)
    assert (from_main.returncode, from_godot.returncode) == (2, 2)
    assert from_main.stderr == (
        "error: 1 invalid setting(s):\n  - env='godot': exported Godot game '/nonexistent' does not exist or is not "
        "executable (--env_path)\n"
    )
    assert "exported Godot game '/nonexistent/game.x86_64' does not exist" in from_godot.stderr
    assert from_main.stdout == from_godot.stdout == "" and not (tmp_path / "runs").exists()


def test_plugin_style_game_trains_through_workers_with_env_path(tmp_path):
    """``--env_path`` to an exported game (a stand-in that replies as plugin games do, 2 agents per process).

    The game is launched once to read its spaces before anything starts, then once per block of
    columns: the main process's block and the one worker's (not again for each check)."""
    game = tmp_path / "plugin_game.x86_64"
    game.write_text(PLUGIN_STYLE_GAME.format(python=sys.executable))
    game.chmod(0o755)
    args = [
        "--env_path",
        str(game),
        "--n_envs",
        "4",
        "--num_workers",
        "2",
        "--n_steps",
        "16",
        "--batch_size",
        "32",
        "--n_epochs",
        "1",
        "--total_timesteps",
        "128",
        "--seed",
        "0",
        "--verbose",
        "0",
        "--progress",
        "none",
        "--plot",
        "False",
        "--run_dir",
        str(tmp_path / "run"),
    ]
    launches = tmp_path / "launches.log"
    result = run_cli(args, tmp_path, env_extra={"PLUGIN_GAME_LAUNCH_LOG": str(launches)})
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout.splitlines()[-1])
    # 3-step episodes: agent 0 earns 1 a step, agent 1 earns 2
    assert summary["env"] == "godot" and summary["env_steps"] == 128 and summary["ep_rew_mean"] == 4.5
    assert len(launches.read_text().splitlines()) == 1 + 2
    # the refusals and the dry run in this process (tests/cli_here.py): their claims are the messages
    odd = run_here(
        *args[:4], "--n_envs", "5", "--num_workers", "2", "--run_dir", str(tmp_path / "odd"), module=GODOT, cwd=str(tmp_path)
    )
    assert (
        odd.returncode == 2
        and (
            f"n_envs=5: godot ({game}) runs 2 agents (n_agents) per Godot process and each process owns whole games, "
            "so n_envs must be a multiple of 2"
        )
        in odd.stderr
    )
    # 4 games: 2, 1, 1
    unequal = run_here(*args[:4], "--n_envs", "8", "--num_workers", "4", "--dry_run", module=GODOT, cwd=str(tmp_path))
    assert (
        unequal.returncode == 0
        and "layout: 8 envs: 3 worker processes x 4/2 envs (forkserver), none in this process; as asked (num_workers 4)"
        in unequal.stdout
    ), unequal.stderr
    infos = run_here(
        *args[:4], "--info_keywords", "is_success", "--run_dir", str(tmp_path / "infos"), module=GODOT, cwd=str(tmp_path)
    )
    assert (
        infos.returncode == 2
        and (f"info_keywords=is_success: not supported for godot ({game}) (not gymnasium envs: they send no infos)")
        in infos.stderr
    )


# ---------------------------------------------------------------------------------------- the real engine
@needs_godot
def test_cli_trains_the_demo_through_the_worker_pool(tmp_path, tag):
    args = [
        "--total_timesteps",
        "2048",
        "--seed",
        "1",
        "--verbose",
        "0",
        "--progress",
        "none",
        "--plot",
        "False",
        "--run_dir",
        str(tmp_path / "run"),
        "--env_kwargs",
        f"dict(game_args=dict(pool_test_tag='{tag}'))",
    ]
    result = run_cli(args, tmp_path)
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout.splitlines()[-1])
    # the demo's defaults: 8 envs x n_steps 128 = 1024 per rollout, 2 rollouts
    assert (summary["env"], summary["env_steps"], summary["iterations"]) == ("godot_demo", 2048, 2)
    assert summary["ep_rew_mean"] is not None and summary["fps"] > 0
    config = json.loads((tmp_path / "run" / "config.json").read_text())
    assert (config["n_envs"], config["num_workers"], config["n_steps"], config["batch_size"], config["gamma"]) == (
        8,
        2,
        128,
        256,
        0.98,
    )
