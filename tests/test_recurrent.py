"""Recurrent policies (``--model mlp_lstm | cnn_lstm``), part by part against sb3-contrib 2.9.2: the LSTM
sequence pass and its gradients, the rollout step, the sequence minibatches; the config's checks; the
layout of what reaches the LSTM. Whole runs against ``RecurrentPPO``: ``tests/parity/test_recurrent_parity.py``."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from gymnasium import spaces
from sb3_contrib.common.recurrent.buffers import RecurrentDictRolloutBuffer, RecurrentRolloutBuffer
from sb3_contrib.common.recurrent.policies import RecurrentActorCriticPolicy
from sb3_contrib.common.recurrent.type_aliases import RNNStates

from ppo_dict.algo.networks import recurrent_policy
from ppo_dict.algo.networks.recurrent_policy import RecurrentActorCritic, lstm_call, process_sequence
from ppo_dict.algo.rollout.recurrent_step import RecurrentStep
from ppo_dict.algo.training.recurrent_update import SequenceRollout
from ppo_dict.core.config import Config
from ppo_dict.data.recurrent import STATE_NAMES, LstmStates, StateStore, rotated_indices
from ppo_dict.data.storage import RolloutStorage
from tests.parity.sides import assert_same_value
from tests.parity.test_alignment import misplaced


def starts_pattern(n_seq: int, length: int, resets: bool) -> torch.Tensor:
    starts = torch.zeros(n_seq * length)
    if resets:
        starts[[1, length + 3, n_seq * length - 1]] = 1.0
    return starts


@pytest.mark.parametrize("resets", [False, True])
@pytest.mark.parametrize("n_layers", [1, 2])
def test_process_sequence_and_its_gradients_equal_sb3_contribs(resets: bool, n_layers: int) -> None:
    """The lean ``_VF.lstm`` call and :func:`process_sequence` (one call, or one per step with resets), and
    the update's per-step loop of ATen's oneDNN calls (``step_loop``): sb3-contrib's ``_process_sequence``
    on ``nn.LSTM``, the same outputs, states and gradients."""
    from ppo_dict.algo.networks.lstm_inference import step_loop

    torch.manual_seed(0)
    lstm = torch.nn.LSTM(5, 8, num_layers=n_layers)
    n_seq, length = 3, 6
    features0, h0, c0 = torch.randn(n_seq * length, 5), torch.randn(n_layers, n_seq, 8), torch.randn(n_layers, n_seq, 8)
    starts = starts_pattern(n_seq, length, resets)
    results = []
    assert step_loop(lstm) is not None or not torch.backends.mkldnn.is_available()
    for ours in (False, True, "loop"):
        lstm.zero_grad()
        features, h, c = (t.clone().requires_grad_(True) for t in (features0, h0, c0))
        if ours:
            out, (hy, cy) = process_sequence(
                features, (h, c), starts, lstm_call(lstm), 5, resets, step_loop(lstm) if ours == "loop" else None
            )
        else:
            out, (hy, cy) = RecurrentActorCriticPolicy._process_sequence(features, (h, c), starts, lstm)
        (out.sin().sum() + hy.cos().sum() + (cy * cy).sum()).backward()
        results.append([out, hy, cy, features.grad, h.grad, c.grad, *(p.grad for p in lstm.parameters())])
    for other in results[1:]:
        names = ("output", "h", "c", "d features", "d h0", "d c0", *(f"d {name}" for name, _ in lstm.named_parameters()))
        assert len(names) == len(other)
        for what, a, b in zip(names, results[0], other):
            assert_same_value(a.detach(), b.detach(), what)


def test_the_two_branches_give_the_same_outputs() -> None:
    """Why the update follows sb3-contrib's branch minibatch by minibatch: the per-step loop without any reset
    computes the one call's outputs (so the branch is invisible in the forward), by another autograd graph."""
    torch.manual_seed(1)
    lstm = torch.nn.LSTM(4, 16)
    features, states = torch.randn(4 * 10, 4), (torch.randn(1, 4, 16), torch.randn(1, 4, 16))
    no_starts = torch.zeros(40)
    one_call = process_sequence(features, states, no_starts, lstm_call(lstm), 4, resets=False)
    loop = process_sequence(features, states, no_starts, lstm_call(lstm), 4, resets=True)
    assert_same_value(one_call[0].detach(), loop[0].detach(), "outputs")
    assert one_call[0].grad_fn.next_functions != loop[0].grad_fn.next_functions


