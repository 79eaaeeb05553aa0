"""The CUDA path's code, run on the CPU (no GPU here, or in CI): each piece forced on and compared with
the exact path it replaces, to float tolerance. What needs a GPU itself (graph capture, pinned copies,
the timings) runs in ``benchmarks/gpu.sh`` on a GPU host."""

import warnings
from dataclasses import replace

import numpy as np
import pytest
import torch
from gymnasium import spaces

from ppo_dict.run.run_plan import choose_device, forced_cuda_line, measured_device, measured_step_us
from ppo_dict.algo.training.device_update import device_ppo_update
from ppo_dict.algo.rollout.graph_step import GraphedStep
from ppo_dict.algo.networks.policy import ActorCritic
from ppo_dict.algo.ppo import PPO
from ppo_dict.algo.rollout.rollout_step import PolicyStep
from ppo_dict.algo.training.update import UpdateSettings, ppo_update
from ppo_dict.core.config import Config
from ppo_dict.core.errors import NonFiniteError
from ppo_dict.data.masking import with_action_masks
from ppo_dict.data.storage import RolloutStorage, obs_to_tensor
from ppo_dict.run.run_plan import build_env_pool

# Pendulum's time limit cuts every env at step 199: one batched bootstrap of all of them
PENDULUM = Config(
    env="gym_Pendulum-v1", n_envs=4, n_steps=256, batch_size=64, n_epochs=2, seed=3, total_timesteps=1024, verbose=0
)


def rollout_rewards(cfg: Config, device_bootstrap: bool) -> tuple[np.ndarray, np.ndarray]:
    """``(rewards, env_rewards)`` of one rollout, the time-limit bootstrap batched (as on CUDA) or per env."""
    with warnings.catch_warnings(), PPO(cfg, build_env_pool(cfg)) as model:
        warnings.simplefilter("ignore")
        model.collector.device_bootstrap = device_bootstrap
        model.start_envs()
        model.collect_rollout()
        return model.storage.rewards.copy(), model.storage.env_rewards.copy()


@pytest.mark.parametrize("num_workers", [0, 2])  # settled after the next step's policy (in-process) or while the workers step
def test_the_batched_time_limit_bootstrap_agrees_with_the_per_env_one(num_workers: int) -> None:
    cfg = PENDULUM.replace(num_workers=num_workers)
    exact, env_rewards = rollout_rewards(cfg, False)
    batched, _ = rollout_rewards(cfg, True)
    cut = exact != env_rewards
    assert cut[199].all() and cut.sum() == cfg.n_envs  # every env cut once, at step 199
    assert np.array_equal(batched[~cut], exact[~cut])  # elsewhere nothing added
    np.testing.assert_allclose(batched[cut], exact[cut], rtol=1e-6)


# ---------------------------------------------------------------------- the update without host work per minibatch

SETTINGS = UpdateSettings(
    learning_rate=3e-4,
    clip_range=0.2,
    clip_range_vf=None,
    n_epochs=4,
    batch_size=64,
    normalize_advantage=True,
    ent_coef=0.01,
    vf_coef=0.5,
    max_grad_norm=0.5,
    target_kl=None,
)


def update_fixture() -> tuple[ActorCritic, torch.optim.Adam, RolloutStorage]:
    """A policy, its Adam and a rollout of 32 x 2 steps whose log-probs and values are the policy's own."""
    torch.manual_seed(0)
    policy = ActorCritic(spaces.Box(-1, 1, (3,), np.float32), spaces.Box(-1, 1, (2,), np.float32))
    s = RolloutStorage(policy.observation_space, policy.action_space, n_steps=32, n_envs=2)
    rng = np.random.default_rng(0)
    s.env_obs["obs"][...] = rng.normal(size=s.env_obs["obs"].shape)
    s.actions[...] = rng.normal(size=s.actions.shape)
    with torch.no_grad():
        values, log_probs, _ = policy.evaluate_actions(
            obs_to_tensor(s.obs["obs"][:32].reshape(64, 3), torch.device("cpu")),
            torch.from_numpy(s.actions.reshape(64, 2).copy()),
        )
    s.values[...], s.log_probs[...] = values.numpy().reshape(32, 2), log_probs.numpy().reshape(32, 2)
    s.advantages[...], s.returns[...] = rng.normal(size=(32, 2)), rng.normal(size=(32, 2))
    return policy, torch.optim.Adam(policy.parameters(), lr=3e-4, eps=1e-5), s


