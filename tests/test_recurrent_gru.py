"""GRU cells (``--rnn_type gru``): torch's ``nn.GRU`` in the LSTM's places, one state per layer.

No library has a GRU RecurrentPPO to compare with, so what it equals is said against torch itself:
the rollout step and the exact update compute, bit for bit (values, samples, states, gradients), what
the ``nn.GRU`` modules give when called as sb3-contrib's ``_process_sequence`` calls its LSTM
(one call without episode starts, else one per time step with ``(1 - episode_start) * h``); the
fast path is that function to float tolerance (``tests/test_recurrent_fast.py``). And a GRU run is
used as an LSTM run is: checkpoints and ``--resume``, ``enjoy``, ``predict`` with its one state, the
ONNX graph (``gru_h`` in and out); ``--export_sb3`` of one is refused (sb3-contrib has LSTMs only).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gymnasium import spaces

import ppo_dict.envs.key_door  # noqa: F401  (registers PPODictKeyDoor-v0)
from ppo_dict.algo.networks.recurrent_policy import RecurrentActorCritic
from ppo_dict.algo.rollout.recurrent_step import RecurrentStep
from ppo_dict.algo.training.recurrent_update import SequenceEvaluate
from ppo_dict.core.config import Config
from ppo_dict.data.recurrent import LstmStates, state_names
from tests.parity.sides import assert_same_value
from tests.test_recurrent_fast import rollout


def torch_sequence(gru: torch.nn.GRU, features: torch.Tensor, h: torch.Tensor, starts: torch.Tensor) -> torch.Tensor:
    """sb3-contrib's ``_process_sequence`` written for a GRU module: sequence-major ``features [n_seq * len, in]``,
    ``h [layers, n_seq, hidden]``, ``starts [n_seq * len]`` -> ``[n_seq * len, hidden]``."""
    n_seq = h.shape[1]
    sequence = features.reshape((n_seq, -1, gru.input_size)).swapaxes(0, 1)
    starts = starts.reshape((n_seq, -1)).swapaxes(0, 1)
    if torch.all(starts == 0.0):
        output, _ = gru(sequence, h)
        return torch.flatten(output.transpose(0, 1), start_dim=0, end_dim=1)
    outputs = []
    for step, start in zip(sequence, starts):
        output, h = gru(step.unsqueeze(dim=0), (1.0 - start).view(1, n_seq, 1) * h)
        outputs.append(output)
    return torch.flatten(torch.cat(outputs).transpose(0, 1), start_dim=0, end_dim=1)


def test_gru_policy_has_one_state_per_layer_in_the_lstm_s_places() -> None:
    policy = RecurrentActorCritic(
        spaces.Box(-1, 1, (5,), np.float32), spaces.Discrete(4), lstm_hidden_size=8, n_lstm_layers=2, rnn_type="gru"
    )
    assert isinstance(policy.lstm_actor, torch.nn.GRU) and isinstance(policy.lstm_critic, torch.nn.GRU)
    assert policy.lstm_actor.weight_ih_l1.shape == (3 * 8, 8) and policy.lstm_actor.num_layers == 2
    states = policy.initial_states(3)
    assert len(states.pi) == len(states.vf) == 1 and states.pi[0].shape == (2, 3, 8)
    assert state_names("gru") == ("hidden_states_pi", "hidden_states_vf")
    with pytest.raises(ValueError, match="rnn_type='rnn': one of lstm, gru"):
        RecurrentActorCritic(spaces.Box(-1, 1, (5,), np.float32), spaces.Discrete(4), rnn_type="rnn")


@pytest.mark.parametrize(
    "critic",
    [{}, dict(shared_lstm=True, enable_critic_lstm=False), dict(enable_critic_lstm=False)],
    ids=["own_gru", "shared", "linear"],
)
def test_gru_rollout_step_is_torch_s_gru(critic: dict) -> None:
    """The rollout's lean step (states zeroed where an episode starts) gives the actions (the same RNG draws),
    values, log-probs and states after the step that ``nn.GRU``'s module call and the policy's heads give, ``==``."""
    torch.manual_seed(0)
    n = 6
    policy = RecurrentActorCritic(
        spaces.Box(-1, 1, (5,), np.float32), spaces.Discrete(4), lstm_hidden_size=8, rnn_type="gru", **critic
    ).eval()
    obs, h_pi, h_vf = torch.randn(n, 5), torch.randn(1, n, 8), torch.randn(1, n, 8)
    starts = np.array([1, 0, 0, 1, 0, 0], dtype=bool)
    keep = RecurrentStep.keep(starts, torch.device("cpu"))
    states = LstmStates((h_pi,), (h_vf,) if policy.lstm_critic is not None else (h_pi,))
    torch.manual_seed(1)
    actions, values, log_probs, after = RecurrentStep(policy, n)(obs, states, keep)
    with torch.no_grad():
        latent_pi, h_pi_after = policy.lstm_actor(obs.unsqueeze(0), keep * h_pi)
        if policy.lstm_critic is not None:
            latent_vf, h_vf_after = policy.lstm_critic(obs.unsqueeze(0), keep * h_vf)
        elif policy.shared_lstm:
            latent_vf, h_vf_after = latent_pi, h_pi_after
        else:
            latent_vf, h_vf_after = policy.critic(obs).unsqueeze(0), h_pi_after
        dist = policy.distribution(policy.mlp_extractor.forward_actor(latent_pi[0]))
        torch.manual_seed(1)
        expected_actions = dist.sample()
        expected_values = policy.value_net(policy.mlp_extractor.forward_critic(latent_vf[0]))
    assert_same_value(expected_actions.reshape(actions.shape).to(actions.dtype), actions, "actions")
    assert_same_value(expected_values, values, "values")
    assert_same_value(dist.log_prob(expected_actions), log_probs, "log-probs")
    assert_same_value((h_pi_after,), tuple(after.pi), "actor states")
    assert_same_value((h_vf_after,), tuple(after.vf), "critic states")


@pytest.mark.parametrize("layers", [1, 2])
def test_gru_exact_update_is_torch_s_gru_with_its_gradients(layers: int) -> None:
    """The exact update's values, log-probs, entropies and every parameter's gradient, minibatch by minibatch (with
    and without episode starts), equal those of ``nn.GRU`` called as sb3-contrib's ``_process_sequence`` calls its
    LSTM (:func:`torch_sequence`), ``==``."""
    n_steps, n_envs = 24, 6
    policy, data = rollout(n_steps, n_envs, 8, layers, seed=layers, rnn_type="gru")
    evaluate = SequenceEvaluate(policy)
    indices = np.roll(np.arange(n_steps * n_envs), -17)
    branches = set()
    for start in range(0, len(indices), 6):  # short minibatches: some without an episode start
        batch = data.take(indices[start : start + 6])
        branches.add(batch.resets)
        results = []
        for ours in (True, False):
            policy.zero_grad()
            if ours:
                values, log_prob, entropy = evaluate(batch, batch.actions)
            else:
                features = policy.features_pair(batch.obs)[0]
                latent_pi = torch_sequence(policy.lstm_actor, features, batch.states.pi[0], batch.episode_starts)
                latent_vf = torch_sequence(policy.lstm_critic, features, batch.states.vf[0], batch.episode_starts)
                dist = policy.distribution(policy.mlp_extractor.forward_actor(latent_pi))
                values = policy.value_net(policy.mlp_extractor.forward_critic(latent_vf))
                log_prob, entropy = dist.log_prob(batch.actions), dist.entropy()
            (values.sum() + log_prob.sum() + entropy.sum()).backward()
            results.append(
                [values.detach(), log_prob.detach(), entropy.detach(), *(p.grad.clone() for p in policy.parameters())]
            )
        names = ["values", "log_prob", "entropy", *(f"d {n}" for n, _ in policy.named_parameters())]
        for name, a, b in zip(names, *results):
            assert_same_value(b, a, name)
    assert branches == {True, False}, "both of _process_sequence's branches"


# ------------------------------------------------------------------------------ a GRU run used as an LSTM run is
GRU_CLI = [
    "--env",
    "gym_PPODictKeyDoor-v0",
    "--gym_packages",
    "ppo_dict.envs.key_door",
    "--model",
    "mlp_lstm",
    "--rnn_type",
    "gru",
    "--action_masks",
    "True",
    "--lstm_hidden_size",
    "16",
    "--num_workers",
    "0",
    "--n_envs",
    "2",
    "--n_steps",
    "32",
    "--batch_size",
    "32",
    "--n_epochs",
    "2",
    "--seed",
    "0",
    "--verbose",
    "0",
    "--plot",
    "False",
]


def test_gru_predict_and_onnx_carry_its_one_state(tmp_path) -> None:
    """``Model.predict`` takes and returns ``(h,)``; the ONNX graph takes ``gru_h`` and ``episode_start`` (then the masks)
    and returns ``gru_h_out``: ppo_dict's deterministic actions and states (onnxruntime)."""
    from ppo_dict.algo.model import Model
    from ppo_dict.algo.networks.recurrent_policy import build_policy
    from ppo_dict.data.masking import with_action_masks
    from ppo_dict.envs.key_door import KeyDoorEnv

    cfg = Config(
        env="gym_PPODictKeyDoor-v0", model="mlp_lstm", rnn_type="gru", action_masks=True, lstm_hidden_size=8, n_lstm_layers=2
    )
    env = KeyDoorEnv()
    torch.manual_seed(0)
    model = Model(
        cfg,
        build_policy(cfg, env.observation_space, with_action_masks(env.action_space)).eval(),
        None,
        env.observation_space,
        env.action_space,
    )
    obs = np.stack([env.reset(seed=i)[0] for i in range(3)])
    actions, state = model.predict(obs, None, np.ones(3, dtype=bool), deterministic=True)
    assert len(state) == 1 and state[0].shape == (2, 3, 8)
    again, state_again = model.predict(obs, state, np.zeros(3, dtype=bool), deterministic=True)
    assert not np.array_equal(state_again[0], state[0])
    with pytest.raises(ValueError, match=r"expected \(h,\) \(a GRU\), each \(n_lstm_layers=2, n_envs=3, lstm_hidden_size=8\)"):
        model.predict(obs, (state[0], state[0]), None)
    onnxruntime = pytest.importorskip("onnxruntime", reason="onnxruntime is not installed (the onnx and test extras)")
    from ppo_dict.interop.onnx import check_onnx, export_onnx

    out = export_onnx("memory", str(tmp_path / "policy.onnx"), model=model)
    session = onnxruntime.InferenceSession(out, providers=["CPUExecutionProvider"])
    assert [i.name for i in session.get_inputs()] == ["obs", "gru_h", "episode_start", "action_masks"]
    assert [o.name for o in session.get_outputs()] == ["action", "gru_h_out"]
    checked = check_onnx(out, model, 128)
    assert checked["mismatched"] == 0 and checked["max_abs_state_diff"] < 1e-5, checked


