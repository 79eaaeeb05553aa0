"""Masked recurrent PPO (``--model mlp_lstm --action_masks True``): what it equals, since no library defines it.

* With every action valid, a run equals, bit for bit, sb3-contrib's ``RecurrentPPO`` whose action
  distribution is sb3-contrib's ``MaskableCategoricalDistribution`` given all-true masks (the policy
  class below: the one place the two libraries' arithmetic meet). Against plain ``RecurrentPPO`` it is
  close, not equal: sb3-contrib's masked distribution normalises the logits twice.
* Without memory (one-step sequences), its masked log-probs, entropy and samples are sb3-contrib's
  ``MaskableCategoricalDistribution``'s (MaskablePPO's) on the same logits, bit for bit.
* Sampled actions are always valid; the update's masks are the rollout's, padded with the sequences,
  and its log-probs and entropies equal a direct computation from the stored masks.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from gymnasium import spaces

import ppo_dict.envs.key_door  # noqa: F401  (registers PPODictKeyDoor-v0)
from ppo_dict.algo.networks.recurrent_policy import RecurrentActorCritic
from ppo_dict.algo.rollout.recurrent_step import RecurrentStep
from ppo_dict.algo.training import recurrent_update
from ppo_dict.core.config import Config
from ppo_dict.data.masking import with_action_masks
from ppo_dict.data.recurrent import SequencePlan, env_change
from ppo_dict.run.run_plan import build_env_pool
from tests.parity.sides import (
    Record,
    assert_same_record,
    assert_same_value,
    learn_sb3,
    make_normalized_venv,
    make_recurrent,
    make_ours,
    run_ours,
)

KEY_DOOR = dict(env="gym_PPODictKeyDoor-v0", gym_packages=("ppo_dict.envs.key_door",))
BASE = dict(**KEY_DOOR, model="mlp_lstm", lstm_hidden_size=16, n_epochs=2, num_workers=0, action_masks=True)
#: every action valid (the game's rules unchanged): 3 envs, episodes cut at 6 steps, 144 % 40 = 24 (a short last minibatch)
ALL_VALID = Config(
    **BASE,
    env_kwargs=dict(all_valid=True, episode_length=6),
    n_envs=3,
    n_steps=16,
    batch_size=40,
    seed=0,
    total_timesteps=3 * 48,
)


def maskable_lstm_policy():
    """sb3-contrib's ``RecurrentActorCriticPolicy`` whose action distribution is its masked one for the action space
    (``make_masked_proba_distribution``: MaskableCategorical, MaskableMultiCategorical, MaskableBernoulli), given all-true
    masks wherever the policy builds one (``forward``, ``evaluate_actions``, ``predict``)."""
    from sb3_contrib.common.maskable.distributions import make_masked_proba_distribution
    from sb3_contrib.common.recurrent.policies import RecurrentActorCriticPolicy
    from stable_baselines3.common.distributions import MultiCategoricalDistribution

    class AllValidMaskableLstmPolicy(RecurrentActorCriticPolicy):
        def _build(self, lr_schedule):
            # the action net of the masked distribution, built where sb3's is, with the same RNG draws: Discrete's and
            # MultiDiscrete's are the unmasked ones' Linear(latent, sum of sizes); MultiBinary(n)'s is n two-way
            # categoricals' Linear(latent, 2n) (MaskableBernoulli), not Bernoulli's Linear(latent, n)
            if isinstance(self.action_space, spaces.MultiBinary):
                self.action_dist = MultiCategoricalDistribution([2] * int(self.action_space.n))
            super()._build(lr_schedule)
            self.action_dist = make_masked_proba_distribution(self.action_space)

        def _get_action_dist_from_latent(self, latent_pi):
            dist = self.action_dist.proba_distribution(action_logits=self.action_net(latent_pi))
            dist.apply_masking(np.ones((latent_pi.shape[0], self.action_net.out_features), dtype=bool))
            return dist

    return AllValidMaskableLstmPolicy


def reference_run(cfg: Config, policy_class=None) -> Record:
    """sb3-contrib's RecurrentPPO on ``cfg`` (its policy ``policy_class``: else MlpLstmPolicy)."""
    from sb3_contrib import RecurrentPPO
    from ppo_dict.interop.sb3 import recurrent_ppo_kwargs

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if policy_class is None:
            return learn_sb3(make_recurrent(cfg), cfg.total_timesteps)
        return learn_sb3(
            RecurrentPPO(policy_class, make_normalized_venv(cfg), verbose=0, **recurrent_ppo_kwargs(cfg)), cfg.total_timesteps
        )


