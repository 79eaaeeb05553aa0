"""The gymnasium runner: sb3's DummyVecEnv + Monitor semantics into storage, and the env it names when one fails."""

import gymnasium as gym
import numpy as np
import pytest
from stable_baselines3.common.env_util import make_vec_env

from ppo_dict.data.storage import RolloutStorage
from ppo_dict.vec.runner import GymRunner, env_seeds


def make_cartpole(i: int) -> gym.Env:
    return gym.make("CartPole-v1", max_episode_steps=9)


def test_runner_writes_what_dummy_vec_env_and_monitor_return() -> None:
    n_envs, steps = 3, 25
    env = make_cartpole(0)
    storage = RolloutStorage(env.observation_space, env.action_space, n_steps=steps, n_envs=n_envs)
    runner = GymRunner(make_cartpole, range(n_envs), storage, record_infos=True)
    runner.open()
    sb3 = make_vec_env("CartPole-v1", n_envs=n_envs, env_kwargs={"max_episode_steps": 9})
    sb3.seed(4)
    assert np.array_equal(sb3.reset(), (runner.reset(env_seeds(4, n_envs)), storage.env_obs["obs"][0])[1])
    rng, episodes = np.random.default_rng(0), 0
    for t in range(steps):
        storage.env_actions[...] = rng.integers(2, size=n_envs)
        obs, rewards, dones, infos = sb3.step(storage.env_actions.copy())
        ours, _ = runner.step(t)
        assert np.array_equal(storage.env_obs["obs"][t + 1], obs) and np.array_equal(storage.env_rewards[t], rewards)
        assert np.array_equal(storage.terminated[t] | storage.truncated[t], dones)
        for i in np.flatnonzero(dones):
            episodes += 1
            assert np.array_equal(storage.env_terminal_obs["obs"][i], infos[i]["terminal_observation"])
            assert storage.episode(i) == ({"r": infos[i]["episode"]["r"], "l": infos[i]["episode"]["l"]}, None)
            assert ours[i]["TimeLimit.truncated"] == infos[i]["TimeLimit.truncated"]
    assert episodes >= n_envs
    runner.close()
    sb3.close()


def test_a_failing_constructor_leaves_its_env_named() -> None:
    def factory(i: int) -> gym.Env:
        if i == 6:
            raise ValueError("bad kwarg")
        return make_cartpole(i)

    env = make_cartpole(0)
    runner = GymRunner(factory, range(4, 8), RolloutStorage(env.observation_space, env.action_space, 2, 8))
    with pytest.raises(ValueError, match="bad kwarg"):
        runner.open()
    assert runner.active == (6, "constructor") and len(runner.envs) == 2
    runner.close()


def test_episode_statistics_come_from_beneath_the_training_wrappers() -> None:
    """Atari: the runner sees lost lives as episode ends and clipped rewards; sb3 logs the Monitor
    beneath the AtariWrapper. A lost life writes no episode (PPO records nothing); a game over
    writes the Monitor's whole-game, unclipped return and its length in emulator frames (and its
    time, as sb3's Monitor keeps one: its own clock, not compared)."""
    import ale_py  # noqa: F401  (registers the ids for sb3's gym.make)
    from stable_baselines3.common.env_util import make_atari_env

    from ppo_dict.envs import AtariOptions, make_env, resolve_env_name

    n_envs, steps, kwargs = 2, 200, {"max_num_frames_per_episode": 500}
    spec = resolve_env_name("gym_AsterixNoFrameskip-v4", atari=AtariOptions(), kwargs=kwargs)
    env = make_env(spec)
    storage = RolloutStorage(env.observation_space, env.action_space, n_steps=steps, n_envs=n_envs)
    runner = GymRunner(lambda i: make_env(spec), range(n_envs), storage)
    runner.open()
    runner.reset(env_seeds(7, n_envs))
    sb3 = make_atari_env("AsterixNoFrameskip-v4", n_envs=n_envs, seed=7, env_kwargs=kwargs)
    sb3.reset()
    rng, scores, lives = np.random.default_rng(0), [], 0
    for t in range(steps):
        storage.env_actions[...] = rng.integers(env.action_space.n, size=n_envs)
        _, rewards, dones, infos = sb3.step(storage.env_actions.copy())
        runner.step(t)
        assert np.array_equal(storage.env_rewards[t], rewards) and set(np.unique(rewards)) <= {0.0, 1.0}
        for i in np.flatnonzero(dones):
            episode = infos[i].get("episode")
            expected = {"r": episode["r"], "l": episode["l"]} if episode else None
            ours, success = storage.episode(i)
            assert ours is None or isinstance(ours.pop("t"), float)
            assert (ours, success) == (expected, None)
            scores, lives = scores + [episode["r"]] if episode else scores, lives + (episode is None)
    assert len(scores) >= 2 and lives >= 1 and max(scores) >= 50  # unclipped scores
    runner.close()
    sb3.close()


REWARDS = [
    1,
    2**60 + 12345,
    np.float64(0.1),
    np.float32(0.3),
    0.7,
    True,
    np.int64(2**55 + 3),
    np.float16(0.25),
    -7,
    np.uint8(7),
]


class TypedRewards(gym.Env):
    """Rewards of every type an env may return, episode ends as Python and numpy bools; keeps the
    actions it got and scribbles on them (which must not reach the storage)."""

    observation_space = gym.spaces.Box(-1, 1, (2,), np.float32)
    action_space = gym.spaces.Box(-1, 1, (2,), np.float32)

    def __init__(self, i: int):
        self.i, self.t, self.actions = i, 0, []

    def reset(self, *, seed=None, options=None):
        return np.zeros(2, np.float32), {}

    def step(self, action):
        self.actions.append(action.copy())
        action[...] = 9.0
        self.t += 1
        reward = REWARDS[(self.i + self.t) % len(REWARDS)]
        return np.full(2, self.t, np.float32), reward, np.bool_((self.i + self.t) % 4 == 0), self.t % 5 == 0, {}


@pytest.mark.parametrize("block", [range(0, 6), [1, 3, 4]])
def test_runner_writes_each_value_as_an_element_assignment_would(block) -> None:
    """One write per step for all the runner's envs (consecutive columns or not, all or a
    double-buffered half's) stores what per-env element assignments store: the same float32 of
    every reward type, the same episode ends; each env gets its own copy of its action row."""
    storage = RolloutStorage(TypedRewards.observation_space, TypedRewards.action_space, n_steps=8, n_envs=6)
    runner = GymRunner(TypedRewards, block, storage)
    runner.open()
    runner.reset(env_seeds(0, 6))
    expected = np.zeros((8, 6), np.float32)
    ends = np.zeros((2, 8, 6), bool)
    for t in range(8):
        given = np.arange(12, dtype=np.float32).reshape(6, 2) + t
        storage.env_actions[...] = given
        columns = range(0, 3) if t % 2 else None  # a double-buffered half on odd steps
        runner.step(t, columns)
        for j, i in enumerate(block):
            if columns is not None and i not in columns:
                continue
            env = runner.envs[j]
            expected[t, i] = REWARDS[(env.i + env.t) % len(REWARDS)]
            ends[:, t, i] = (env.i + env.t) % 4 == 0, env.t % 5 == 0
            assert np.array_equal(env.actions[-1], given[i])
        assert np.array_equal(storage.env_actions, given)  # the envs' scribbles stayed in their copies
    assert expected.tobytes() == storage.env_rewards.tobytes()
    assert np.array_equal(ends[0], storage.terminated) and np.array_equal(ends[1], storage.truncated)
    runner.close()