def test_gru_refusals_before_anything_starts() -> None:
    from ppo_dict.run.checks import sb3_file_problems

    assert Config(model="mlp", rnn_type="gru").problems() == [
        "rnn_type='gru': needs a recurrent model (--model mlp_lstm or cnn_lstm), not model='mlp'"
    ]
    assert Config(model="mlp_lstm", rnn_type="rnn").problems() == ["rnn_type='rnn': must be one of lstm, gru or None"]
    assert sb3_file_problems(Config(model="mlp_lstm", rnn_type="gru", export_sb3="model.zip", trained_agent="agent.zip")) == [
        "export_sb3='model.zip': sb3-contrib cannot load a GRU model (RecurrentPPO has LSTMs only); drop --export_sb3 "
        "(the run's checkpoints and model files hold it for ppo_dict)",
        "rnn_type='gru': a RecurrentPPO zip (trained_agent='agent.zip') holds LSTMs; drop --rnn_type",
    ]
    assert sb3_file_problems(Config(model="mlp_lstm", export_sb3="model.zip")) == []  # an LSTM's zip: RecurrentPPO's


@pytest.mark.slow
def test_a_gru_run_resumes_replays_and_refuses_an_lstm_resume(tmp_path) -> None:
    """What an interrupted GRU run saved (its one state per layer under ``lstm_states``) equals the uninterrupted run's
    checkpoint; resuming is deterministic; ``enjoy`` plays it; resuming it as an LSTM is refused naming rnn_type."""
    import json

    from ppo_dict.core.files import load_model_state
    from tests.test_checkpoint import assert_same, interrupted_runs, without_config
    from tests.cli_here import run_here

    root = interrupted_runs(tmp_path, GRU_CLI, 256, 64)

    def checkpoint(run: str, step: int) -> dict:
        return without_config(load_model_state(str(root / run / "checkpoints" / f"checkpoint_{step:012d}.pt")))

    saved = checkpoint("b_at_128", 128)
    assert sorted(saved["lstm_states"][0]) == ["hidden_states_pi", "hidden_states_vf"]
    assert_same(saved, checkpoint("a", 128))
    assert_same(checkpoint("b", 256), checkpoint("c", 256))
    enjoy = run_here(str(root / "a"), "--episodes", "2", module="ppo_dict.enjoy")
    assert enjoy.returncode == 0, enjoy.stderr
    assert len(json.loads(enjoy.stdout.strip().splitlines()[-1])["lengths"]) == 2
    proc = run_here(
        "--resume",
        str(root / "a" / "checkpoints" / "checkpoint_000000000128.pt"),
        "--rnn_type",
        "lstm",
        "--run_dir",
        str(tmp_path / "x"),
    )
    assert proc.returncode == 2 and "rnn_type" in proc.stderr, proc.stderr
