"""Recurrent runs (``--model mlp_lstm | cnn_lstm``) against sb3-contrib 2.9.2's ``RecurrentPPO``, exact:
every rollout buffer (the stored LSTM states included), every logged value, final parameters, Adam
state and RNG states, compared with ``==``.

Per policy kind (MlpLstmPolicy, CnnLstmPolicy, MultiInputLstmPolicy with and without images), per
action space family (Box Gaussian, Box gSDE, Discrete, MultiDiscrete, MultiBinary), per critic
(its own LSTM, the actor's shared, a plain Linear), two stacked LSTM layers, at 1, 3 and 5 envs, with
and without VecNormalize, minibatches that do not divide the rollout (a short last one), episodes cut
by time limits (the bootstrap from each env's critic state), in this process and through worker
pools (with and without the main process's share of the envs).
"""

import warnings

import numpy as np
import pytest

from ppo_dict.core.config import Config
from ppo_dict.run.run_plan import build_env_pool
from tests.parity.sides import (
    BUFFER_FIELDS,
    Record,
    assert_same_record,
    assert_same_value,
    learn_sb3,
    make_recurrent,
    run_ours,
)
from ppo_dict.data.recurrent import STATE_NAMES

TOY = dict(env="gym_PPODictToy-v0", gym_packages=("ppo_dict.envs.toy",))
#: the settings every run shares: a small LSTM, 2 epochs
BASE = dict(model="mlp_lstm", lstm_hidden_size=16, n_epochs=2, num_workers=0)
CONFIGS = {
    # Discrete: CartPole, 3 envs, 144 % 40 = 24: a short last minibatch
    "discrete_3_envs": Config(
        **BASE, env="gym_CartPole-v1", n_envs=3, n_steps=16, batch_size=40, seed=0, total_timesteps=3 * 48
    ),
    # Box Gaussian: Pendulum cut at 30 steps (time-limit bootstrap from each env's critic state), VecNormalize, 5 envs,
    # 160 % 96 = 64
    "box_timeouts_normalized_5_envs": Config(
        **BASE,
        env="gym_Pendulum-v1",
        env_kwargs=dict(max_episode_steps=30),
        n_envs=5,
        n_steps=32,
        batch_size=96,
        normalize=True,
        ent_coef=0.01,
        log_std_init=-0.5,
        seed=1,
        total_timesteps=3 * 160,
    ),
    # gSDE: new exploration matrices every 4 steps, one env (episodes cut at 50 steps), value clipping, schedules
    "gsde_1_env": Config(
        **BASE,
        env="gym_Pendulum-v1",
        env_kwargs=dict(max_episode_steps=50),
        n_envs=1,
        n_steps=64,
        batch_size=48,
        use_sde=True,
        sde_sample_freq=4,
        clip_range_vf="lin_0.3",
        learning_rate="lin_1e-3",
        clip_range="lin_0.2",
        seed=2,
        total_timesteps=4 * 64,
    ),
    "multi_discrete_3_envs": Config(
        **BASE,
        **TOY,
        env_kwargs=dict(observation="box", action="multi_discrete", episode_length=5),
        n_envs=3,
        n_steps=16,
        batch_size=20,
        seed=3,
        total_timesteps=3 * 48,
    ),
    # MultiInputLstmPolicy over two vectors, normalised, separate features extractors, 5 envs (RecurrentPPO 2.9.2 cannot build
    # an LSTM over a MultiDiscrete observation: torch 2.13's nn.LSTM refuses its numpy-int input size)
    "dict_5_envs": Config(
        **BASE,
        env="gym_PPODictMaskedJump-v0",
        gym_packages=("ppo_dict.envs.masked",),
        env_kwargs=dict(observation="dict"),
        n_envs=5,
        n_steps=12,
        batch_size=25,
        normalize=True,
        share_features_extractor=False,
        seed=5,
        total_timesteps=3 * 60,
    ),
    # the critic reads the actor's LSTM (detached); target_kl stops epochs early
    "shared_lstm": Config(
        **{**BASE, "n_epochs": 6},
        env="gym_CartPole-v1",
        n_envs=3,
        n_steps=32,
        batch_size=32,
        shared_lstm=True,
        enable_critic_lstm=False,
        learning_rate=0.02,
        target_kl=0.002,
        seed=6,
        total_timesteps=3 * 96,
    ),
    # no LSTM for the critic: its Linear(features, hidden); a Discrete observation (one-hot), Box actions
    "plain_critic": Config(
        **BASE,
        **TOY,
        env_kwargs=dict(observation="discrete", action="box", episode_length=5),
        n_envs=3,
        n_steps=16,
        batch_size=20,
        enable_critic_lstm=False,
        seed=7,
        total_timesteps=3 * 48,
    ),
    # two stacked LSTM layers, no advantage normalisation; 200-step episodes: the updates after the first see no episode
    # start, and sb3-contrib's LSTMs take their one-call branch (the first update's minibatches hold the start of learn)
    "two_layers": Config(
        **BASE,
        env="gym_Pendulum-v1",
        n_envs=1,
        n_steps=32,
        batch_size=24,
        n_lstm_layers=2,
        normalize_advantage=False,
        seed=8,
        total_timesteps=3 * 32,
    ),
    # CnnLstmPolicy: NatureCNN -> LSTM, episodes cut at 5 steps
    "cnn_3_envs": Config(
        **{**BASE, "model": "cnn_lstm"},
        env="test_dummy",
        env_kwargs=dict(image_size=36, channels=1, episode_length=5),
        n_envs=3,
        n_steps=8,
        batch_size=10,
        seed=9,
        total_timesteps=2 * 24,
    ),
    # CnnLstmPolicy on channel-last images (sb3's VecTransposeImage), Box actions
    "cnn_channel_last": Config(
        **{**BASE, "model": "cnn_lstm"},
        env="test_dummy",
        env_kwargs=dict(image_size=36, continuous=True, channel_last=True, episode_length=5),
        n_envs=1,
        n_steps=12,
        batch_size=7,
        seed=10,
        total_timesteps=2 * 12,
    ),
    # MultiInputLstmPolicy with an image beside a normalised vector
    "dict_image_normalized": Config(
        **{**BASE, "model": "cnn_lstm"},
        env="test_dummy",
        env_kwargs=dict(image_size=36, channels=1, state_dim=5, episode_length=5),
        normalize=True,
        n_envs=3,
        n_steps=8,
        batch_size=10,
        seed=11,
        total_timesteps=2 * 24,
    ),
}
#: MultiBinary both ways, rewards normalised (integer observations are not): a rollout, as RecurrentPPO cannot train it
MULTI_BINARY = Config(
    **BASE,
    **TOY,
    env_kwargs=dict(observation="multi_binary", action="multi_binary", episode_length=4),
    n_envs=3,
    n_steps=16,
    batch_size=24,
    normalize=True,
    seed=4,
    total_timesteps=3 * 48,
)
#: worker layouts: (num_workers, envs_per_worker, main_steps_envs)
POOLS = {
    "discrete_3_envs": (3, 1, True),  # two workers and the main process's share
    "box_timeouts_normalized_5_envs": (1, 5, False),  # one worker steps every env
    "dict_5_envs": (5, 1, True),
    "multi_discrete_3_envs": (3, 1, False),
    "cnn_3_envs": (1, 3, True),
    "gsde_1_env": (1, 1, False),  # gSDE's exploration matrices, the env in a worker
    "shared_lstm": (3, 1, True),  # target_kl's early stop, the main process's share
    "cnn_channel_last": (1, 1, True),  # channel-last images, stepped by the main process
}