def without_masks(record: Record) -> Record:
    """``record`` with each rollout's masks checked all true, then dropped (sb3-contrib's recurrent buffer holds none)."""
    for rollout in record.rollouts:
        assert rollout.pop("action_masks").all()
    return record


@pytest.mark.parametrize("pool_layout", [None, (3, 1, True)], ids=["in_process", "pool_with_main_share"])
def test_all_valid_equals_recurrent_ppo_with_maskable_distribution(pool_layout) -> None:
    """Every rollout (stored LSTM states included), logged value, final parameter, Adam state and RNG state, ``==``."""
    cfg = ALL_VALID
    reference = reference_run(cfg, maskable_lstm_policy())
    pool = None
    if pool_layout is not None:
        workers, per_worker, main_steps = pool_layout
        cfg = cfg.replace(num_workers=workers, envs_per_worker=per_worker, main_steps_envs=main_steps, main_envs=1)
        pool = build_env_pool(cfg)
    assert_same_record(reference, without_masks(run_ours(cfg, pool)))


def test_all_valid_is_close_to_plain_recurrent_ppo_but_not_equal() -> None:
    """Against plain RecurrentPPO (a Categorical normalising the logits once) the first rollout's log-probs differ
    in the last bits only: the masked distribution's second normalisation (logits - logsumexp of normalised logits)."""
    cfg = ALL_VALID.replace(total_timesteps=ALL_VALID.rollout_size)
    plain, ours = reference_run(cfg), without_masks(run_ours(cfg))
    a, b = plain.rollouts[0]["log_probs"], ours.rollouts[0]["log_probs"]
    assert not np.array_equal(a, b)
    np.testing.assert_allclose(a, b, rtol=0, atol=1e-6)


# ------------------------------------------------------------------------------ one-step sequences: MaskablePPO's distribution
@pytest.mark.parametrize(
    "action_space", [spaces.Discrete(5), spaces.MultiDiscrete([3, 4])], ids=["discrete", "multi_discrete"]
)
def test_one_step_masked_distribution_is_maskable_ppo_s(action_space) -> None:
    """Without memory (each sequence one step long) the masked log-probs, entropies and samples (the same torch RNG
    draws) are sb3-contrib's ``make_masked_proba_distribution(space)`` on the same logits and masks, bit for bit,
    in ``forward``, ``evaluate_actions`` and the rollout's lean step alike."""
    from sb3_contrib.common.maskable.distributions import make_masked_proba_distribution

    torch.manual_seed(0)
    n, obs_space = 64, spaces.Box(-1.0, 1.0, (6,), np.float32)
    policy = RecurrentActorCritic(obs_space, with_action_masks(action_space), lstm_hidden_size=8, action_masks=True)
    obs = torch.randn(n, 6)
    dim = int(np.sum(action_space.nvec)) if isinstance(action_space, spaces.MultiDiscrete) else int(action_space.n)
    masks = torch.rand(n, dim) < 0.6
    for sizes in [dim] if isinstance(action_space, spaces.Discrete) else [list(action_space.nvec)]:
        for start, size in zip(np.cumsum([0, *np.atleast_1d(sizes)[:-1]]), np.atleast_1d(sizes)):
            # at least one valid action per categorical
            masks[torch.arange(n), int(start) + torch.randint(int(size), (n,))] = True
    states, starts = policy.initial_states(n), torch.zeros(n)
    with torch.no_grad():
        latent_pi, _, _ = policy.lstm_latents(*policy.features_pair(obs), states, starts)
        logits = policy.action_net(policy.mlp_extractor.forward_actor(latent_pi))

    def reference():
        dist = make_masked_proba_distribution(action_space).proba_distribution(action_logits=logits)
        dist.apply_masking(masks)
        return dist

    torch.manual_seed(1)
    expected_actions = reference().sample()
    torch.manual_seed(1)
    with torch.no_grad():
        actions, _, log_probs, _ = policy(obs, states, starts, action_masks=masks)
    assert_same_value(expected_actions.reshape(actions.shape), actions, "sampled actions")
    assert_same_value(reference().log_prob(expected_actions), log_probs, "log-probs")
    with torch.no_grad():
        _, log_prob, entropy = policy.evaluate_actions(obs, actions, states, starts, action_masks=masks)
    assert_same_value(reference().log_prob(expected_actions), log_prob, "evaluate_actions log-probs")
    assert_same_value(reference().entropy(), entropy, "evaluate_actions entropies")
    step = RecurrentStep(policy, n)
    torch.manual_seed(1)
    lean_actions, _, lean_log_probs, _ = step(obs, states, None, masks=masks)
    assert_same_value(
        expected_actions.reshape(lean_actions.shape),
        lean_actions.reshape(expected_actions.shape).to(expected_actions.dtype),
        "the rollout step's actions",
    )
    assert_same_value(log_probs, lean_log_probs, "the rollout step's log-probs")
    valid = torch.gather(
        masks,
        1,
        (
            actions.reshape(n, -1) + torch.as_tensor(np.cumsum([0, *np.atleast_1d(getattr(action_space, "nvec", [dim]))[:-1]]))
        ).long(),
    )
    assert valid.all()


