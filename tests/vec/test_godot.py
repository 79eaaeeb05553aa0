"""The Godot backend: runners write storage as the games reply, blocks own whole games, the worker pool equals the
in-process pool, PPO learns the demo."""

from __future__ import annotations

import os
import signal
import time

import numpy as np
import pytest
import torch
from gymnasium import spaces

from ppo_dict.algo.ppo import PPO
from ppo_dict.core.config import Config
from ppo_dict.core.errors import ConfigError, EnvWorkerError, WorkerDiedError
from ppo_dict.core.logger import Logger
from ppo_dict.data.storage import RolloutStorage
from ppo_dict.envs.godot.game import GodotGame
from ppo_dict.envs.godot.spec import godot_spec
from ppo_dict.run.checks import validate
from ppo_dict.vec import env_spec, make_env_pool
from ppo_dict.vec.godot import GodotBackend, GodotRunner
from ppo_dict.vec.in_process import InProcessEnvPool
from ppo_dict.vec.runner import env_seeds
from ppo_dict.vec.shm_pool import ShmEnvPool
from tests.godot_helpers import (
    assert_learns_the_demo,
    demo_config,
    godot_pool,
    needs_godot,
    process_state,
    small_config,
    train,
    wait_gone,
)


@needs_godot
def test_pool_writes_storage_like_the_games(no_leftover_godot):
    """Two games x 4 agents into storage, against the same games stepped directly."""
    spec = godot_spec(game_args={"max_steps": 12})
    pool = godot_pool(spec, n_envs=8, n_steps=30)
    s = pool.storage
    assert (
        pool.num_envs == 8
        and len(pool.runner.games) == 2
        and pool.observation_space == spaces.Dict({"obs": spaces.Box(-1, 1, (4,), np.float32)})
    )
    references = [GodotGame(game_args={"max_steps": 12}), GodotGame(game_args={"max_steps": 12})]
    try:
        pool.reset(seed=10)
        ref_obs = np.concatenate([g.reset(seed=10 + 4 * i)["obs"] for i, g in enumerate(references)])
        np.testing.assert_array_equal(s.env_obs["obs"][0], ref_obs)
        rng = np.random.default_rng(1)
        returns = np.zeros(8)
        ends = 0
        for t in range(30):
            s.env_actions[...] = rng.uniform(-1, 1, (8, 2))
            pool.step(t)
            replies = [g.step(s.env_actions[4 * i : 4 * i + 4]) for i, g in enumerate(references)]
            np.testing.assert_array_equal(s.env_obs["obs"][t + 1], np.concatenate([r.obs["obs"] for r in replies]))
            np.testing.assert_array_equal(s.env_rewards[t], np.concatenate([r.rewards for r in replies]))
            np.testing.assert_array_equal(s.truncated[t], np.concatenate([r.truncated for r in replies]))
            returns += s.env_rewards[t]
            for i in np.flatnonzero(s.dones_at(t)):
                ends += 1
                terminal = replies[i // 4].terminal_obs["obs"][i % 4]
                np.testing.assert_array_equal(s.env_terminal_obs["obs"][i], terminal)
                assert s.episode(i)[0]["r"] == pytest.approx(returns[i], abs=1e-5)
                returns[i] = 0
        assert ends >= 16  # every column hits the 12-step limit at least twice in 30 steps
        pids = [g.pid for g in pool.runner.games]
    finally:
        pool.close()
        for g in references:
            g.close()
    assert all(process_state(pid) is None for pid in pids)


@needs_godot
def test_pool_rejects_n_envs_that_split_a_game(no_leftover_godot):
    """Found once the first game says how many agents it runs: reported as a worker's constructor error
    is (the main process builds these envs), the games launched so far closed."""
    with pytest.raises(
        EnvWorkerError,
        match=r"^the main process, env 0 \(godot_demo\) raised in constructor: ValueError: "
        r"6 envs for godot_demo: each Godot process runs 4 agents, so the envs of a pool "
        r"\(or of one worker\) must be a positive multiple of 4",
    ):
        godot_pool(godot_spec(), n_envs=6, n_steps=8)


@needs_godot
def test_ppo_trains_on_the_pool_and_is_deterministic(no_leftover_godot):
    """PPO on a Godot in-process pool runs, sees episodes end, and two runs with one seed agree bit for bit."""

    def run() -> tuple[PPO, list[torch.Tensor]]:
        cfg = small_config(seed=3, total_timesteps=2 * 8 * 32, n_steps=32, batch_size=64, n_epochs=2)
        pool = godot_pool(godot_spec(seed=3, game_args={"max_steps": 20}), cfg.n_envs, cfg.n_steps)
        try:
            model = PPO(cfg, pool, Logger(verbose=0)).learn()
        finally:
            pool.close()
        return model, [p.detach().clone() for p in model.policy.parameters()]

    first, first_params = run()
    assert first.num_timesteps == 512 and len(first.ep_info_buffer) >= 16
    assert all(e["l"] <= 20 for e in first.ep_info_buffer)
    second, second_params = run()
    assert [e["r"] for e in first.ep_info_buffer] == [e["r"] for e in second.ep_info_buffer]
    for a, b in zip(first_params, second_params):
        assert torch.equal(a, b)


@needs_godot
@pytest.mark.slow
def test_ppo_learns_the_demo(no_leftover_godot):
    """About 40 s: 150k agent steps take the deterministic return from ~0 to ~12 (the greedy optimum)."""
    cfg = small_config(seed=0, total_timesteps=150_000)
    assert_learns_the_demo(cfg, godot_pool(godot_spec(seed=0), cfg.n_envs, cfg.n_steps))


@needs_godot
def test_runner_writes_only_its_block_of_columns(no_leftover_godot):
    """A worker's view: one game behind columns 4..7 of 8, seeded as the in-process pool seeds them."""
    spec = godot_spec()
    pool = godot_pool(spec, n_envs=8, n_steps=4)
    storage = RolloutStorage(pool.observation_space, pool.action_space, n_steps=4, n_envs=8)
    runner = GodotRunner(spec, range(4, 8), storage)
    try:
        runner.open()
        pool.reset(seed=2)
        runner.reset(env_seeds(2, 8))
        storage.env_obs["obs"][:, :4] = np.nan
        for t in range(4):
            pool.storage.env_actions[...] = storage.env_actions[...] = np.full((8, 2), 0.3 * (t - 1), np.float32)
            pool.step(t)
            runner.step(t)
        np.testing.assert_array_equal(storage.env_obs["obs"][:, 4:], pool.storage.env_obs["obs"][:, 4:])
        np.testing.assert_array_equal(storage.env_rewards[:, 4:], pool.storage.env_rewards[:, 4:])
        assert np.isnan(storage.env_obs["obs"][:, :4]).all() and not storage.env_rewards[:, :4].any()
        assert runner.active == (4, "step")
    finally:
        pool.close()
        runner.close()


@needs_godot
def test_validate_names_agents_per_process_and_timeouts():
    cfg = Config(
        env="godot_demo",
        env_kwargs={"step_timeout": 60.0, "game_args": {"n_agents": 3}},
        n_envs=8,
        num_workers=2,
        eval_freq=1000,
    )
    with pytest.raises(ConfigError) as err:
        validate(cfg)
    problems = str(err.value).splitlines()[1:]
    assert problems == [
        "  - n_envs=8: godot_demo runs 3 agents (n_agents) per Godot process and each process owns whole games, "
        "so n_envs must be a multiple of 3",
        "  - env_kwargs step_timeout=60.0 (the game's own reply timeout) must be below step_timeout=60.0 (the worker's, "
        "or the main process's for its own games), so that a hung game is reported with its output before its worker is "
        "declared hung",
        "  - eval_freq: not supported for godot_demo yet (it builds the env alone as a gymnasium env, which this one is not)",
    ]
    # as the pools run it: one game per block, of its size
    pooled = validate(Config(env="godot_demo", n_envs=12, num_workers=2))
    assert pooled.block_games and pooled.unit == 1 and pooled.spec.kwargs["step_timeout"] == 54.0  # 0.9 x the worker's 60 s
    spec = (
        GodotBackend.probe(env_spec(Config(env="godot_demo")))
        .for_blocks(envs_per_block=6, step_timeout=10.0, in_workers=True)
        .spec
    )
    assert spec.kwargs["game_args"] == {"n_agents": 6} and spec.kwargs["step_timeout"] == 9.0
    # the demo observes an image only when its game_args ask for one: the model check follows the probed space
    with pytest.raises(ConfigError, match="model='mlp': the observation holds images; use --model cnn"):
        validate(Config(env="godot_demo", env_kwargs={"game_args": {"image_size": 8}}, n_envs=4, num_workers=0))


@needs_godot
def test_worker_pool_equals_in_process_pool_bit_for_bit(tag):
    """2 workers x (one game of 4 agents) == the same two games in this process == one game of 8 agents here."""
    cfg = demo_config(tag)
    workers = make_env_pool(cfg)
    # a game per block
    assert isinstance(workers, ShmEnvPool) and workers.main_envs == 4 and workers._main_runner.n_agents == 4
    pooled, pooled_params = train(cfg, workers)
    two_games = InProcessEnvPool(
        GodotBackend.probe(env_spec(cfg)).for_blocks(4, cfg.step_timeout, in_workers=False), cfg.n_envs, cfg.n_steps
    )
    assert len(two_games.runner.games) == 2
    here, here_params = train(cfg.replace(num_workers=0), two_games)
    one_game_pool = make_env_pool(cfg.replace(num_workers=0))
    assert len(one_game_pool.runner.games) == 1
    one_game, one_game_params = train(cfg.replace(num_workers=0), one_game_pool)
    assert pooled.num_timesteps == 512 and len(pooled.ep_info_buffer) >= 16
    for other, params in ((here, here_params), (one_game, one_game_params)):
        assert [(e["r"], e["l"]) for e in other.ep_info_buffer] == [(e["r"], e["l"]) for e in pooled.ep_info_buffer]
        assert all(torch.equal(a, b) for a, b in zip(pooled_params, params))


@needs_godot
def test_an_uneven_split_runs_a_game_per_block_with_the_same_numbers(tag):
    """7 envs beside one worker: a game of 3 agents here and one of 4 in the worker == one game of 7 in this process."""
    cfg = demo_config(tag, n_envs=7, total_timesteps=2 * 7 * 32, batch_size=56)
    workers = make_env_pool(cfg)
    assert isinstance(workers, ShmEnvPool) and workers.main_envs == 3 and workers._main_runner.n_agents == 3
    assert [len(block) for block in workers._group.blocks] == [4]
    pooled, pooled_params = train(cfg, workers)
    one_game_pool = make_env_pool(cfg.replace(num_workers=0))
    assert len(one_game_pool.runner.games) == 1
    one_game, one_game_params = train(cfg.replace(num_workers=0), one_game_pool)
    assert pooled.num_timesteps == 448 and len(pooled.ep_info_buffer) >= 14
    assert [(e["r"], e["l"]) for e in one_game.ep_info_buffer] == [(e["r"], e["l"]) for e in pooled.ep_info_buffer]
    assert all(torch.equal(a, b) for a, b in zip(pooled_params, one_game_params))


def game_pids_of(worker_pid: int) -> list[int]:
    """Godot processes whose parent is ``worker_pid``, from /proc."""
    pids = []
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except (OSError, ValueError):
            continue
        if (
            stat[stat.index("(") + 1 : stat.rindex(")")].startswith("godot")
            and int(stat.rsplit(")", 1)[1].split()[1]) == worker_pid
        ):
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
        with pytest.raises(
            WorkerDiedError,
            match=r"^worker 1 \(envs 4..7, godot_demo, "
            r"pid \d+\) died with exit code -9 \(SIGKILL\) during 'step'",
        ):
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
    cfg = demo_config(
        tag,
        env_kwargs={"game_args": {"pool_test_tag": tag}},
        seed=0,
        total_timesteps=150_000,
        n_steps=128,
        batch_size=256,
        n_epochs=10,
    )
    start = time.perf_counter()
    assert_learns_the_demo(cfg, make_env_pool(cfg))
    assert time.perf_counter() - start < 150
