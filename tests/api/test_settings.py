"""Settings assigned between ``learn`` calls, as a curriculum or fine-tuning script assigns them: the next
rollout and update use them where sb3's do, the zip records them, and a model loaded from it builds with
them; under sb3's import and ppo_dict's, compared with ``==`` (``ppo_dict.api.settings``)."""

from __future__ import annotations

import os
from types import SimpleNamespace

import pytest

import ppo_dict
from ppo_dict.core.errors import ConfigError
from tests.api.scripts import Record, Watch, run
from tests.api.test_scripts import assert_same_run

#: what a loaded model holds of the settings assigned before its save
SETTINGS = (
    "ent_coef",
    "vf_coef",
    "max_grad_norm",
    "n_epochs",
    "batch_size",
    "gamma",
    "gae_lambda",
    "target_kl",
    "learning_rate",
    "seed",
)


def curriculum(api: SimpleNamespace, tmp: str, record: Record) -> None:
    """Train, change settings as sb3's attributes, train on (a time limit's bootstrap with the new gamma), save, load,
    train on."""
    from stable_baselines3.common.utils import ConstantSchedule

    env = api.make_vec_env("Pendulum-v1", n_envs=2, seed=3)
    model = api.PPO("MlpPolicy", env, n_steps=64, batch_size=64, n_epochs=3, seed=2, verbose=0)
    record.attach(model)
    model.learn(256, callback=Watch(record))
    model.ent_coef, model.vf_coef, model.max_grad_norm, model.target_kl = 0.05, 0.4, 0.3, 0.5
    model.n_epochs, model.batch_size = 2, 32
    model.gamma = 0.95  # the time-limit bootstrap's at once; GAE's is the rollout buffer's, set when the model is built
    model.rollout_buffer.gae_lambda = 0.9  # the buffer's own: the next GAE
    model.clip_range = ConstantSchedule(0.1)
    model.learning_rate = 1e-3  # sb3 makes lr_schedule from it when it builds the model: the load below
    model.lr_schedule = ConstantSchedule(5e-4)  # the next updates'
    model.seed = 11  # the load below seeds with it
    record.results["clip_range"] = model.clip_range(1.0)
    model.learn(256, reset_num_timesteps=False, callback=Watch(record))
    record.keep("changed", model)
    model.save(os.path.join(tmp, "changed"))
    loaded = api.PPO.load(os.path.join(tmp, "changed"), env=env)
    record.results["loaded"] = {name: getattr(loaded, name) for name in SETTINGS}
    record.results["loaded_gae"] = (loaded.rollout_buffer.gamma, loaded.rollout_buffer.gae_lambda, loaded.clip_range(0.5))
    record.attach(loaded)
    loaded.learn(256, reset_num_timesteps=False, callback=Watch(record))
    record.keep("loaded_trained", loaded)
    env.close()


def normaliser_settings(api: SimpleNamespace, tmp: str, record: Record) -> None:
    """Train, change sb3's VecNormalize's settings (rewards no longer normalised, other clips), train on: with
    ppo_dict's own envs over two worker processes, which normalise their envs' rows themselves."""
    from stable_baselines3.common.vec_env import VecNormalize

    workers = {} if api.make_vec_env.__module__.startswith("stable_baselines3") else dict(vec_env_kwargs=dict(num_workers=2))
    env = VecNormalize(api.make_vec_env("Pendulum-v1", n_envs=3, seed=4, **workers), gamma=0.9)
    model = api.PPO("MlpPolicy", env, n_steps=64, batch_size=96, n_epochs=2, gamma=0.9, seed=1, verbose=0)
    record.attach(model)
    model.learn(192, callback=Watch(record))
    env.norm_reward, env.clip_obs, env.clip_reward = False, 0.5, 1.0
    model.learn(192, reset_num_timesteps=False, callback=Watch(record))
    record.keep("changed", model)
    trainer = getattr(model, "trainer", None)  # ppo_dict's: where the policy step ran
    record.results["sharded"] = trainer is not None and trainer.collector.shard is not None
    env.close()


SCRIPTS = {"curriculum": curriculum, "normaliser_settings": normaliser_settings}


@pytest.mark.parametrize("which", ["ppo_dict", "ppo_dict_envs"])
def test_settings_assigned_between_learn_calls_act_as_sb3s(which: str, tmp_path) -> None:
    sb3 = run("curriculum", "sb3", os.path.join(tmp_path, "sb3"), SCRIPTS)
    ours = run("curriculum", which, os.path.join(tmp_path, "ours"), SCRIPTS)
    assert ours.results["loaded"]["gamma"] == 0.95 and ours.results["loaded_gae"][0] == 0.95  # the zip held the new gamma
    assert any(step[5].any() for step in ours.steps)  # a time limit cut an episode: the bootstrap's gamma was used
    assert_same_run(sb3, ours)


def test_normaliser_settings_assigned_between_learn_calls_reach_the_workers(tmp_path) -> None:
    """Where each worker normalises its envs' rows (the policy step where the envs are), settings a script assigns
    to sb3's VecNormalize between calls reach the workers' books as they reach the main process's."""
    sb3 = run("normaliser_settings", "sb3", os.path.join(tmp_path, "sb3"), SCRIPTS)
    ours = run("normaliser_settings", "ppo_dict_envs", os.path.join(tmp_path, "ours"), SCRIPTS)
    if not ours.results["sharded"]:
        pytest.skip("the probe kept the policy step central on this host (the start line says why)")
    sb3.results["sharded"] = True
    assert_same_run(sb3, ours)


def test_a_setting_fixed_once_built_or_a_bad_value_is_refused_and_changes_nothing() -> None:
    model = ppo_dict.PPO("MlpPolicy", "CartPole-v1", n_steps=64, ent_coef=0.01, _init_setup_model=False)
    with pytest.raises(
        AttributeError, match=r"PPO.n_steps is fixed once the model is built .*give n_steps= to the constructor"
    ):
        model.n_steps = 128
    with pytest.raises(ConfigError) as refused:
        model.ent_coef = -1.0
    assert refused.value.problems[0].startswith("ent_coef=-1.0")
    with pytest.raises(ConfigError, match="batch_size"):
        model.batch_size = "many"
    assert (model.ent_coef, model.cfg.ent_coef, model.batch_size) == (0.01, 0.01, 64)
    model.verbose, model.batch_size = 1, None  # None: sb3-contrib's whole rollout in one minibatch
    assert (model.verbose, model.cfg.minibatch_size) == (1, 64)
