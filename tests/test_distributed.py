"""One PPO over two ranks (gloo, this host) against the single process on the same global batch.

The update (``ppo_dict.algo.ranks.ranked_update``): a fixed global buffer loaded into both ranks' storage
(each rank its envs' columns) gives, after one update, the single process's parameters, Adam moments and
``train/*`` logs within ``rtol 1e-5 + atol 1e-7``, with and without an early ``target_kl`` stop, with a
truncated last minibatch, with an uneven env split, and with minibatches where a rank has no rows. The
normaliser (``ppo_dict.algo.ranks.RankNormalizer``): its statistics from the gathered batch are the single
process's, ``==``. Both ranks run in one ``torch.multiprocessing`` spawn (a few seconds).
"""

from __future__ import annotations

import os
import socket
from typing import Any

import numpy as np
import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from gymnasium import spaces

from ppo_dict.algo.ranks import RankNormalizer, Ranks, rank_rows, ranked_update
from ppo_dict.algo.rollout.normalize import Normalizer
from ppo_dict.algo.networks.policy import ActorCritic
from ppo_dict.algo.ppo import PPO
from ppo_dict.algo.training.update import UpdateSettings, ppo_update
from ppo_dict.core.config import Config
from ppo_dict.core.layout import plan_layout
from ppo_dict.core.logger import Logger
from ppo_dict.core.ranks import RankInfo, cpu_share, env_range, env_ranges
from ppo_dict.data.storage import RolloutStorage
from ppo_dict.vec import make_env_pool

OBS = spaces.Box(-1, 1, (5,), np.float32)
#: name -> (action space, n_envs, n_steps, settings): each a rule of the update
CASES = {
    # 3 envs x 7 steps = 21 rows in minibatches of 8: a truncated last minibatch; envs split 2 + 1
    "box_truncated_vf_clip": (
        spaces.Box(-1, 1, (2,), np.float32),
        3,
        7,
        dict(batch_size=8, n_epochs=3, clip_range_vf=0.1, target_kl=None, ent_coef=0.01),
    ),
    # a target_kl that stops the update in its last epoch, after 12 of 16 steps (the stopping minibatch not applied)
    "discrete_target_kl": (
        spaces.Discrete(3),
        4,
        6,
        dict(batch_size=6, n_epochs=4, clip_range_vf=None, target_kl=1e-4, ent_coef=0.0),
    ),
    # minibatches of 2: many of them fall on one rank alone (the other joins with no rows)
    "multidiscrete_tiny_batches": (
        spaces.MultiDiscrete([3, 2]),
        2,
        5,
        dict(batch_size=2, n_epochs=2, clip_range_vf=None, target_kl=None, ent_coef=0.0),
    ),
}


def settings_of(case: dict[str, Any]) -> UpdateSettings:
    return UpdateSettings(
        learning_rate=case.get("learning_rate", 3e-4),
        clip_range=0.2,
        clip_range_vf=case["clip_range_vf"],
        n_epochs=case["n_epochs"],
        batch_size=case["batch_size"],
        normalize_advantage=True,
        ent_coef=case["ent_coef"],
        vf_coef=0.5,
        max_grad_norm=0.5,
        target_kl=case["target_kl"],
    )


def global_buffer(policy: ActorCritic, n_envs: int, n_steps: int, columns: range) -> RolloutStorage:
    """The fixed global buffer's columns ``columns`` (every rank makes the whole buffer alike, keeps its columns):
    random observations, actions and advantages, the policy's own log-probabilities (approx_kl starts at 0)."""
    action_space = policy.action_space
    full = RolloutStorage(OBS, action_space, n_steps=n_steps, n_envs=n_envs)
    rng = np.random.default_rng(7)
    full.env_obs["obs"][...] = rng.normal(size=full.env_obs["obs"].shape)
    sampled = np.stack([[action_space.sample() for _ in range(n_envs)] for _ in range(n_steps)])
    full.actions[...] = sampled.reshape(full.actions.shape)
    for arr in (full.values, full.advantages, full.returns):
        arr[...] = rng.normal(size=arr.shape)
    with torch.no_grad():
        data = full.flat_samples()
        actions = policy.action_spec.to_training(torch.as_tensor(data["actions"].astype(np.float32)))
        log_probs = policy.evaluate_actions(torch.as_tensor(data["observations"]), actions)[1]
    full.log_probs[...] = log_probs.numpy().reshape(n_envs, n_steps).T
    if len(columns) == n_envs:
        return full
    part = RolloutStorage(OBS, action_space, n_steps=n_steps, n_envs=len(columns))
    part.env_obs["obs"][...] = full.env_obs["obs"][:, columns.start : columns.stop]
    for name in ("actions", "values", "log_probs", "advantages", "returns"):
        getattr(part, name)[...] = getattr(full, name)[:, columns.start : columns.stop]
    return part