SPACES = {
    "discrete": spaces.Discrete(3),
    "box": spaces.Box(-1, 1, (2,), np.float32),
    "multi_binary": spaces.MultiBinary(3),
    "multi_discrete": spaces.MultiDiscrete([2, 3]),
}


@pytest.mark.parametrize("critic", ["lstm", "shared", "linear"])
@pytest.mark.parametrize("action", list(SPACES))
def test_rollout_step_equals_sb3_contribs_forward(action: str, critic: str) -> None:
    """:class:`RecurrentStep` (the rollout's step, episode starts among the envs) and ``forward`` equal
    sb3-contrib's ``forward``: actions, values, log-probs, the states after the step, the torch RNG after it."""
    obs_space, act_space = spaces.Box(-1, 1, (4,), np.float32), SPACES[action]
    kwargs = {
        "lstm": {},
        "shared": dict(shared_lstm=True, enable_critic_lstm=False),
        "linear": dict(enable_critic_lstm=False),
    }[critic]
    torch.manual_seed(2)
    sb3 = RecurrentActorCriticPolicy(obs_space, act_space, lambda _: 3e-4, lstm_hidden_size=8, n_lstm_layers=2, **kwargs)
    torch.manual_seed(2)
    ours = RecurrentActorCritic(obs_space, act_space, lstm_hidden_size=8, n_lstm_layers=2, **kwargs)
    sb3.eval(), ours.eval()
    n_envs = 5
    obs = torch.randn(n_envs, 4)
    states = [torch.randn(2, n_envs, 8) for _ in range(4)]
    starts = np.array([False, True, False, False, True])
    outputs, rngs = [], []
    for side in ("sb3", "forward", "step"):
        torch.manual_seed(9)
        with torch.no_grad():
            if side == "step":
                out = RecurrentStep(ours, n_envs)(
                    obs, LstmStates((states[0], states[1]), (states[2], states[3])), RecurrentStep.keep(starts, obs.device)
                )
            else:
                policy, kind = (sb3, RNNStates) if side == "sb3" else (ours, LstmStates)
                out = policy(
                    obs, kind((states[0], states[1]), (states[2], states[3])), torch.tensor(starts, dtype=torch.float32)
                )
        outputs.append([out[0], out[1], out[2], *out[3].pi, *out[3].vf])
        rngs.append(torch.get_rng_state())
    for other, rng in zip(outputs[1:], rngs[1:]):
        for what, a, b in zip(("actions", "values", "log_probs", "h pi", "c pi", "h vf", "c vf"), outputs[0], other):
            assert_same_value(a, b, what)
        assert torch.equal(rngs[0], rng)


