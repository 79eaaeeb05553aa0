"""``rollout/success_rate`` as sb3 computes and logs it, compared with ``==`` at every log dump.

sb3's ``_update_info_buffer`` appends ``info["is_success"]`` of each env whose step ended an
episode (the terminal step's info, before the reset) to ``ep_success_buffer`` (the last 100), and
``dump_logs`` records ``safe_mean`` of it once it holds a value. ``PPODictGoal-v0`` (envs/goal.py)
reports ``is_success`` as numpy float32 (gymnasium-robotics' type: its mean is taken in float32),
as bool, or as a mix of Python and numpy types, at every step or only at episode ends. The runs are
long enough (over 100 episodes) for the window to drop its oldest values.
"""

import warnings

import pytest

from ppo_dict.core.config import Config
from ppo_dict.run.run_plan import build_env_pool
from tests.parity.sides import assert_same_record, run_both, run_ours

GOAL = dict(env="gym_PPODictGoal-v0", gym_packages=("ppo_dict.envs.goal",))


def config(success_type: str, every_step: bool = True, **overrides) -> Config:
    settings = dict(
        GOAL,
        env_kwargs=dict(success_type=success_type, success_every_step=every_step),
        n_envs=4,
        n_steps=32,
        batch_size=64,
        n_epochs=2,
        net_arch=[16],
        seed=11,
        total_timesteps=10 * 128,
        num_workers=0,
        device="cpu",
    )
    return Config(**{**settings, **overrides})


def assert_success_rates_equal(cfg: Config, pool=None) -> list:
    sb3, ours = run_both(cfg, pool)
    rates = [d.get("rollout/success_rate") for d in sb3.dumps]
    assert [d.get("rollout/success_rate") for d in ours.dumps] == rates
    assert [type(d.get("rollout/success_rate")) for d in ours.dumps] == [type(r) for r in rates]
    assert_same_record(sb3, ours)  # every other logged value, buffer and parameter too
    return rates


@pytest.mark.parametrize("success_type,every_step", [("float32", True), ("bool", True), ("mixed", False)])
def test_success_rate_in_process(success_type: str, every_step: bool) -> None:
    rates = assert_success_rates_equal(config(success_type, every_step))
    assert all(isinstance(r, float) for r in rates) and len(set(rates)) > 2  # logged at every dump, and moving


@pytest.mark.parametrize("main_envs", [None, 0])
def test_success_rate_through_a_worker_pool(main_envs) -> None:
    """The workers' episode ends reach the main process through the shared storage."""
    cfg = config("mixed", num_workers=2, main_envs=main_envs)
    assert_success_rates_equal(cfg, pool=build_env_pool(cfg))


def test_no_success_rate_without_is_success() -> None:
    """An env whose info has no ``is_success`` logs no ``rollout/success_rate`` (sb3 neither)."""
    cfg = Config(
        env="gym_CartPole-v1", n_envs=2, n_steps=64, batch_size=64, n_epochs=1, seed=0, total_timesteps=256, num_workers=0
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ours = run_ours(cfg)
    assert ours.dumps and not any("rollout/success_rate" in d for d in ours.dumps)


def test_info_keywords_are_what_sb3_monitor_records() -> None:
    """``--info_keywords`` as rl-zoo's ``monitor_kwargs=dict(info_keywords=...)``: sb3's Monitor puts
    ``info[key]`` of the episode's last step into ``info["episode"]``; ppo_dict's episode buffer holds
    the same values (and types) through a worker pool, and logs their mean as ``rollout/<key>``."""
    from stable_baselines3 import PPO as SB3PPO
    from stable_baselines3.common.env_util import make_vec_env

    import ppo_dict.envs.goal  # noqa: F401  (registers the id for sb3's gym.make)
    from ppo_dict.data.episodes import safe_mean
    from ppo_dict.interop.sb3 import sb3_ppo_kwargs
    from tests.parity.sides import learn_sb3

    keywords = ("distance", "is_success")
    cfg = config("mixed", False, info_keywords=keywords, num_workers=2, total_timesteps=4 * 128)
    venv = make_vec_env(
        "PPODictGoal-v0",
        n_envs=cfg.num_envs,
        seed=cfg.seed,
        env_kwargs=cfg.env_kwargs,
        monitor_kwargs=dict(info_keywords=keywords),
    )
    sb3_model = SB3PPO("MlpPolicy", venv, verbose=0, **sb3_ppo_kwargs(cfg))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sb3 = learn_sb3(sb3_model, cfg.total_timesteps)
        models = []
        ours = run_ours(cfg, pool=build_env_pool(cfg), prepare=models.append)
    expected = [{k: v for k, v in e.items() if k != "t"} for e in sb3_model.ep_info_buffer]
    got = list(models[0].ep_info_buffer)
    assert got == expected and [[type(v) for v in e.values()] for e in got] == [
        [type(v) for v in e.values()] for e in expected
    ]
    assert len(expected) > 20 and {type(e["is_success"]) for e in expected} > {bool}  # several types came
    for key in keywords:
        assert ours.dumps[-1][f"rollout/{key}"] == safe_mean([e[key] for e in expected])
    assert [d.get("rollout/success_rate") for d in ours.dumps] == [d.get("rollout/success_rate") for d in sb3.dumps]


def test_a_missing_info_keyword_names_the_env() -> None:
    """sb3's Monitor fails on an info keyword the episode's last info lacks; so does ppo_dict, naming the env."""
    from ppo_dict.core.errors import EnvWorkerError

    cfg = config("bool", info_keywords=("no_such_key",), num_workers=1, main_envs=0)
    with pytest.raises(EnvWorkerError, match=r"env \d.*no_such_key"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            run_ours(cfg, pool=build_env_pool(cfg))
