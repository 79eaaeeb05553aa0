"""sb3's numbers at odd env counts, for every space, in-process and through worker pools.

A storage row of an odd number of envs is where a misaligned view used to reach the policy's
first matmul (tests/parity/test_alignment.py checks the layout itself); these runs compare whole
trainings with sb3 at 1, 3, 5 and 7 envs, with minibatches that do not divide the rollout and
episodes cut by time limits (the bootstrap), exactly (``==``).
"""

import functools
from typing import Optional

import pytest

from ppo_dict.algo.rollout import shard_probe
from ppo_dict.algo.rollout.shard import GRANULES
from ppo_dict.core.config import Config
from ppo_dict.run.run_plan import build_env_pool
from tests.parity.sides import assert_same_record, policy_step_of, run_both

TOY = dict(env="gym_PPODictToy-v0", gym_packages=("ppo_dict.envs.toy",))
#: name: the env and policy settings of one space. Toy episodes are cut at 3 steps, images at 5: the
#: time-limit bootstrap runs. Box observations are 6 float32 per env, as Acrobot's: a row of 3 envs is
#: 72 bytes, which without padding starts 8 bytes off a 16-byte boundary at every other step.
SPACES = {
    "box": dict(**TOY, env_kwargs=dict(observation="box", action="box", episode_length=3)),
    "discrete": dict(**TOY, env_kwargs=dict(observation="box", action="discrete", episode_length=3)),
    "multi_discrete": dict(**TOY, env_kwargs=dict(observation="multi_discrete", action="multi_discrete", episode_length=3)),
    "multi_binary": dict(**TOY, env_kwargs=dict(observation="multi_binary", action="multi_binary", episode_length=3)),
    "gsde": dict(**TOY, env_kwargs=dict(observation="box", action="box", episode_length=3), use_sde=True, sde_sample_freq=3),
    "dict_normalized": dict(
        **TOY, env_kwargs=dict(observation="dict", action="multi_discrete", episode_length=3), normalize=True
    ),
    "image": dict(env="test_dummy", model="cnn", env_kwargs=dict(image_size=36, channels=1, episode_length=5)),
    "image_channel_last": dict(
        env="test_dummy", model="cnn", env_kwargs=dict(image_size=36, continuous=True, channel_last=True, episode_length=5)
    ),
    # an image beside 5 float32 (rows of 20 bytes per env), MultiInputPolicy, the vector normalised
    "dict_image_and_vector": dict(
        env="test_dummy",
        model="cnn",
        env_kwargs=dict(image_size=36, channels=1, state_dim=5, episode_length=5),
        normalize=True,
    ),
}
N_STEPS = 8


def config(space: str, n_envs: int, **overrides) -> Config:
    """Two rollouts of ``N_STEPS`` x ``n_envs``, minibatches of ``4 n + 1`` (never a divisor of ``8 n``)."""
    settings = dict(
        SPACES[space],
        n_envs=n_envs,
        n_steps=N_STEPS,
        batch_size=4 * n_envs + 1,
        n_epochs=2,
        seed=n_envs,
        total_timesteps=2 * N_STEPS * n_envs,
        num_workers=0,
        device="cpu",
    )
    return Config(**{**settings, **overrides})


def assert_parity(cfg: Config, pool=None, sharded: Optional[bool] = None) -> None:
    """sb3's numbers; ``sharded``: through the policy step where the envs are (True) or the central one (False)."""
    prepare = None if sharded is None else functools.partial(policy_step_of, sharded=sharded)
    assert_same_record(*run_both(cfg, pool, prepare))


@pytest.mark.parametrize("n_envs", [1, 3, 5, 7])
@pytest.mark.parametrize("space", list(SPACES))
def test_odd_env_counts_in_process(space: str, n_envs: int) -> None:
    assert_parity(config(space, n_envs))