def fill_buffers(dict_obs: bool, n_steps: int, n_envs: int, seed: int):
    """sb3-contrib's buffer and ours, filled with the same random rollout (episode starts included)."""
    rng = np.random.default_rng(seed)
    box = spaces.Box(-1, 1, (3,), np.float32)
    obs_space = spaces.Dict({"a": box, "b": spaces.Box(0, 255, (2,), np.uint8)}) if dict_obs else box
    act_space, n_layers, hidden = spaces.Box(-1, 1, (2,), np.float32), 2, 4
    buffer_cls = RecurrentDictRolloutBuffer if dict_obs else RecurrentRolloutBuffer
    sb3 = buffer_cls(n_steps, obs_space, act_space, (n_steps, n_layers, n_envs, hidden), "cpu", n_envs=n_envs)
    storage = RolloutStorage(obs_space, act_space, n_steps, n_envs)
    storage.lstm_states = StateStore(n_steps, (range(n_envs),), n_layers, hidden, critic_lstm=True)
    for t in range(n_steps):
        obs = {
            k: rng.uniform(0, 9, (n_envs, *sub.shape)).astype(sub.dtype)
            for k, sub in (obs_space.spaces.items() if dict_obs else [("obs", box)])
        }
        actions, rewards = rng.normal(size=(n_envs, 2)).astype(np.float32), rng.normal(size=n_envs).astype(np.float32)
        starts, values, log_probs = (
            rng.random(n_envs) < 0.2,
            rng.normal(size=n_envs).astype(np.float32),
            rng.normal(size=n_envs).astype(np.float32),
        )
        states = [rng.normal(size=(n_layers, n_envs, hidden)).astype(np.float32) for _ in STATE_NAMES]
        sb3.add(
            obs if dict_obs else obs["obs"],
            actions,
            rewards,
            starts,
            torch.as_tensor(values),
            torch.as_tensor(log_probs),
            lstm_states=RNNStates(
                (torch.as_tensor(states[0]), torch.as_tensor(states[1])),
                (torch.as_tensor(states[2]), torch.as_tensor(states[3])),
            ),
        )
        for key, value in obs.items():
            storage.obs[key][t] = value
        storage.actions[t], storage.values[t], storage.log_probs[t], storage.episode_starts[t] = (
            actions,
            values,
            log_probs,
            starts,
        )
        for name, state in zip(STATE_NAMES, states):
            storage.lstm_states.arrays[0][name][t] = state
    sb3.compute_returns_and_advantage(
        torch.as_tensor(rng.normal(size=n_envs).astype(np.float32)), np.zeros(n_envs, dtype=bool)
    )
    storage.advantages[...], storage.returns[...] = sb3.advantages, sb3.returns
    return sb3, storage


@pytest.mark.parametrize("dict_obs", [False, True])
@pytest.mark.parametrize("batch_size", [1, 7, 16, 40])
def test_sequence_minibatches_equal_sb3_contribs_buffer(dict_obs: bool, batch_size: int) -> None:
    """Rotation, sequence cuts, padding, masks, initial states: every tensor of every minibatch of two epochs
    equals what ``RecurrentRolloutBuffer.get`` (``RecurrentDictRolloutBuffer``) hands out, laid out as a fresh tensor."""
    sb3, storage = fill_buffers(dict_obs, n_steps=10, n_envs=3, seed=batch_size)
    ours = SequenceRollout(storage, lambda a: a, torch.device("cpu"))
    for epoch in range(2):
        np.random.seed(epoch)
        theirs = list(sb3.get(batch_size))
        np.random.seed(epoch)
        indices = rotated_indices(30)
        for i, start in enumerate(range(0, 30, batch_size)):
            batch, expected = ours.take(indices[start : start + batch_size]), theirs[i]
            assert_same_value(expected.observations, batch.obs, f"batch {i} observations")
            for name, mine in (
                ("actions", batch.actions),
                ("old_values", batch.old_values),
                ("old_log_prob", batch.old_log_prob),
                ("advantages", batch.advantages),
                ("returns", batch.returns),
                ("episode_starts", batch.episode_starts),
            ):
                assert_same_value(getattr(expected, name), mine, f"batch {i} {name}")
            assert_same_value(expected.mask > 1e-8, batch.mask, f"batch {i} mask")
            assert_same_value(tuple(expected.lstm_states), tuple(batch.states), f"batch {i} states")
            assert batch.resets == (not bool(torch.all(expected.episode_starts == 0.0)))
            assert list(misplaced("minibatch", batch.obs)) == [] and list(misplaced("states", batch.states.pi[0])) == []