# -------------------------------------------------------------------- a real masked run: valid actions, the update's masks
@pytest.mark.parametrize("fast_path", [False, True], ids=["exact", "lstm_fast_path"])
def test_actions_valid_and_update_masks_are_the_rollout_s(monkeypatch, fast_path: bool) -> None:
    """KeyDoor with its walls (masks that change from step to step): every stored action is valid under its stored
    mask; every minibatch's padded masks are the rollout's at its transitions (all true on padding), and the update's
    log-probs and entropies there equal sb3-contrib's ``MaskableCategorical`` built directly from the stored masks
    (in exact mode and on the fast path)."""
    from sb3_contrib.common.maskable.distributions import MaskableCategoricalDistribution

    cfg = Config(
        **BASE,
        env_kwargs=dict(episode_length=8),
        n_envs=3,
        n_steps=16,
        batch_size=20,
        seed=3,
        total_timesteps=2 * 48,
        lstm_fast_path=fast_path,
    )
    model = make_ours(cfg)
    seen: list = []  # (rollout index, batch indices, batch, logits, distribution)
    take = recurrent_update.SequenceRollout.take

    def recording_take(self, batch_inds):
        batch = take(self, batch_inds)
        seen.append([len(model.rollouts) - 1, batch_inds.copy(), batch])
        return batch

    distribution = model.policy.distribution

    def recording_distribution(latent_pi, action_masks=None):
        dist = distribution(latent_pi, action_masks)
        if model.policy.training:
            seen[-1] += [model.policy.action_net(latent_pi).detach().clone(), dist]
        return dist

    monkeypatch.setattr(recurrent_update.SequenceRollout, "take", recording_take)
    monkeypatch.setattr(model.policy, "distribution", recording_distribution)
    try:
        model.learn()
    finally:
        model.close()
    assert len(model.rollouts) == 2 and len(seen) == 2 * cfg.n_epochs * 3
    for rollout in model.rollouts:
        masks = rollout["action_masks"].astype(bool)
        actions = rollout["actions"].astype(np.int64)[..., 0]
        assert np.take_along_axis(masks, actions[..., None], axis=2).all(), "an invalid action was sampled"
        assert not masks.all(), "the masks never forbid anything: the test would test nothing"
    change = env_change(cfg.n_steps, cfg.n_envs)
    for k, batch_inds, batch, logits, dist in seen:
        rollout = model.rollouts[k]
        flat = lambda a: a.swapaxes(0, 1).reshape(cfg.n_steps * cfg.n_envs, *a.shape[2:])  # noqa: E731  (env-major)
        plan = SequencePlan(batch_inds, flat(rollout["episode_starts"]), change)
        real = plan.mask > 0
        stored = flat(rollout["action_masks"]).astype(bool)
        assert np.array_equal(batch.action_masks.numpy()[real], stored[plan.gather[real]])
        assert batch.action_masks.numpy()[~real].all()
        expected = MaskableCategoricalDistribution(5).proba_distribution(action_logits=logits[torch.as_tensor(real)])
        expected.apply_masking(stored[plan.gather[real]])
        actions = torch.as_tensor(flat(rollout["actions"])[plan.gather[real], 0])
        assert_same_value(
            expected.log_prob(actions), dist.log_prob(batch.actions).detach()[torch.as_tensor(real)], "update log-probs"
        )
        assert_same_value(expected.entropy(), dist.entropy().detach()[torch.as_tensor(real)], "update entropies")