def run_both(cfg: Config, pool_layout=None) -> tuple[Record, Record]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sb3 = learn_sb3(make_recurrent(cfg), cfg.total_timesteps)
        if pool_layout is None:
            return sb3, run_ours(cfg)
        workers, per_worker, main_steps = pool_layout
        cfg = cfg.replace(
            num_workers=workers, envs_per_worker=per_worker, main_steps_envs=main_steps, main_envs=1 if main_steps else None
        )
        return sb3, run_ours(cfg, build_env_pool(cfg))


@pytest.mark.parametrize("name", list(CONFIGS))
def test_in_process_bit_exact(name: str) -> None:
    sb3, ours = run_both(CONFIGS[name])
    assert_same_record(sb3, ours)


@pytest.mark.parametrize("name", list(POOLS))
def test_worker_pool_bit_exact(name: str) -> None:
    """The envs in worker processes (and in the main process's share): the states stay in the learner's storage."""
    sb3, ours = run_both(CONFIGS[name], POOLS[name])
    assert_same_record(sb3, ours)


@pytest.mark.parametrize("pool_layout", [None, (3, 1, True)], ids=["in_process", "pool_with_main_share"])
def test_multi_binary_actions_first_rollout_bit_exact(pool_layout) -> None:
    """MultiBinary actions: RecurrentPPO 2.9.2 collects its rollout, then cannot train (its sequence buffer
    hands the int8 actions to ``Bernoulli.log_prob``, which refuses them; sb3's PPO casts them to float32, as
    ppo_dict does). The initial parameters and the first rollout, stored states included, equal ppo_dict's."""
    cfg = MULTI_BINARY
    sb3 = Record()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = make_recurrent(cfg)
        initial = {k: v.clone() for k, v in model.policy.state_dict().items()}
        with pytest.raises(RuntimeError, match="can't be cast"):
            learn_sb3_into(model, sb3, cfg.total_timesteps)
        ours_cfg = cfg.replace(total_timesteps=cfg.rollout_size)
        pool = None
        if pool_layout is not None:
            workers, per_worker, main_steps = pool_layout
            ours_cfg = ours_cfg.replace(
                num_workers=workers, envs_per_worker=per_worker, main_steps_envs=main_steps, main_envs=1
            )
            pool = build_env_pool(ours_cfg)
        ours = run_ours(ours_cfg, pool, prepare=lambda m: assert_same_value(initial, m.policy.state_dict(), "init"))
    assert len(sb3.rollouts) == 1 and sb3.rollouts[0]["actions"].dtype == np.int8
    for name in (*BUFFER_FIELDS, *STATE_NAMES):
        assert_same_value(sb3.rollouts[0][name], ours.rollouts[0][name], f"rollout 0 {name}")
    assert len(ours.dumps) == 1 and np.isfinite(ours.last_logs["train/loss"])