def test_config_defaults_and_refusals() -> None:
    """RecurrentPPO's n_steps and batch_size unless given; LSTM flags only with a recurrent model; sb3-contrib's refusals."""
    assert (Config(model="mlp_lstm").n_steps, Config(model="mlp_lstm").batch_size) == (128, 128)
    assert (Config().n_steps, Config().batch_size, Config(model="cnn_lstm", n_steps=64).n_steps) == (2048, 64, 64)
    assert Config(model="mlp", lstm_hidden_size=64, shared_lstm=False).problems() == [
        "lstm_hidden_size=64: needs a recurrent model (--model mlp_lstm or cnn_lstm), not model='mlp'",
        "shared_lstm=False: needs a recurrent model (--model mlp_lstm or cnn_lstm), not model='mlp'",
    ]
    problems = Config(model="mlp_lstm", shared_lstm=True, share_features_extractor=False, action_masks=True).problems()
    assert [p.split(":")[0] for p in problems] == ["shared_lstm=True", "shared_lstm=True"]
    # masked recurrent PPO (tests/test_recurrent_masking.py)
    assert Config(model="mlp_lstm", action_masks=True).problems() == []
    assert Config(model="mlp_lstm", shared_lstm=True, enable_critic_lstm=False).problems() == []
    assert Config(model="mlp_lstm", n_envs=1, n_steps=129, batch_size=64, num_workers=0).problems() == [
        "batch_size=64: with a recurrent model and normalize_advantage, the last minibatch of each epoch holds one sample "
        "(n_steps*n_envs=129), whose advantage std is NaN in RecurrentPPO (it has no single-sample guard): "
        "choose a batch_size that leaves no single sample"
    ]