def updated(settings: UpdateSettings, device_loop: bool) -> tuple[list[torch.Tensor], dict[str, float], int, torch.optim.Adam]:
    policy, optimizer, s = update_fixture()
    np.random.seed(0)
    if device_loop:
        logs, n_updates = device_ppo_update(policy, optimizer, s, settings, 7, torch.device("cpu"), torch.Generator())
    else:
        logs, n_updates = ppo_update(policy, optimizer, s, settings, 7, torch.device("cpu"))
    return [p.detach().clone() for p in policy.parameters()], logs, n_updates, optimizer


def test_the_device_loop_agrees_with_sb3s_loop_where_the_order_cannot_matter() -> None:
    """One minibatch per epoch (the permutation only reorders a sum): the same update to float tolerance."""
    exact, exact_logs, n_exact, exact_adam = updated(SETTINGS, False)
    device, logs, n_updates, adam = updated(SETTINGS, True)
    assert n_updates == n_exact == 11 and list(logs) == list(exact_logs)
    for a, b in zip(exact, device):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6)
    assert not all(torch.equal(a, b) for a, b in zip(exact, device))  # fused Adam rounds its own way: really another path
    for key in exact_logs:
        np.testing.assert_allclose(logs[key], exact_logs[key], rtol=2e-5, atol=1e-7, err_msg=key)
    # the counts back where torch's Adam keeps them
    for state, exact_state in zip(adam.state.values(), exact_adam.state.values(), strict=True):
        assert (
            state["step"].device.type == "cpu"
            and state["step"].dtype == torch.float32
            and state["step"] == exact_state["step"] == 4
        )


def test_the_device_loop_draws_its_own_permutations() -> None:
    """Several minibatches: other permutations than sb3's (another path), deterministic for the numpy seed, and close."""
    settings = replace(SETTINGS, batch_size=16)
    first, logs, n_updates, _ = updated(settings, True)
    again, _, _, _ = updated(settings, True)
    exact, exact_logs, _, _ = updated(settings, False)
    assert n_updates == 11 and all(torch.equal(a, b) for a, b in zip(first, again))
    assert not all(torch.allclose(a, b, rtol=1e-5, atol=1e-6) for a, b in zip(first, exact))
    for key in ("train/value_loss", "train/entropy_loss"):
        np.testing.assert_allclose(logs[key], exact_logs[key], rtol=0.05, err_msg=key)


def test_the_device_loops_target_kl_stop_is_sb3s() -> None:
    """A target_kl between the second and third epoch's approx_kl: both loops stop in the third epoch, its step not applied."""
    kls = [updated(replace(SETTINGS, n_epochs=n), False)[1]["train/approx_kl"] for n in (2, 3)]
    assert kls[0] < kls[1]
    settings = replace(SETTINGS, target_kl=(kls[0] + kls[1]) / 2 / 1.5)
    exact, exact_logs, n_exact, _ = updated(settings, False)
    device, logs, n_updates, adam = updated(settings, True)
    assert n_exact == n_updates == 7 + 3
    for a, b in zip(exact, device):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(logs["train/approx_kl"], exact_logs["train/approx_kl"], rtol=1e-4)
    assert all(state["step"] == 2 for state in adam.state.values())  # the stopping minibatch left the counts alone


def test_the_device_loop_refuses_a_non_finite_loss_and_applies_nothing_from_there() -> None:
    policy, optimizer, s = update_fixture()
    before = [p.detach().clone() for p in policy.parameters()]
    s.returns[5, 1] = np.nan
    with pytest.raises(NonFiniteError, match=r"^non-finite loss \(nan\) at update 8, epoch 0, minibatch 0; no optimizer step"):
        device_ppo_update(policy, optimizer, s, SETTINGS, 7, torch.device("cpu"), torch.Generator())
    assert all(torch.equal(a, b) for a, b in zip(before, policy.parameters()))


def test_a_run_with_the_device_loop_learns_deterministically() -> None:
    """The whole trainer with the device loop forced on the CPU: a seed gives the same run twice."""
    cfg = Config(
        env="gym_CartPole-v1",
        n_envs=4,
        n_steps=64,
        batch_size=64,
        n_epochs=4,
        seed=2,
        total_timesteps=3 * 256,
        verbose=0,
        num_workers=0,
    )

    def run() -> list[torch.Tensor]:
        with warnings.catch_warnings(), PPO(cfg, build_env_pool(cfg)) as model:
            warnings.simplefilter("ignore")
            model.index_generator = torch.Generator()
            model.learn()
            assert model.n_updates == 3 * 4
            return [p.detach().clone() for p in model.policy.parameters()]

    assert all(torch.equal(a, b) for a, b in zip(run(), run()))


