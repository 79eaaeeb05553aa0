"""rl-zoo's ``ppo_lstm.yml`` (sb3-contrib's RecurrentPPO hyperparameters) as ``ppo.yml`` is read, and rl-zoo's
``NoVel`` envs registered without rl_zoo3."""

from __future__ import annotations

import collections
import importlib
import subprocess
import sys

import numpy as np
import pytest

from ppo_dict.interop.hyperparams import hyperparams_file, translate
from ppo_dict.run.checks import validate
from ppo_dict.run.cli import config_from_args
from tests.conftest import ROOT
from tests.test_hyperparams import classify, needs_zoo

#: every env entry of rl_zoo3 2.9.2's ppo_lstm.yml: loaded, refused (the keys named) or not made by gymnasium here
LSTM_TABLE = {
    "PendulumNoVel-v1": "loaded",
    "CartPoleNoVel-v1": "loaded",
    "MountainCarNoVel-v0": "loaded",
    "MountainCarContinuousNoVel-v0": "loaded",
    "Acrobot-v1": "loaded",
    "BipedalWalker-v3": "loaded",
    "BipedalWalkerHardcore-v3": "loaded",
    # rl-zoo registers the v3 NoVel landers; gymnasium 1.x deprecates LunarLander v2
    "LunarLanderNoVel-v2": "no env",
    "LunarLanderContinuousNoVel-v2": "no env",
    # PyBullet's envs (pybullet_envs_gymnasium registers them)
    **{
        f"{name}Env-v0": "no env"
        for name in (
            "HalfCheetahBullet",
            "AntBullet",
            "Walker2DBullet",
            "HopperBullet",
            "ReacherBullet",
            "MinitaurBullet",
            "MinitaurBulletDuck",
            "HumanoidBullet",
            "InvertedDoublePendulumBullet",
            "InvertedPendulumSwingupBullet",
        )
    },
    "CarRacing-v3": ("refused", ["env_wrapper"]),  # rl-zoo's resize and gymnasium's greyscale wrappers
    # MuJoCo (the v4 ids gymnasium still makes; the v2 ids mapped to the newest version, as for ppo.yml)
    **{
        name: "loaded"
        for name in (
            "Ant-v4",
            "Swimmer-v4",
            "HalfCheetah-v4",
            "Hopper-v4",
            "HumanoidStandup-v2",
            "Humanoid-v4",
            "InvertedDoublePendulum-v2",
            "InvertedPendulum-v2",
            "Reacher-v2",
            "Walker2d-v4",
        )
    },
}


def lstm_document() -> dict:
    import yaml

    with open(hyperparams_file("rl_zoo3", recurrent=True)) as f:
        return yaml.safe_load(f)


@needs_zoo
def test_every_rl_zoo_ppo_lstm_entry_loads_or_is_refused_by_name() -> None:
    """Each entry through the user's path (``--env gym_<entry> --hyperparams <ppo_lstm.yml>``, then the whole check)."""
    document = lstm_document()
    envs = [name for name in document if name not in ("default", "atari")]
    path = hyperparams_file("rl_zoo3", recurrent=True)
    table = classify(path, envs)
    print(f"rl_zoo3 ppo_lstm.yml: {len(envs)} env entries: {dict(collections.Counter(kind for kind, _ in table.values()))}")
    assert {name: kind if kind != "refused" else (kind, keys) for name, (kind, keys) in table.items()} == LSTM_TABLE
    no_env = [keys for kind, keys in table.values() if kind == "no env"]
    assert all("doesn't exist" in reason or "is deprecated" in reason for reason in no_env), no_env
    cfg = config_from_args(["--env", "gym_CartPoleNoVel-v1", "--hyperparams", path])
    assert (cfg.model, cfg.lstm_hidden_size, cfg.enable_critic_lstm, cfg.net_arch, cfg.activation_fn, cfg.ortho_init) == (
        "mlp_lstm",
        64,
        True,
        {"pi": [64], "vf": [64]},
        "relu",
        False,
    )
    assert (cfg.n_envs, cfg.n_steps, cfg.batch_size, cfg.n_epochs, cfg.learning_rate, cfg.total_timesteps) == (
        8,
        32,
        256,
        20,
        "lin_0.001",
        100_000,
    )
    cfg = config_from_args(["--env", "gym_PendulumNoVel-v1", "--hyperparams", path])
    assert (cfg.use_sde, cfg.sde_sample_freq, cfg.n_steps, cfg.normalize) == (True, 4, 1024, True)