def test_single_step_sequences_warn_and_bad_flags_stop_before_any_process(tmp_path) -> None:
    import subprocess
    import sys

    from ppo_dict.run.checks import validate

    with pytest.warns(UserWarning, match="every training sequence has one step"):
        validate(Config(env="gym_CartPole-v1", model="mlp_lstm", n_steps=1, batch_size=4, n_envs=4, num_workers=0))
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "ppo_dict.main_ppo",
            "--env",
            "gym_CartPole-v1",
            "--model",
            "mlp",
            "--n_lstm_layers",
            "2",
            "--shared_lstm",
            "--run_dir",
            str(tmp_path / "run"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 2
    assert (
        "n_lstm_layers=2: needs a recurrent model" in out.stderr and "shared_lstm=True: needs a recurrent model" in out.stderr
    )
    assert not (tmp_path / "run").exists()
    # what stage 1 refused, a recurrent run now does (tests/test_recurrent_use.py)
    assert Config(model="mlp_lstm", eval_freq=100, video=True, export_sb3="x.zip", resume="auto", run_dir="r").problems() == []


@pytest.mark.parametrize("num_workers, n_envs", [(0, 3), (1, 5)])
def test_what_reaches_the_lstm_is_laid_out_as_a_fresh_tensor(
    monkeypatch: pytest.MonkeyPatch, num_workers: int, n_envs: int
) -> None:
    """Every state handed to an LSTM (rollout rows, bootstrap columns, minibatch starts, reset states, each kernel
    call of the update's per-step loop) and every input's memory start at a 64-byte boundary, dense, as sb3-contrib's
    fresh tensors (an odd env count, a worker pool)."""
    from ppo_dict.algo.ppo import PPO
    from ppo_dict.run.run_plan import build_env_pool

    seen: list[str] = []
    calls = []
    run_lstm = recurrent_policy.run_lstm

    def check(x, hx):
        calls.append(1)
        seen.extend(misplaced("lstm state", hx[0]))
        seen.extend(misplaced("lstm state", hx[1]))
        if x.untyped_storage().data_ptr() % 64:
            seen.append(f"lstm input at {x.untyped_storage().data_ptr() % 64}")

    def recording(lstm, x, hx):
        check(x, hx)
        return run_lstm(lstm, x, hx)

    monkeypatch.setattr(recurrent_policy, "run_lstm", recording)
    from ppo_dict.algo.networks import lstm_inference
    from ppo_dict.algo.training import recurrent_update

    layer_call, in_loop = lstm_inference.rnn_layer, []

    def recording_loop(lstm):  # the update's per-step branch (lstm_inference.step_loop): its states, and every kernel call's
        loop = lstm_inference.step_loop(lstm)

        def recorded(features, keep, zeroing, hx):
            check(features, hx)
            in_loop.append(True)
            try:
                return loop(features, keep, zeroing, hx)
            finally:
                in_loop.pop()

        return None if loop is None else recorded

    def recording_layer(x, w_ih, w_hh, b_ih, b_hh, h, c, *args):
        if in_loop:
            check(x, (h, c))
        return layer_call(x, w_ih, w_hh, b_ih, b_hh, h, c, *args)

    monkeypatch.setattr(recurrent_update, "step_loop", recording_loop)
    monkeypatch.setattr(lstm_inference, "rnn_layer", recording_layer)
    cfg = Config(
        env="gym_PPODictToy-v0",
        gym_packages=("ppo_dict.envs.toy",),
        env_kwargs=dict(observation="box", action="box", episode_length=3),
        model="mlp_lstm",
        lstm_hidden_size=6,
        n_lstm_layers=2,
        n_envs=n_envs,
        num_workers=num_workers,
        n_steps=4,
        batch_size=7,
        n_epochs=1,
        seed=0,
        total_timesteps=8 * n_envs,
        verbose=0,
        plot=False,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = PPO(cfg, build_env_pool(cfg))
        try:
            model.learn()
        finally:
            model.close()
    assert len(calls) >= 8 and seen == []


DOUBLE_BUFFERED = Config(
    env="gym_CartPole-v1",
    model="mlp_lstm",
    lstm_hidden_size=32,
    n_envs=8,
    num_workers=2,
    double_buffer=True,
    n_steps=32,
    batch_size=128,
    n_epochs=4,
    learning_rate=1e-3,
    seed=0,
    verbose=0,
)


def test_double_buffered_recurrent_rollouts_are_deterministic() -> None:
    """Each half keeps its own LSTM states (``StateStore`` groups): two runs of a seed are the same, every
    buffer, state, log and parameter, and every env's states move."""
    from ppo_dict.run.run_plan import build_env_pool
    from tests.parity.sides import assert_same_record, run_ours

    cfg = DOUBLE_BUFFERED.replace(total_timesteps=3 * 256)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        first, second = (run_ours(cfg, build_env_pool(cfg)) for _ in range(2))
    assert_same_record(first, second)
    assert (np.abs(first.rollouts[-1]["hidden_states_pi"]).max(axis=(0, 1, 3)) > 0.01).all()


@pytest.mark.slow
def test_double_buffered_recurrent_training_learns() -> None:
    """CartPole with an LSTM, double-buffered: the mean return of the last 100 episodes grows several-fold in 30k steps."""
    from ppo_dict.run.run_plan import build_env_pool
    from tests.parity.sides import run_ours

    cfg = DOUBLE_BUFFERED.replace(total_timesteps=30_000)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rec = run_ours(cfg, build_env_pool(cfg))
    returns = [d["rollout/ep_rew_mean"] for d in rec.dumps if "rollout/ep_rew_mean" in d]
    assert returns[-1] > 3 * returns[0] and returns[-1] > 100, returns[::10]


@pytest.mark.parametrize("layers, hidden, n_envs", [(1, 64, 8), (1, 256, 5), (2, 16, 1), (1, 32, 32)])
def test_packed_lstm_equals_torch_lstm(layers: int, hidden: int, n_envs: int) -> None:
    """The rollout's LSTM call with weights laid out for oneDNN once (``PackedLstm``): ``torch.lstm``'s bits, on the
    oneDNN path itself where torch takes it (here), after the weights change too."""
    from ppo_dict.algo.networks.lstm_inference import PackedLstm, takes_onednn_path

    torch.manual_seed(layers + hidden)
    lstm = torch.nn.LSTM(11, hidden, num_layers=layers).eval()
    packed = PackedLstm(lstm, n_envs)
    for _ in range(2):
        packed.refresh()
        assert packed.enabled == takes_onednn_path(lstm) == torch.backends.mkldnn.is_available()
        x, hx = torch.randn(1, n_envs, 11), (torch.randn(layers, n_envs, hidden), torch.randn(layers, n_envs, hidden))
        with torch.inference_mode():
            ours, theirs = packed(x, hx), recurrent_policy.run_lstm(lstm, x, hx)
        assert_same_value((ours[0], *ours[1]), (theirs[0], *theirs[1]), "output, h, c")
        with torch.no_grad():
            for p in lstm.parameters():
                p.add_(0.01 * torch.randn_like(p))  # an update