def one_update(name: str, ranks: Ranks | None) -> dict[str, Any]:
    """The case's update from the same start (policy, Adam, numpy RNG), single process or this rank's share."""
    action_space, n_envs, n_steps, case = CASES[name]
    action_space.seed(3)
    columns = range(n_envs) if ranks is None else env_range(n_envs, ranks.rank, ranks.world)
    torch.manual_seed(0)
    policy = ActorCritic(OBS, action_space)
    storage = global_buffer(policy, n_envs, n_steps, columns)
    optimizer = torch.optim.Adam(policy.parameters(), lr=3e-4, eps=1e-5)
    np.random.seed(11)
    cpu, settings = torch.device("cpu"), settings_of(case)
    if ranks is None:
        logs, n_updates = ppo_update(policy, optimizer, storage, settings, 0, cpu)
    else:
        logs, n_updates = ranked_update(policy, optimizer, storage, settings, 0, cpu, ranks)
    state = optimizer.state_dict()["state"]
    return {
        "params": {k: v.detach().clone() for k, v in policy.state_dict().items()},
        "adam": {i: {k: v.clone() for k, v in s.items()} for i, s in state.items()},
        "logs": logs,
        "n_updates": n_updates,
    }


def normalizer_steps(ranks: Ranks | None) -> dict[str, Any]:
    """Five steps of a normaliser over 3 envs (a done env among them), the whole batch or this rank's rows."""
    n_envs, rng = 3, np.random.default_rng(5)
    rows = range(n_envs) if ranks is None else ranks.envs
    norm = Normalizer({"obs": (4,)}, n_envs, gamma=0.9)
    if ranks is not None:
        norm = RankNormalizer(norm, ranks)
    outputs = [norm.reset({"obs": rng.normal(size=(n_envs, 4)).astype(np.float32)[rows.start : rows.stop]})["obs"]]
    for t in range(5):
        obs = rng.normal(size=(n_envs, 4)).astype(np.float32)
        rewards = rng.normal(size=n_envs).astype(np.float32)
        dones = np.array([t == 2, False, t == 3])
        mine, done = obs[rows.start : rows.stop], dones[rows.start : rows.stop]
        out, normalized_rewards, _ = norm.step({"obs": mine}, rewards[rows.start : rows.stop], done, {"obs": mine[done] + 1})
        outputs.append((out["obs"], normalized_rewards))
    return {"state": norm.state_dict(), "outputs": outputs}


#: name -> (env, n_envs, config keywords): the first rollout of a run over ranks, against the single process's
ROLLOUTS = {
    "cartpole": ("gym_CartPole-v1", 5, {}),
    "pendulum_normalized": ("gym_Pendulum-v1", 4, dict(normalize=True)),
    "masked_multidiscrete": (
        "gym_PPODictMaskedJump-v0",
        3,
        dict(gym_packages=("ppo_dict.envs.masked",), action_masks=True, env_kwargs=dict(action="multi_discrete")),
    ),
    # a worker process beside each rank's main process: the policy where the envs are (its draws handed out by rows)
    "pendulum_workers": ("gym_Pendulum-v1", 4, dict(num_workers=2, normalize=True)),
}
#: the learner's arrays of a rollout: ``[T(+1), n_envs, ...]`` each, env columns on axis 1
BUFFERS = ("actions", "values", "log_probs", "rewards", "episode_starts", "advantages", "returns")