# ------------------------------------------------------------------------------ using a masked recurrent model
def test_predict_and_the_onnx_graph_take_masks_with_the_states(tmp_path) -> None:
    """``Model.predict(obs, state, episode_start, action_masks=...)`` acts among the valid actions only (a mask allowing
    one action gives that action), carrying the states as without masks; the ONNX graph takes the states, then the masks
    (``action_masks`` last), and gives ppo_dict's deterministic masked actions and states (onnxruntime)."""
    from ppo_dict.algo.model import Model
    from ppo_dict.algo.networks.recurrent_policy import build_policy
    from ppo_dict.envs.key_door import KeyDoorEnv

    cfg = Config(**BASE, n_envs=4, seed=0)
    env = KeyDoorEnv()
    torch.manual_seed(0)
    model = Model(
        cfg,
        build_policy(cfg, env.observation_space, with_action_masks(env.action_space)).eval(),
        None,
        env.observation_space,
        env.action_space,
    )
    obs = np.stack([env.reset(seed=i)[0] for i in range(4)])
    only = np.zeros((4, 5), dtype=bool)
    only[np.arange(4), [0, 2, 3, 4]] = True
    state, starts = None, np.ones(4, dtype=bool)
    for deterministic in (True, False, True):
        actions, state = model.predict(obs, state, starts, deterministic=deterministic, action_masks=only)
        assert actions.tolist() == [0, 2, 3, 4] and state[0].shape == (1, 4, 16)
        starts = np.zeros(4, dtype=bool)
    unmasked, unmasked_state = model.predict(obs, None, np.ones(4, dtype=bool), deterministic=True)
    assert np.array_equal(
        model.predict(obs, None, np.ones(4, dtype=bool), deterministic=True, action_masks=np.ones((4, 5), bool))[1][0],
        unmasked_state[0],
    )  # the masks change the actions only, not the states
    onnxruntime = pytest.importorskip("onnxruntime", reason="onnxruntime is not installed (the onnx and test extras)")
    from ppo_dict.interop.onnx import check_onnx, export_onnx

    out = export_onnx("memory", str(tmp_path / "policy.onnx"), model=model)
    session = onnxruntime.InferenceSession(out, providers=["CPUExecutionProvider"])
    assert [i.name for i in session.get_inputs()] == ["obs", "lstm_h", "lstm_c", "episode_start", "action_masks"]
    checked = check_onnx(out, model, 128)
    assert checked["mismatched"] == 0 and checked["max_abs_state_diff"] < 1e-5, checked


