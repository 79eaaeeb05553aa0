"""ppo_dict's own guarantees beyond sb3 parity: determinism, seeding, refusing non-finite updates."""

import warnings

import gymnasium as gym
import numpy as np
import pytest
import torch

from ppo_dict.algo.ppo import PPO
from ppo_dict.core.config import Config
from ppo_dict.core.errors import NonFiniteError
from ppo_dict.envs import resolve_env_name
from ppo_dict.vec import probe_env
from ppo_dict.vec.in_process import InProcessEnvPool

CFG = Config(
    env="gym_Pendulum-v1",
    n_envs=3,
    num_workers=0,
    n_steps=64,
    batch_size=64,
    n_epochs=2,
    seed=13,
    total_timesteps=384,
    verbose=0,
)


def make(cfg: Config) -> PPO:
    return PPO(cfg, InProcessEnvPool(probe_env(resolve_env_name(cfg.env)), cfg.num_envs, cfg.n_steps))


def test_two_runs_in_one_process_are_identical() -> None:
    params = []
    for _ in range(2):
        model = make(CFG).learn()
        model.close()
        params.append(model.policy.state_dict())
    for key in params[0]:
        assert torch.equal(params[0][key], params[1][key]), key


def test_env_i_is_first_reset_with_seed_plus_i() -> None:
    model = make(CFG)
    model.start_envs()
    for i in range(CFG.n_envs):
        expected, _ = gym.make("Pendulum-v1").reset(seed=CFG.seed + i)
        assert np.array_equal(model.storage.obs["obs"][0, i], expected)
    model.close()


def test_non_finite_update_is_refused_before_the_step() -> None:
    model = make(CFG.replace(learning_rate=1e30, max_grad_norm=1e30))
    with (
        warnings.catch_warnings(),
        pytest.raises(
            NonFiniteError,
            match=r"non-finite (loss|grad_norm) .* at update \d+, "
            r"epoch \d+, minibatch \d+; "
            r"no optimizer step was taken",
        ),
    ):
        warnings.simplefilter("ignore")
        model.learn()
    assert all(torch.isfinite(p).all() for p in model.policy.parameters())
    model.close()


def test_out_of_bounds_actions_are_clipped_for_the_env_but_stored_unclipped() -> None:
    model = make(CFG)
    with torch.no_grad():
        model.policy.action_net.bias.fill_(1e6)  # mean action far outside [-2, 2]
    model.start_envs()
    model.collect_rollout()
    s = model.storage
    assert np.all(s.env_actions == 2.0)  # the last actions the envs received
    assert s.actions.min() > 1e5  # the buffer keeps what the policy sampled
    assert np.isfinite(s.rewards).all()
    model.close()


def test_device_auto_keeps_mlp_policies_on_the_cpu_and_sends_image_policies_to_a_gpu() -> None:
    from ppo_dict.algo.model import resolve_device
    from ppo_dict.run.run_plan import device_notice

    assert resolve_device("auto", images=False, cuda_available=True) == torch.device("cpu")  # bit-exact with sb3
    assert resolve_device("auto", images=True, cuda_available=True) == torch.device("cuda")
    assert resolve_device("auto", images=True, cuda_available=False) == torch.device("cpu")
    assert resolve_device("cuda:1", images=False, cuda_available=False) == torch.device("cuda:1")  # forced: as asked
    assert resolve_device("cpu", images=True, cuda_available=True) == torch.device("cpu")
    assert device_notice(torch.device("cpu")) == ""
    notice = device_notice(torch.device("cuda"))
    assert "\n" not in notice and notice.startswith("note: training on cuda: results are close to sb3's, not bit-exact")


def test_ppo_asks_for_the_device_with_whether_its_observation_holds_images(monkeypatch) -> None:
    import ppo_dict.algo.ppo as ppo_module

    asked = []
    monkeypatch.setattr(ppo_module, "resolve_device", lambda name, images: asked.append((name, images)) or torch.device("cpu"))
    for env, model in (("gym_CartPole-v1", "mlp"), ("test_dummy", "cnn")):
        make(Config(env=env, model=model, n_envs=1, num_workers=0, n_steps=8, batch_size=8, seed=0, verbose=0)).close()
    assert asked == [("auto", False), ("auto", True)]