def first_rollout(name: str, ranks: Ranks | None) -> dict[str, Any]:
    """The case's first rollout (rank: its envs in this process), GAE included, and the counters and episodes after it."""
    env, n_envs, keywords = ROLLOUTS[name]
    cfg = Config(env=env, n_envs=n_envs, n_steps=16, batch_size=16, seed=5, **{"num_workers": 0, **keywords})
    envs = range(n_envs) if ranks is None else ranks.envs
    pool = make_env_pool(cfg, None, plan_layout(len(envs), cfg.num_workers, None))
    with PPO(cfg, pool, Logger(verbose=0), ranks=ranks) as ppo:
        ppo.start_envs()
        ppo.collect_rollout()
        ppo.compute_advantages()
        s = ppo.storage
        arrays = {name: getattr(s, name).copy() for name in BUFFERS}
        arrays.update({f"obs/{key}": arr.copy() for key, arr in s.obs.items()})
        if s.action_masks is not None:
            arrays["action_masks"] = s.action_masks.copy()
        return {
            "arrays": arrays,
            "num_timesteps": ppo.num_timesteps,
            "episodes": list(ppo.episodes.info_buffer),
            "rng": torch.get_rng_state(),
            "policy_line": ppo.collector.policy_line,
        }


def _rank_main(rank: int, world: int, port: int, out_dir: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        results = {}
        for name, (_, n_envs, _, _) in CASES.items():
            results[name] = one_update(name, Ranks(RankInfo(rank, world, rank, world, "localhost"), n_envs))
        results["normalizer"] = normalizer_steps(Ranks(RankInfo(rank, world, rank, world, "localhost"), 3))
        for name, (_, n_envs, _) in ROLLOUTS.items():
            results[name] = first_rollout(name, Ranks(RankInfo(rank, world, rank, world, "localhost"), n_envs))
        torch.save(results, os.path.join(out_dir, f"rank{rank}.pt"))
    finally:
        dist.destroy_process_group()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory) -> list[dict[str, Any]]:
    out = tmp_path_factory.mktemp("ranks")
    mp.start_processes(_rank_main, args=(2, free_port(), str(out)), nprocs=2, join=True, start_method="spawn")
    return [torch.load(out / f"rank{r}.pt", weights_only=False) for r in range(2)]


def close(a: Any, b: Any) -> bool:
    return bool(
        torch.allclose(torch.as_tensor(a, dtype=torch.float64), torch.as_tensor(b, dtype=torch.float64), rtol=1e-5, atol=1e-7)
    )


@pytest.mark.parametrize("name", list(CASES))
def test_update_equals_the_single_process(two_ranks, name) -> None:
    single = one_update(name, None)
    for rank in two_ranks:
        got = rank[name]
        assert got["n_updates"] == single["n_updates"]
        assert got["params"].keys() == single["params"].keys()
        for key, value in single["params"].items():
            assert close(got["params"][key], value), key
        for index, moments in single["adam"].items():
            for key, value in moments.items():
                assert close(got["adam"][index][key], value), (index, key)
        assert list(got["logs"]) == list(single["logs"])
        for key, value in single["logs"].items():
            assert close(got["logs"][key], value), (key, got["logs"][key], value)
    # both ranks hold the same parameters bit for bit (the same reduced gradient, clip and Adam on each)
    assert all(torch.equal(two_ranks[0][name]["params"][k], two_ranks[1][name]["params"][k]) for k in single["params"])
    if name == "discrete_target_kl":
        assert single["n_updates"] == 4 and int(single["adam"][0]["step"]) == 12  # stopped early: the case tests the stop