# ---------------------------------------------------------------------- the policy step as a CUDA graph
def test_a_graphed_step_runs_eagerly_off_cuda_and_says_why_once(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(GraphedStep, "said_why", False)
    policy = ActorCritic(spaces.Box(-1, 1, (3,), np.float32), spaces.Discrete(4))
    obs = torch.randn(8, 3)
    graphed = GraphedStep(PolicyStep(policy, 8))
    torch.manual_seed(5)
    eager = PolicyStep(policy, 8)(obs)
    torch.manual_seed(5)
    first = graphed(obs)
    graphed.refresh()
    graphed(obs)
    assert all(torch.equal(a, b) for a, b in zip(first, eager))  # the step itself
    assert torch.equal(graphed.value(obs), policy.predict_values(obs))  # the step's other calls, as they are
    assert capsys.readouterr().err == (
        "note: --cuda_graphs: the policy runs on cpu, and CUDA graphs need a CUDA device: policy steps run eagerly\n"
    )


@pytest.mark.parametrize(
    "settings, problem",
    [
        (dict(device="cpu"), "cuda_graphs=True: CUDA graphs need a CUDA device, not device='cpu' (use --device cuda or auto)"),
        (
            dict(model="mlp_lstm"),
            "cuda_graphs=True: recurrent policies are not captured (model='mlp_lstm'); drop --cuda_graphs",
        ),
        (
            dict(use_sde=True),
            "cuda_graphs=True: gSDE draws new exploration matrices outside the step, which a captured graph would not see; "
            "drop --use_sde",
        ),
    ],
)
def test_cuda_graphs_are_refused_where_they_cannot_run(settings: dict, problem: str) -> None:
    assert problem in Config(cuda_graphs=True, **settings).problems()
    assert not Config(cuda_graphs=True).problems()  # auto: CUDA where there is one, else eager with the note


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (benchmarks/gpu.sh runs it on a GPU host)")
def test_a_graphed_step_replays_the_eager_step_on_cuda() -> None:
    """GPU only: the captured step's values are the eager critic's, its log-probs those of its own actions, and each
    replay draws new noise."""
    torch.manual_seed(0)
    policy = ActorCritic(spaces.Box(-1, 1, (5,), np.float32), spaces.Box(-1, 1, (2,), np.float32)).cuda()
    graphed = GraphedStep(PolicyStep(policy, 16))
    obs = torch.randn(16, 5, device="cuda")
    actions, values, log_probs = (t.clone() for t in graphed(obs))
    again = graphed(torch.randn(16, 5, device="cuda"))[0].clone()
    assert graphed.graph is not None and not torch.equal(actions, again)
    torch.testing.assert_close(values, policy.predict_values(obs))
    torch.testing.assert_close(log_probs, policy.evaluate_actions(obs, actions)[1].detach())


# ---------------------------------------------------------------------- --device auto from a measured policy step
def test_auto_decides_from_the_measured_step() -> None:
    cuda = torch.device("cuda")
    assert choose_device(True, 32, cpu_us=900.0, cuda_us=300.0, cuda=cuda) == (
        cuda,
        "device: auto picked cuda for this image policy: a policy step of 32 envs took 300 us on cuda, "
        "900 us on the cpu (measured)",
    )
    assert choose_device(True, 8, cpu_us=200.0, cuda_us=300.0, cuda=cuda)[0] == torch.device("cpu")
    # an MLP keeps sb3's bits, whatever the numbers
    device, line = choose_device(False, 256, cpu_us=500.0, cuda_us=150.0, cuda=cuda)
    assert device == torch.device("cpu") and line.startswith(
        "device: auto keeps the cpu for an MLP policy (bit-exact with sb3)"
    )
    assert line.endswith("; --device cuda would be faster per step, not bit-exact")
    assert not choose_device(False, 64, cpu_us=100.0, cuda_us=300.0, cuda=cuda)[1].endswith("not bit-exact")
    assert forced_cuda_line(64, cpu_us=100.0, cuda_us=320.0, cuda=cuda) == (
        "note: device cuda for an MLP policy: a policy step of 64 envs took 320 us there, 100 us on the cpu (measured): "
        "3.2x the cpu's time"
    )


def test_without_cuda_auto_is_the_cpu_as_before_and_the_measurement_runs() -> None:
    cfg = Config(env="gym_CartPole-v1", n_envs=4)
    box, discrete = spaces.Box(-1, 1, (4,), np.float32), spaces.Discrete(2)
    if not torch.cuda.is_available():
        assert measured_device(cfg, box, discrete, 4, False, torch.device("cpu")) == (torch.device("cpu"), "")
    state = torch.get_rng_state()
    # masks included
    assert measured_step_us(cfg.replace(action_masks=True), box, with_action_masks(discrete), 4, torch.device("cpu")) > 0
    assert torch.equal(state, torch.get_rng_state())  # building the measured policy drew nothing from the run's stream
