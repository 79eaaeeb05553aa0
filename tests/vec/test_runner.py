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
    writes the Monitor's whole-game, unclipped return and its length in emulator frames."""
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
            assert storage.episode(i) == (expected, None)
            scores, lives = scores + [episode["r"]] if episode else scores, lives + (episode is None)
    assert len(scores) >= 2 and lives >= 1 and max(scores) >= 50  # unclipped scores
    runner.close()
    sb3.close()