def test_normalizer_statistics_are_the_single_process_bits(two_ranks) -> None:
    single = normalizer_steps(None)
    for rank, ranges in zip(two_ranks, env_ranges(3, 2)):
        state = rank["normalizer"]["state"]
        assert np.array_equal(state["obs_rms"]["obs"]["mean"], single["state"]["obs_rms"]["obs"]["mean"])
        assert np.array_equal(state["obs_rms"]["obs"]["var"], single["state"]["obs_rms"]["obs"]["var"])
        assert state["ret_rms"] == single["state"]["ret_rms"] or np.array_equal(
            state["ret_rms"]["var"], single["state"]["ret_rms"]["var"]
        )
        assert np.array_equal(state["returns"], single["state"]["returns"])
        assert np.array_equal(rank["normalizer"]["outputs"][0], single["outputs"][0][ranges.start : ranges.stop])
        for (obs, rewards), (whole_obs, whole_rewards) in zip(rank["normalizer"]["outputs"][1:], single["outputs"][1:]):
            assert np.array_equal(obs, whole_obs[ranges.start : ranges.stop])
            assert np.array_equal(rewards, whole_rewards[ranges.start : ranges.stop])


#: the arrays a policy row decides only through its sample (bits here), and those its value or log-prob row sets
SAMPLED, FORWARD = ("actions", "rewards", "episode_starts"), ("values", "log_probs", "advantages", "returns")


@pytest.mark.parametrize("name", list(ROLLOUTS))
def test_the_first_rollout_is_the_single_process_columns(two_ranks, name) -> None:
    """Every rank's buffers are the single process's columns of its envs: the actions (from the global draws), the
    observations (normalised with the statistics of the gathered batch), rewards and episode starts ``==``, the
    episodes merged in sb3's order, the counters global, the RNG streams alike. The values and log-probs (and the
    advantages and returns GAE makes of them) come from a forward over the rank's rows: where a matrix product
    rounds a row by its batch (on this CPU the critic's last layer, for 3 or 2 rows against 5 or 4) they differ
    from the single process's by float32 rounding, so they are compared within ``rtol 1e-5 + atol 1e-6``."""
    single = first_rollout(name, None)
    n_envs = ROLLOUTS[name][1]
    for rank, envs in zip(two_ranks, env_ranges(n_envs, 2)):
        got = rank[name]
        assert set(got["arrays"]) == set(single["arrays"]) and set(SAMPLED + FORWARD) < set(single["arrays"])
        for key in set(single["arrays"]) - set(FORWARD):  # the sampled arrays, the observations and the masks
            assert np.array_equal(got["arrays"][key], single["arrays"][key][:, envs.start : envs.stop]), key
        for key in FORWARD:
            assert np.allclose(got["arrays"][key], single["arrays"][key][:, envs.start : envs.stop], rtol=1e-5, atol=1e-6), key
        assert got["num_timesteps"] == single["num_timesteps"] == 16 * n_envs
        # Pendulum: 200 steps
        assert got["episodes"] == single["episodes"] and (len(single["episodes"]) > 0 or name != "cartpole")
        assert torch.equal(got["rng"], single["rng"])
        if name == "pendulum_workers":  # each rank's policy step where its envs are, unless this CPU's start probe refused it
            assert "in each process for the envs it steps" in got["policy_line"] or "start probe" in got["policy_line"], got[
                "policy_line"
            ]


def test_env_ranges_split_unevenly_in_order() -> None:
    assert env_ranges(10, 4) == [range(0, 3), range(3, 6), range(6, 8), range(8, 10)]
    assert env_ranges(1, 2) == [range(0, 1), range(1, 1)]
    assert cpu_share(range(8), 8, 1, 3) == [3, 4, 5] and cpu_share(range(8), 4, 1, 2) == [2, 3]
    assert cpu_share([0, 1], 2, 1, 4) == [1]  # fewer CPUs than ranks: shared
    assert rank_rows(torch.tensor([9, 2, 14, 7, 10]), 7, 7).tolist() == [2, 0, 3]  # 14 is the next rank's


