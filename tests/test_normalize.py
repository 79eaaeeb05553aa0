"""The normaliser against sb3's VecNormalize itself, step by step on a real env: statistics, observations,
rewards and terminal observations, bit for bit (docs/sb3_parity.md test 17)."""

import numpy as np
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.vec_env import VecEnvWrapper, VecNormalize

from ppo_dict.algo.rollout.normalize import Normalizer, RunningMeanStd


class RawTerminalObs(VecEnvWrapper):
    """Keeps the raw terminal observations before VecNormalize normalises them in the infos."""

    def reset(self):
        return self.venv.reset()

    def step_wait(self):
        obs, rewards, dones, infos = self.venv.step_wait()
        self.raw_terminal = [info["terminal_observation"].copy() for info, done in zip(infos, dones) if done]
        return obs, rewards, dones, infos


def test_step_by_step_equal_to_sb3_vec_normalize() -> None:
    n_envs = 3
    inner = RawTerminalObs(make_vec_env("Pendulum-v1", n_envs=n_envs, seed=0, env_kwargs={"max_episode_steps": 7}))
    sb3 = VecNormalize(inner, gamma=0.95, clip_obs=5.0, clip_reward=3.0)
    ours = Normalizer({"obs": (3,)}, n_envs, gamma=0.95, clip_obs=5.0, clip_reward=3.0)
    obs = sb3.reset()
    assert np.array_equal(ours.reset({"obs": sb3.get_original_obs()})["obs"], obs)
    rng, ended = np.random.default_rng(1), 0
    for _ in range(30):
        obs, rewards, dones, infos = sb3.step(rng.uniform(-2, 2, (n_envs, 1)).astype(np.float32))
        terminal = {"obs": np.array(inner.raw_terminal).reshape(-1, 3)}
        our_obs, our_rewards, our_terminal = ours.step(
            {"obs": sb3.get_original_obs()}, sb3.get_original_reward(), dones, terminal
        )
        assert np.array_equal(our_obs["obs"], obs) and our_obs["obs"].dtype == obs.dtype
        assert np.array_equal(our_rewards, rewards) and our_rewards.dtype == np.float32
        sb3_terminal = [info["terminal_observation"] for info, done in zip(infos, dones) if done]
        assert np.array_equal(our_terminal.get("obs", np.zeros((0, 3))), np.array(sb3_terminal).reshape(-1, 3))
        for mine, theirs in ((ours.obs_rms["obs"], sb3.obs_rms), (ours.ret_rms, sb3.ret_rms)):
            assert (
                np.array_equal(mine.mean, theirs.mean) and np.array_equal(mine.var, theirs.var) and mine.count == theirs.count
            )
        assert np.array_equal(ours.returns, sb3.returns)
        ended += int(dones.sum())
    assert ended >= 2 * n_envs  # the time limit ended every env's episode, so terminal observations were compared
    sb3.close()


def test_frozen_statistics_are_a_pure_function_and_survive_a_round_trip() -> None:
    norm = Normalizer({"obs": (2,)}, 2, norm_reward=False)
    norm.reset({"obs": np.array([[1.0, 2.0], [3.0, 6.0]])})
    state = norm.state_dict()
    before = norm.normalize_obs({"obs": np.array([[2.0, 4.0]]), "image": np.zeros((1, 3, 4, 4), np.uint8)})
    assert list(before) == ["obs"] and before["obs"].dtype == np.float32  # only the keys it normalises
    other = Normalizer({"obs": (2,)}, 2, norm_reward=False)
    other.load_state_dict(state)
    assert np.array_equal(other.normalize_obs({"obs": np.array([[2.0, 4.0]])})["obs"], before["obs"])
    assert Normalizer({"obs": (2,)}, 2, norm_obs=False).normalized_keys == ()
    rms = RunningMeanStd(shape=(2,))
    rms.update(np.array([[1.0, 1.0], [3.0, 5.0]], np.float32))
    assert rms.count == 2.0001 and rms.mean.dtype == np.float64
