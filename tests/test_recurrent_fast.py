"""The opt-in whole-sequence fast path (``--lstm_fast_path True``): the same function as the exact
per-step path, to float tolerance, and a flag that says so."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gymnasium import spaces

from ppo_dict.algo.networks.recurrent_policy import RecurrentActorCritic
from ppo_dict.algo.training.recurrent_update import SequenceEvaluate, SequenceRollout, sequence_loss
from ppo_dict.algo.training.update import UpdateLog, UpdateSettings
from ppo_dict.core.config import Config
from ppo_dict.data.recurrent import StateStore
from ppo_dict.data.storage import RolloutStorage

#: forward outputs and gradients of the fast path against the exact path: float32 sums over the
#: same terms in another order (oneDNN's backward over a sequence, or step by step)
RTOL, ATOL = 1e-4, 1e-6


def rollout(
    n_steps: int, n_envs: int, hidden: int, layers: int, seed: int, rnn_type: str = "lstm", **critic: bool
) -> tuple[RecurrentActorCritic, SequenceRollout]:
    """A policy (of ``rnn_type`` cells) and a random rollout with episode starts (about one step in six), its
    stored states random."""
    rng = np.random.default_rng(seed)
    torch.manual_seed(seed)
    obs_space, act_space = spaces.Box(-1, 1, (5,), np.float32), spaces.Box(-1, 1, (2,), np.float32)
    policy = RecurrentActorCritic(
        obs_space, act_space, lstm_hidden_size=hidden, n_lstm_layers=layers, rnn_type=rnn_type, **critic
    )
    storage = RolloutStorage(obs_space, act_space, n_steps, n_envs)
    storage.lstm_states = StateStore(n_steps, (range(n_envs),), layers, hidden, critic_lstm=True, cell=rnn_type)
    storage.obs["obs"][:n_steps] = rng.normal(size=(n_steps, n_envs, 5))
    storage.actions[...] = rng.normal(size=(n_steps, n_envs, 2))
    storage.episode_starts[...] = rng.random((n_steps, n_envs)) < 0.17
    storage.values[...], storage.log_probs[...] = rng.normal(size=(n_steps, n_envs)), rng.normal(size=(n_steps, n_envs)) - 2
    storage.advantages[...], storage.returns[...] = rng.normal(size=(n_steps, n_envs)), rng.normal(size=(n_steps, n_envs))
    for name, arr in storage.lstm_states.arrays[0].items():
        arr[:n_steps] = rng.normal(size=arr[:n_steps].shape) * 0.5
    return policy, SequenceRollout(storage, policy.action_spec.to_training, torch.device("cpu"))


SETTINGS = UpdateSettings(
    learning_rate=1e-3,
    clip_range=0.2,
    clip_range_vf=0.3,
    n_epochs=1,
    batch_size=0,
    normalize_advantage=True,
    ent_coef=0.01,
    vf_coef=0.5,
    max_grad_norm=0.5,
    target_kl=None,
)


@pytest.mark.parametrize(
    "hidden, layers, batch_size, critic",
    [
        (16, 1, 40, {}),
        (64, 1, 128, {}),
        (8, 2, 25, {}),
        (16, 1, 40, dict(shared_lstm=True, enable_critic_lstm=False)),
        (16, 1, 40, dict(enable_critic_lstm=False)),
        (16, 1, 40, dict(rnn_type="gru")),
        (8, 2, 25, dict(rnn_type="gru")),
    ],
)
def test_fast_path_equals_the_exact_path_to_float_tolerance(hidden: int, layers: int, batch_size: int, critic: dict) -> None:
    """Each minibatch of a rotated epoch: values, log-probs, entropies, the loss and every parameter's
    gradient of the whole-sequence path are the exact path's to ``RTOL``/``ATOL`` (the critic's own LSTM,
    a shared LSTM, a Linear critic); and they are not all
    its bits (else this would test nothing: the exact path takes its per-step branch here)."""
    n_steps, n_envs = 24, 6
    policy, data = rollout(n_steps, n_envs, hidden, layers, seed=hidden + layers, **critic)
    indices = np.roll(np.arange(n_steps * n_envs), -17)
    differing = with_resets = 0
    for start in range(0, len(indices), batch_size):
        batch = data.take(indices[start : start + batch_size])
        with_resets += batch.resets
        results = []
        for whole in (False, True):
            policy.zero_grad()
            evaluate = SequenceEvaluate(policy, whole_sequences=whole)
            outputs = evaluate(batch, batch.actions)
            loss, _ = sequence_loss(
                evaluate, batch, SETTINGS.__class__(**{**SETTINGS.__dict__, "batch_size": batch_size}), UpdateLog()
            )
            loss.backward()
            results.append([*(o.detach() for o in outputs), loss.detach(), *(p.grad.clone() for p in policy.parameters())])
        names = ["values", "log_prob", "entropy", "loss", *(f"d {n}" for n, _ in policy.named_parameters())]
        for name, exact, fast in zip(names, *results):
            torch.testing.assert_close(fast, exact, rtol=RTOL, atol=ATOL, msg=lambda m, name=name: f"{name}: {m}")
            differing += not torch.equal(fast, exact)
    assert with_resets >= 2 and differing > 0


def test_fast_path_flag_needs_a_recurrent_model_and_says_what_it_trades(capsys) -> None:
    from ppo_dict.run.checks import validate

    assert Config(model="mlp", lstm_fast_path=True).problems() == [
        "lstm_fast_path=True: needs a recurrent model (--model mlp_lstm or cnn_lstm), not model='mlp'"
    ]
    assert Config(model="mlp_lstm", lstm_fast_path=True).problems() == []
    validate(Config(env="gym_CartPole-v1", model="mlp_lstm", lstm_fast_path=True, n_envs=2, num_workers=0))
    lines = [line for line in capsys.readouterr().err.splitlines() if "lstm_fast_path" in line]
    assert len(lines) == 1 and "not its bits" in lines[0]
    validate(Config(env="gym_CartPole-v1", model="mlp_lstm", n_envs=2, num_workers=0))
    assert "lstm_fast_path" not in capsys.readouterr().err


@pytest.mark.slow
def test_fast_path_training_is_deterministic_and_double_buffers() -> None:
    """Two fast-path runs of a seed give the same numbers, in-process and double-buffered on workers."""
    import warnings

    from ppo_dict.run.run_plan import build_env_pool
    from tests.parity.sides import assert_same_record, run_ours

    base = Config(
        env="gym_CartPole-v1",
        model="mlp_lstm",
        lstm_hidden_size=16,
        n_steps=16,
        batch_size=40,
        n_epochs=2,
        seed=3,
        verbose=0,
        lstm_fast_path=True,
        total_timesteps=2 * 16 * 4,
    )
    for cfg in (base.replace(n_envs=3, num_workers=0), base.replace(n_envs=4, num_workers=2, double_buffer=True)):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            first, second = (run_ours(cfg, build_env_pool(cfg)) for _ in range(2))
        assert_same_record(first, second)