KEY_DOOR_CLI = [
    "--env",
    "gym_PPODictKeyDoor-v0",
    "--gym_packages",
    "ppo_dict.envs.key_door",
    "--model",
    "mlp_lstm",
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


@pytest.mark.slow
def test_a_masked_recurrent_run_resumes_and_replays(tmp_path) -> None:
    """The command line: what an interrupted run saved (LSTM states and masks' run alike) equals the uninterrupted run's
    checkpoint, resuming is deterministic, and ``enjoy`` plays the model with each step's masks and the states carried."""
    import json
    import subprocess
    import sys

    from ppo_dict.core.files import load_model_state
    from tests.conftest import ROOT
    from tests.test_checkpoint import assert_same, interrupted_runs, without_config

    root = interrupted_runs(tmp_path, KEY_DOOR_CLI, 256, 64)

    def checkpoint(run: str, step: int) -> dict:
        return without_config(load_model_state(str(root / run / "checkpoints" / f"checkpoint_{step:012d}.pt")))

    assert_same(checkpoint("b_at_128", 128), checkpoint("a", 128))
    assert_same(checkpoint("b", 256), checkpoint("c", 256))
    enjoy = subprocess.run(
        [sys.executable, "-m", "ppo_dict.enjoy", str(root / "a"), "--episodes", "3"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env={**__import__("os").environ, "PYTHONPATH": ROOT},
    )
    assert enjoy.returncode == 0, enjoy.stderr
    assert len(json.loads(enjoy.stdout.strip().splitlines()[-1])["lengths"]) == 3


def test_refusals_of_masked_recurrent_runs_before_anything_starts() -> None:
    """Box actions with masks (recurrent or not: MaskablePPO's rule) and ``--export_sb3`` (no sb3-contrib class reads
    a masked recurrent zip) are each one message, before any process starts."""
    from ppo_dict.core.errors import ConfigError
    from ppo_dict.run.checks import validate

    with pytest.raises(ConfigError) as err:
        validate(Config(**{**BASE, "env": "gym_Pendulum-v1", "gym_packages": ()}, n_envs=2))
    assert (
        "action_masks=True: invalid-action masks need Discrete, one-dimensional MultiDiscrete or MultiBinary(n) actions"
    ) in str(err.value)
    from ppo_dict.run.checks import sb3_file_problems

    assert sb3_file_problems(Config(**BASE, export_sb3="model.zip")) == [
        "export_sb3='model.zip': sb3-contrib cannot load a masked recurrent model (RecurrentPPO has no masks, "
        "MaskablePPO no LSTM); drop --export_sb3 (the run's checkpoints and model files hold it for ppo_dict)"
    ]


# ------------------------------------------------------------------------------ the Python API
def test_python_api_maskable_recurrent_ppo(tmp_path) -> None:
    """``ppo_dict.MaskableRecurrentPPO``: with every action valid, ``learn`` gives sb3-contrib's RecurrentPPO's parameters
    with the masked distribution (:func:`maskable_lstm_policy`), ``==``; on the walled room (sb3-contrib's ``ActionMasker``
    wrapper, ``get_action_masks``) ``predict(obs, state, episode_start, action_masks=...)`` acts among the valid actions
    and carries the states; ``save`` writes ppo_dict's checkpoint, which ``load`` reads back equal and RecurrentPPO's
    refuses."""
    from sb3_contrib import RecurrentPPO as ContribRecurrentPPO
    from sb3_contrib.common.maskable.utils import get_action_masks
    from sb3_contrib.common.wrappers import ActionMasker
    from stable_baselines3.common.env_util import make_vec_env as sb3_make_vec_env

    from ppo_dict import MaskableRecurrentPPO, RecurrentPPO, make_vec_env
    from ppo_dict.core.errors import CheckpointError
    from ppo_dict.envs.key_door import KeyDoorEnv

    settings = dict(n_steps=16, batch_size=24, n_epochs=2, seed=0, policy_kwargs=dict(lstm_hidden_size=16))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = ContribRecurrentPPO(
            maskable_lstm_policy(),
            sb3_make_vec_env(KeyDoorEnv, 2, seed=0, env_kwargs=dict(all_valid=True)),
            device="cpu",
            **settings,
        ).learn(64)
        ours = MaskableRecurrentPPO(
            "MlpLstmPolicy", make_vec_env(KeyDoorEnv, 2, seed=0, env_kwargs=dict(all_valid=True)), **settings
        ).learn(64)
    assert_same_value(theirs.policy.state_dict(), ours.policy.state_dict(), "parameters after learn")
    ours.close()

    env = make_vec_env(lambda: ActionMasker(KeyDoorEnv(), lambda e: e.valid_actions()), 2, seed=1)
    model = MaskableRecurrentPPO("MlpLstmPolicy", env, **settings).learn(64)
    obs, state, starts = env.reset(), None, np.ones(2, dtype=bool)
    for _ in range(30):
        masks = get_action_masks(env)
        actions, state = model.predict(obs, state, starts, action_masks=masks)
        assert masks[np.arange(2), actions].all() and state[0].shape == (1, 2, 16)
        obs, _, starts, _ = env.step(actions)
    model.save(tmp_path / "model")
    loaded = MaskableRecurrentPPO.load(tmp_path / "model.zip", env=env)
    assert_same_value(model.policy.state_dict(), loaded.policy.state_dict(), "loaded parameters")
    with pytest.raises(
        CheckpointError, match="a masked recurrent model .* MaskableRecurrentPPO.load reads it, not RecurrentPPO.load"
    ):
        RecurrentPPO.load(tmp_path / "model.zip", env=env)
    env.close()
