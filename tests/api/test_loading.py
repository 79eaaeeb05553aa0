"""``load`` as sb3 loads: an env of any size, and ``custom_objects`` as rl-zoo's enjoy passes them.

* ``PPO.load(path, env=env)`` takes an env with another number of envs than the model was saved
  with (sb3's own advice for that case): the zip's ``n_envs`` is the saving model's, the env given
  decides; ``n_envs`` is only ever an error about what the caller passed.
* ``custom_objects`` replaces what it names before any check: a learning rate of 0.0 and a clip
  range of 0.0 (``lambda _: 0.0``) are what rl-zoo's ``enjoy`` loads a model with.

Each script runs under sb3's import and ppo_dict's (with sb3's ``make_vec_env``, and with
ppo_dict's), and what its callbacks saw, its rollout buffers, log dumps, parameters and Adam state
are compared with ``==``.
"""

from __future__ import annotations

import functools
import os
from types import SimpleNamespace

import numpy as np
import pytest

import ppo_dict
from ppo_dict.core.errors import ConfigError
from tests.api.scripts import Record, Watch, run
from tests.api.test_scripts import assert_same_run


def load_with_envs(api: SimpleNamespace, tmp: str, record: Record, n_envs: int) -> None:
    """Train on one env and save; load with ``n_envs`` envs and train on (sb3's docs: load(path, env))."""
    # a constant rate: a function would be saved as a pickle, which load reads only with trust_pickles=True
    model = api.PPO("MlpPolicy", "CartPole-v1", n_steps=32, batch_size=32, n_epochs=2, learning_rate=1e-3, seed=1, verbose=0)
    model.learn(64)
    model.save(os.path.join(tmp, "cartpole"))
    del model
    env = api.make_vec_env("CartPole-v1", n_envs=n_envs, seed=3)
    model = api.PPO.load(os.path.join(tmp, "cartpole"), env=env)
    record.results["loaded"] = (model.n_envs, model.get_env().num_envs, model.num_timesteps)
    record.attach(model)
    model.learn(64 * n_envs, reset_num_timesteps=False, callback=Watch(record))
    record.keep("continued", model)
    env.close()


def enjoy(api: SimpleNamespace, tmp: str, record: Record) -> None:
    """rl-zoo's ``enjoy``: a model loaded with ``custom_objects`` that zero its learning rate and clip range,
    run for an episode with ``predict``; then ``learn`` on it (a learning rate of 0: Adam's moments move, the weights do
    not)."""
    model = api.PPO("MlpPolicy", "Pendulum-v1", n_steps=64, batch_size=64, n_epochs=2, seed=2, verbose=0)
    model.learn(64)
    model.save(os.path.join(tmp, "pendulum"))
    custom_objects = {"learning_rate": 0.0, "lr_schedule": lambda _: 0.0, "clip_range": lambda _: 0.0}
    env = api.make_vec_env("Pendulum-v1", n_envs=1, seed=4)
    model = api.PPO.load(os.path.join(tmp, "pendulum"), env=env, custom_objects=custom_objects, device="cpu")
    record.results["settings"] = (model.learning_rate, model.clip_range(1.0))
    obs, actions = env.reset(), []
    for _ in range(20):
        action, _ = model.predict(obs, deterministic=True)
        obs, *_ = env.step(action)
        actions.append(action)
    record.results["actions"] = np.array(actions)
    record.attach(model)
    model.learn(64, callback=Watch(record))
    record.keep("after_learn", model)
    env.close()


LOADING_SCRIPTS = {
    **{f"load_{n}": functools.partial(load_with_envs, n_envs=n) for n in (1, 2, 8)},
    "enjoy": enjoy,
}


@pytest.mark.parametrize("which", ["ppo_dict", "ppo_dict_envs"])
@pytest.mark.parametrize("name", list(LOADING_SCRIPTS))
def test_load_as_sb3_loads_gives_sb3s_numbers(name: str, which: str, tmp_path) -> None:
    sb3 = run(name, "sb3", os.path.join(tmp_path, "sb3"), LOADING_SCRIPTS)
    ours = run(name, which, os.path.join(tmp_path, "ours"), LOADING_SCRIPTS)
    if name.startswith("load_"):
        n = int(name.split("_")[1])
        assert ours.results["loaded"] == (n, n, 64) and len(ours.rollouts) == 2
    else:
        assert ours.results["settings"] == (0.0, 0.0) and len(ours.steps) == 64
    assert_same_run(sb3, ours)


def test_n_envs_is_an_error_about_what_the_caller_passed(tmp_path) -> None:
    model = ppo_dict.PPO("MlpPolicy", "CartPole-v1", n_steps=32, batch_size=32, seed=0, verbose=0)
    model.save(os.path.join(tmp_path, "cartpole"))
    env = ppo_dict.make_vec_env("CartPole-v1", n_envs=2)
    with pytest.raises(ConfigError, match=r"n_envs=3: the env given has 2 envs \(n_envs is for an env id or factory\)"):
        ppo_dict.PPO.load(os.path.join(tmp_path, "cartpole"), env=env, n_envs=3)
    loaded = ppo_dict.PPO.load(os.path.join(tmp_path, "cartpole"), env=env, n_envs=2)
    assert loaded.n_envs == 2
    loaded.close()
    model.close()
