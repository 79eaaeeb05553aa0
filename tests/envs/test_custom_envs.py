"""Custom envs, registered as gymnasium's docs register them (class, string or function entry
point), loaded with ``--gym_packages``, with env kwargs, trained in worker processes under
forkserver and spawn; gymnasium's mujoco-py stubs are still recognised as stubs."""

from __future__ import annotations

import warnings

import gymnasium as gym
import pytest

from ppo_dict.algo.ppo import PPO
from ppo_dict.core.config import Config
from ppo_dict.envs import resolve_env_name
from ppo_dict.envs.make import is_mujoco_py_stub
from ppo_dict.run.checks import validate
from ppo_dict.vec import make_env_pool
from tests.cli_here import run_here
from tests.test_main_ppo import summary_line

PACKAGE = ("tests.envs.custom_envs",)
IDS = ("PPODictCustomClass-v0", "PPODictCustomString-v0", "PPODictCustomFunction-v0")


@pytest.mark.parametrize("env_id", IDS)
def test_every_entry_point_resolves_to_itself(env_id: str) -> None:
    spec = resolve_env_name(f"gym_{env_id}", PACKAGE, kwargs={"goal": 2})
    assert (spec.gym_id, spec.notice, spec.kwargs) == (env_id, "", {"goal": 2})
    assert not is_mujoco_py_stub(gym.spec(env_id))


def test_module_colon_id_imports_the_module_and_each_worker_imports_it() -> None:
    """gymnasium's ``<module>:<id>`` (``--env`` documents it): the module is imported first, as ``gym.make`` does,
    and joins the packages each worker imports; a module that cannot be imported is named."""
    spec = resolve_env_name(f"tests.envs.custom_envs:{IDS[0]}", kwargs={"goal": 2})
    assert (spec.gym_id, spec.gym_packages, spec.kwargs) == (IDS[0], PACKAGE, {"goal": 2})
    assert resolve_env_name(f"gym_tests.envs.custom_envs:{IDS[0]}", PACKAGE).gym_packages == PACKAGE
    with pytest.raises(ValueError) as raised:
        resolve_env_name("tests.envs.no_such_module:Foo-v0")
    assert str(raised.value) == (
        "the module of tests.envs.no_such_module:Foo-v0 (gymnasium's <module>:<id>) cannot be "
        "imported: ModuleNotFoundError: No module named 'tests.envs.no_such_module'"
    )


def test_mujoco_py_stubs_are_recognised_by_what_they_are() -> None:
    assert is_mujoco_py_stub(gym.spec("Hopper-v3")) and not is_mujoco_py_stub(gym.spec("Hopper-v4"))
    spec = resolve_env_name("gym_Hopper-v3")
    assert spec.gym_id == "Hopper-v5" and "needs mujoco-py" in spec.notice


@pytest.mark.parametrize(
    "env_id, mp_method", [(IDS[0], "forkserver"), (IDS[0], "spawn"), (IDS[1], "spawn"), (IDS[2], "forkserver")]
)
def test_custom_env_trains_in_worker_processes(env_id: str, mp_method: str) -> None:
    """Each worker imports the package (which registers the env in its own registry) and passes
    the kwargs: the goal at 2 is reached within the first rollout."""
    cfg = Config(
        env=f"gym_{env_id}",
        gym_packages=PACKAGE,
        env_kwargs=dict(goal=2, max_steps=8),
        n_envs=2,
        num_workers=2,
        mp_method=mp_method,
        n_steps=16,
        batch_size=32,
        n_epochs=1,
        seed=0,
        total_timesteps=64,
        verbose=0,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        backend = validate(cfg)
        with PPO(cfg, make_env_pool(cfg, backend)) as ppo:
            ppo.learn()
            assert ppo.num_timesteps == 64 and ppo.pool.pids
            # walks of even length: goal 2
            assert ppo.ep_info_buffer and all(e["l"] in (2, 4, 6, 8) for e in ppo.ep_info_buffer)


def test_custom_env_trains_from_the_command_line(tmp_path) -> None:
    proc = run_here(
        "--env",
        "gym_PPODictCustomClass-v0",
        "--gym_packages",
        "tests.envs.custom_envs",
        "--env_kwargs",
        "dict(goal=2)",
        "--n_envs",
        "2",
        "--num_workers",
        "2",
        "--n_steps",
        "32",
        "--batch_size",
        "32",
        "--n_epochs",
        "1",
        "--total_timesteps",
        "128",
        "--seed",
        "0",
        "--plot",
        "False",
        "--run_dir",
        str(tmp_path / "run"),
    )
    assert proc.returncode == 0, proc.stderr
    assert summary_line(proc.stdout)["env_steps"] == 128
