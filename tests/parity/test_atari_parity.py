"""Atari, side by side with sb3: ``make_atari_env(id, n_envs, seed)`` + ``VecFrameStack(n_stack=4)`` +
``CnnPolicy`` against ppo_dict's ``--atari_wrapper True --frame_stack 4 --model cnn``, compared with
exact equality: every rollout buffer, every logged value (``rollout/ep_rew_mean`` from the
Monitor beneath the AtariWrapper: unclipped, whole games), final parameters, Adam state, RNG states.

The games are cut by ALE's frame limit (``max_num_frames_per_episode``), so a short run holds lost
lives, game overs and time-limit truncations, whose value bootstrap reads the stacked channel-last
terminal observation.
"""

import pytest

from ppo_dict.core.config import Config
from ppo_dict.run.run_plan import build_env_pool
from tests.parity.sides import Record, assert_same_record, run_both

ATARI = dict(atari_wrapper=True, frame_stack=4, model="cnn", ent_coef=0.01, learning_rate="lin_2.5e-4", clip_range="lin_0.1")
CONFIGS = {
    # FIRE on reset, 5 lives; the envs stepped in this process
    "breakout_in_process": Config(
        env="gym_BreakoutNoFrameskip-v4",
        env_kwargs=dict(max_num_frames_per_episode=600),
        n_envs=2,
        n_steps=64,
        batch_size=64,
        n_epochs=2,
        seed=0,
        total_timesteps=3 * 128,
        num_workers=0,
        **ATARI,
    ),
    # no FIRE, scores of 50 and more (clipped for training, not in ep_rew_mean); two worker processes
    # writing uint8 frames into shared memory, the main process stepping worker 0's env itself
    "asterix_worker_processes": Config(
        env="gym_AsterixNoFrameskip-v4",
        env_kwargs=dict(max_num_frames_per_episode=500),
        n_envs=2,
        n_steps=64,
        batch_size=32,
        n_epochs=2,
        seed=1,
        total_timesteps=3 * 128,
        num_workers=2,
        **ATARI,
    ),
}


def run_atari_both(cfg: Config) -> tuple[Record, Record]:
    return run_both(cfg, build_env_pool(cfg) if cfg.num_workers else None)


@pytest.mark.parametrize("name", list(CONFIGS))
def test_atari_bit_exact_with_sb3(name: str) -> None:
    sb3, ours = run_atari_both(CONFIGS[name])
    assert_same_record(sb3, ours)
    # Guard: the run must hold what makes Atari differ, or equality would prove little.
    logged = ours.dumps[-1]
    starts = sum(int(r["episode_starts"][1:].sum()) for r in ours.rollouts)  # training episode ends (lives, games, time)
    assert "rollout/ep_rew_mean" in logged, "no whole game ended"
    assert logged["rollout/ep_len_mean"] >= 4 * 100, "episode lengths are emulator frames of whole games, not lives"
    assert starts >= 2, starts
    if name.startswith("asterix"):
        assert logged["rollout/ep_rew_mean"] >= 50, "the logged return is the unclipped score"
        assert max(float(r["rewards"].max()) for r in ours.rollouts) <= 1.0 + 1.0, (
            "training rewards are clipped (plus a bootstrap)"
        )