@pytest.mark.parametrize("main_envs", [None, 0])
@pytest.mark.parametrize("space,n_envs", [("box", 3), ("dict_normalized", 5), ("multi_binary", 7)])
def test_odd_env_counts_through_a_worker_pool(space: str, n_envs: int, main_envs) -> None:
    """The workers write the rows into shared memory; by default the main process steps a worker's
    share of the envs itself (beside one worker), with ``main_envs=0`` none (two workers); each process samples its own
    envs' actions (the policy where the envs are, ppo_dict.algo.rollout.shard)."""
    cfg = config(space, n_envs, num_workers=3 if main_envs == 0 else 2, main_envs=main_envs)
    assert_parity(cfg, pool=build_env_pool(cfg), sharded=True)


@pytest.mark.parametrize(
    "space,n_envs,num_workers",
    [
        ("discrete", 5, 3),
        ("multi_discrete", 6, 2),
        ("gsde", 5, 3),
        ("image_channel_last", 5, 2),
        ("dict_image_and_vector", 4, 2),
    ],
)
def test_every_kind_of_space_through_the_policy_where_the_envs_are(space: str, n_envs: int, num_workers: int) -> None:
    """The main process draws each step's random numbers in sb3's order (gSDE: its exploration matrices) and hands
    them out by rows; each process samples its envs' actions from a window of the batch, keeps their books (the
    normalised rows, the time-limit bootstrap) and steps them: sb3's numbers, bit for bit."""
    cfg = config(space, n_envs, num_workers=num_workers)
    assert_parity(cfg, pool=build_env_pool(cfg), sharded=True)


def test_a_failing_probe_keeps_the_central_step_and_sb3s_numbers(monkeypatch) -> None:
    """Where the start probe finds a row of any process's window unlike the whole batch's, the main process
    samples every env's actions (the start line says why), with sb3's numbers."""
    monkeypatch.setattr(shard_probe, "same_bits", lambda a, b: False)
    cfg = config("dict_normalized", 5, num_workers=2)
    lines = []

    def central(model) -> None:
        policy_step_of(model, sharded=False)
        lines.append(model.collector.policy_line)

    assert_same_record(*run_both(cfg, build_env_pool(cfg), central))
    assert lines == [
        f"policy step: in the main process for every env (start probe: windows of {GRANULES[-1]} rows gave other "
        "actions, values, log-probs, env actions than the whole batch)"
    ]


def test_acrobot_three_envs_as_a_new_user_ran_it() -> None:
    """The settings that showed the misaligned rows on an AVX-512 host (values 1e-7 off in the first rollout)."""
    cfg = Config(
        env="gym_Acrobot-v1",
        n_envs=3,
        n_steps=64,
        batch_size=40,
        n_epochs=3,
        ent_coef=0.01,
        learning_rate="lin_1e-3",
        clip_range=0.25,
        gae_lambda=0.9,
        gamma=0.97,
        seed=7,
        total_timesteps=960,
        num_workers=0,
        device="cpu",
    )
    assert_parity(cfg)


@pytest.mark.parametrize(
    "space,n_envs,num_workers,shares",
    [
        ("box", 7, 3, (2, [3, 2])),  # 2 worker processes of 3 and 2 envs, 2 in this process
        ("dict_normalized", 5, 2, (2, [3])),
        ("multi_discrete", 9, None, (1, [3, 3, 2])),  # the default on 4 usable CPUs: 3 workers of 3/2, 1 env here
    ],
)
def test_uneven_splits_keep_sb3s_numbers(monkeypatch, space: str, n_envs: int, num_workers, shares) -> None:
    """n_envs that do not divide over the processes: env i is env i (its seed, its storage column) whichever
    process steps it, so the run is sb3's bit for bit."""
    from tests.test_layout import fake_cpus

    fake_cpus(monkeypatch, 4)
    cfg = config(space, n_envs, num_workers=num_workers)
    pool = build_env_pool(cfg)
    assert (pool.main_envs, [len(block) for block in pool.layout.blocks]) == shares
    assert_parity(cfg, pool=pool, sharded=True)