def learn_sb3_into(model, record: Record, total_timesteps: int) -> None:
    from tests.parity.sides import _RolloutCapture

    model.learn(total_timesteps, callback=_RolloutCapture(record.rollouts))


def test_the_runs_exercise_what_they_claim() -> None:
    """Guards: the stored states are not zeros and change at episode starts; the time-limit bootstrap
    runs (episodes cut after step 0); the update takes both of sb3-contrib's LSTM branches; target_kl stops early."""
    from ppo_dict.algo.training import recurrent_update

    branches = []
    take = recurrent_update.SequenceRollout.take

    def recording_take(self, batch_inds):
        batch = take(self, batch_inds)
        branches.append(batch.resets)
        return batch

    recurrent_update.SequenceRollout.take = recording_take
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            box = run_ours(CONFIGS["box_timeouts_normalized_5_envs"])
            run_ours(CONFIGS["two_layers"])
            shared = run_ours(CONFIGS["shared_lstm"])
    finally:
        recurrent_update.SequenceRollout.take = take
    assert True in branches and False in branches
    states = np.concatenate([r["hidden_states_pi"] for r in box.rollouts])
    assert np.abs(states).max() > 0.05
    assert any(r["episode_starts"][1:].any() for r in box.rollouts)  # truncations at step 30, bootstrapped
    assert shared.last_logs["train/n_updates"] < 3 * CONFIGS["shared_lstm"].n_epochs