@needs_zoo
def test_rl_zoo3_names_ppo_lstm_yml_for_a_recurrent_run_and_its_atari_entry_loads() -> None:
    """``--hyperparams rl_zoo3`` reads ``ppo_lstm.yml`` when ``--model`` is recurrent (rl-zoo's ``--algo ppo_lstm``), else
    ``ppo.yml``; Atari games take its ``atari`` entry: CnnLstmPolicy over 4 stacked frames, the critic without an LSTM."""
    assert hyperparams_file("rl_zoo3", recurrent=True).endswith("hyperparams/ppo_lstm.yml")
    cfg = config_from_args(["--env", "gym_CartPoleNoVel-v1", "--hyperparams", "rl_zoo3", "--model", "mlp_lstm"])
    assert (cfg.lstm_hidden_size, cfg.n_steps, cfg.gae_lambda) == (64, 32, 0.8)
    plain = config_from_args(["--env", "gym_CartPole-v1", "--hyperparams", "rl_zoo3"])
    assert (plain.model, plain.n_steps) == ("mlp", 32) and plain.lstm_hidden_size is None  # ppo.yml's CartPole-v1
    assert translate(lstm_document()["atari"], "atari")[1] == []
    cfg = config_from_args(["--env", "gym_BreakoutNoFrameskip-v4", "--hyperparams", "rl_zoo3", "--model", "cnn_lstm"])
    assert validate(cfg).observation_space.shape == (84, 84, 4)
    assert (
        cfg.atari_wrapper,
        cfg.atari_terminal_on_life_loss,
        cfg.frame_stack,
        cfg.n_envs,
        cfg.batch_size,
        cfg.lstm_hidden_size,
        cfg.enable_critic_lstm,
        cfg.ent_coef,
    ) == (True, False, 4, 8, 256, 128, False, 0.01)


@pytest.mark.parametrize(
    "env_id",
    ["CartPole-v1", "MountainCar-v0", "MountainCarContinuous-v0", "Pendulum-v1", "LunarLander-v3", "LunarLanderContinuous-v3"],
)
def test_no_velocity_envs_observe_what_rl_zoos_do(env_id: str) -> None:
    """ppo_dict's ``<Name>NoVel-v<n>``: rl-zoo's ``MaskVelocityWrapper`` over gymnasium's env, observation for observation."""
    import gymnasium as gym

    from ppo_dict.envs import make_env, resolve_env_name
    from ppo_dict.envs.no_velocity import no_velocity_id
    from ppo_dict.interop.trained_agent import gymnasium_unpatched

    pytest.importorskip("rl_zoo3")
    with gymnasium_unpatched():
        from rl_zoo3.wrappers import MaskVelocityWrapper

    ours = make_env(resolve_env_name(f"gym_{no_velocity_id(env_id)}"))
    theirs = MaskVelocityWrapper(gym.make(env_id))
    masked = 0
    for episode in range(2):
        a, b = ours.reset(seed=episode)[0], theirs.reset(seed=episode)[0]
        ours.action_space.seed(episode)
        for _ in range(60):
            assert a.dtype == b.dtype and np.array_equal(a, b)
            masked += int(np.count_nonzero(theirs.mask == 0))
            action = ours.action_space.sample()
            a, ra, ta, ua, _ = ours.step(action)
            b, rb, tb, ub, _ = theirs.step(action)
            assert (ra, ta, ua) == (rb, tb, ub)
            if ta or ua:
                break
    assert masked > 0 and ours.observation_space == theirs.observation_space
    ours.close(), theirs.close()


def test_no_velocity_envs_need_no_rl_zoo3() -> None:
    """The ids resolve and make in a process that never imports rl_zoo3 (whose import patches gymnasium), workers included."""
    code = (
        "import sys\nfrom ppo_dict.envs import make_env, resolve_env_name\n"
        "spec = resolve_env_name('gym_CartPoleNoVel-v1')\nenv = make_env(spec)\nobs, _ = env.reset(seed=0)\n"
        "assert obs[1] == 0 and obs[3] == 0 and obs[0] != 0\nassert 'rl_zoo3' not in sys.modules, 'rl_zoo3 imported'\n"
        "print(spec.gym_packages)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "('ppo_dict.envs.no_velocity',)"


def test_a_no_vel_id_this_process_has_registered_is_still_registered_in_each_worker() -> None:
    """A worker is a fresh interpreter: the NoVel ids are registered there by the spec's module, also where this process
    has them registered already (rl_zoo3 imported, or an earlier run in this process), or its envs cannot be made."""
    import gymnasium as gym

    from envs.make import resolve_env_name
    from envs.no_velocity import MODULE

    importlib.import_module(MODULE)
    assert "CartPoleNoVel-v1" in gym.registry
    assert MODULE in resolve_env_name("gym_CartPoleNoVel-v1").gym_packages