def test_rank_info_reads_torchruns_environment() -> None:
    assert RankInfo.from_env({}) is None and RankInfo.from_env({"WORLD_SIZE": "1", "RANK": "0"}) is None
    info = RankInfo.from_env({"WORLD_SIZE": "4", "RANK": "3", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2"})
    assert (info.rank, info.world, info.local_rank, info.local_world) == (3, 4, 1, 2)
    with pytest.raises(ValueError, match="RANK is not set"):
        RankInfo.from_env({"WORLD_SIZE": "2"})
    with pytest.raises(
        ValueError,
        match=r"RANK='abc' is not a whole number; LOCAL_WORLD_SIZE=0 is not in \[1, 2\]; "
        r"MASTER_ADDR is not set$",
    ):
        RankInfo.from_env({"WORLD_SIZE": "2", "RANK": "abc", "LOCAL_WORLD_SIZE": "0", "MASTER_PORT": "29500"}, store=True)


def test_what_torchrun_refuses_is_said_per_setting() -> None:
    from ppo_dict.run.ranks import rank_problems

    info = RankInfo(1, 2, 1, 2, "localhost")
    assert rank_problems(Config(env="gym_CartPole-v1", n_envs=4, n_steps=8, batch_size=8), info) == []
    assert rank_problems(Config(env="gym_CartPole-v1", n_envs=1, n_steps=8, batch_size=8), info) == [
        "n_envs=1: fewer envs than the 2 ranks torchrun started; each rank steps at least one"
    ]
    lstm = rank_problems(Config(env="gym_CartPole-v1", n_envs=4, n_steps=8, batch_size=8, model="mlp_lstm"), info)
    assert lstm == ["model='mlp_lstm' (RecurrentPPO): not supported under torchrun (one rank, or a plain run, trains it)"]
    layout = rank_problems(Config(env="gym_CartPole-v1", n_envs=4, num_workers=3, n_steps=8, batch_size=8), info)
    assert len(layout) == 1 and layout[0].startswith("num_workers=3: more than the 2 envs") and "count per rank" in layout[0]


def test_sb3s_python_api_in_a_torchrun_script_is_refused_with_one_message(monkeypatch) -> None:
    import ppo_dict
    from ppo_dict.core.errors import ConfigError

    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "0")
    with pytest.raises(ConfigError, match=r"torchrun started this script \(2 ranks\): sb3's Python API trains in one process"):
        ppo_dict.PPO("MlpPolicy", "CartPole-v1", n_steps=8, batch_size=8)


def test_a_restarted_group_sees_only_its_own_attempts_keys_in_the_store_that_outlived_the_last() -> None:
    """torchrun's store outlives a ``--max-restarts`` restart: each attempt's keys (gloo's addresses, the faults and
    the roll call) live under its restart count, so a restarted rank never reads the lost group's (a dead rank's
    address: "Connection refused")."""
    from datetime import timedelta

    from ppo_dict.run import rendezvous

    port = free_port()
    agent = dist.TCPStore("127.0.0.1", port, 1, is_master=True, wait_for_workers=False, timeout=timedelta(seconds=5))
    env = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "TORCHELASTIC_USE_AGENT_STORE": "True"}
    info = RankInfo(0, 1, 0, 1, "localhost")
    first = rendezvous.store(info, {**env, "TORCHELASTIC_RESTART_COUNT": "0"})
    first.set("default_pg/rank_0", "the lost group's address")
    again = rendezvous.store(info, {**env, "TORCHELASTIC_RESTART_COUNT": "1"})
    assert not again.check(["default_pg/rank_0"]) and first.check(["default_pg/rank_0"])
    again.set("default_pg/rank_0", "this group's")
    assert first.get("default_pg/rank_0") == b"the lost group's address"
    assert agent.get(f"{rendezvous.ATTEMPT}1/default_pg/rank_0") == b"this group's"


def test_a_rank_s_normaliser_holds_the_run_s_own_and_copies_none_of_it() -> None:
    """RankNormalizer is composed: the statistics, the settings a script assigns and the global returns are its base's,
    read from it and written to it (the numbers: test_normalizer_statistics_are_the_single_process_bits)."""
    base = Normalizer({"obs": (4,)}, 2, gamma=0.9)
    ranks = type("StubRanks", (), {"n_envs": 6})()
    norm = RankNormalizer(base, ranks)
    assert sorted(vars(norm)) == ["base", "observed", "ranks"]
    assert norm.obs_rms is base.obs_rms and norm.returns is base.returns and base.returns.shape == (6,)
    norm.norm_reward, norm.clip_obs = False, 0.5
    assert (base.norm_reward, base.clip_obs) == (False, 0.5) and "norm_reward" not in vars(norm)
    assert norm.normalize_reward(np.array([2.0])) == np.float32(2.0)
