"""The recurrent update: sb3-contrib's ``RecurrentPPO.train`` on its sequence minibatches, bit for bit.

What differs from PPO's update (``ppo_dict.algo.training.update``), as sb3-contrib does it:

* minibatches are not a permutation: each epoch draws one ``np.random.randint(N)`` and rotates the
  env-major index list there; minibatches are contiguous slices of ``batch_size`` transitions (the
  last may be short), cut into sequences at episode starts, env changes and the minibatch's start,
  padded with zeros (:class:`~ppo_dict.data.recurrent.SequencePlan`: one gather per array here,
  where sb3-contrib makes a tensor per sequence and pads them);
* each sequence starts from the LSTM states stored at its first transition;
* every loss term is a mean over the real transitions (``[mask]``): advantage normalisation (its
  unbiased std, no single-sample guard), the clipped surrogate, the value loss (a masked mean, not
  ``mse_loss``), the entropy, the clip fraction and approx-KL.

The LSTMs take the branch sb3-contrib's ``_process_sequence`` takes for the minibatch (one call
without episode starts, else one call per time step), known here from numpy without a tensor read.

``--lstm_fast_path True`` (``whole_sequences``) gives up those bits for speed, as sb3-contrib's PR 118
does: every sequence already starts at an episode start (the plan splits there), so zeroing the
states of the sequences whose first step starts an episode and running each LSTM once over the
padded ``[max_len, n_seq]`` batch computes the same function as the per-step loop. The forward
values are the loop's; the gradients differ in rounding only (oneDNN's backward over a sequence sums
in another order), and the losses and masks are the same.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import numpy as np
import torch

from ppo_dict.algo.networks.lstm_inference import step_loop
from ppo_dict.algo.networks.recurrent_policy import (
    HiddenCell,
    LstmCall,
    RecurrentActorCritic,
    StepLoop,
    lstm_call,
    process_sequence,
    steps_zeroing,
)
from ppo_dict.algo.rollout.rollout_step import layers_of, run
from ppo_dict.algo.training.update import (
    GradientStep,
    Masked,
    Minibatch,
    UpdateLog,
    UpdateSettings,
    evaluated_loss,
    logged_loss,
    run_epochs,
    update_logs,
)
from ppo_dict.data.recurrent import LstmStates, SequencePlan, env_change, rotated_indices
from ppo_dict.data.storage import RolloutStorage, obs_to_tensor


@dataclass
class SequenceBatch(Minibatch):
    """One padded minibatch: :class:`~ppo_dict.algo.training.update.Minibatch`'s rows, ``[n_seq * max_len, ...]``,
    sequence-major (sb3-contrib's ``RecurrentRolloutBufferSamples``; with ``--action_masks``, padding rows allow every
    action), and what its sequences need."""

    states: LstmStates = field(kw_only=True)
    episode_starts: torch.Tensor = field(kw_only=True)
    mask: torch.Tensor = field(kw_only=True)  # bool: a transition, not padding
    resets: bool = field(kw_only=True)  # an episode starts somewhere in the minibatch: the LSTMs step one time step at a time
    # per time step, whether the per-step branch multiplies the states (steps_zeroing)
    zeroing: list[bool] = field(kw_only=True)


class SequenceRollout:
    """The flattened rollout as tensors, each with one zero row appended (the padding), made once per update."""

    def __init__(self, storage: RolloutStorage, cast, device: torch.device):
        data = storage.flat_samples()
        self.data, self.cast, self.device = data, cast, device
        self.episode_starts = storage.episode_starts.swapaxes(0, 1).reshape(-1)  # env-major, as sb3's swap_and_flatten
        self.padded_starts = np.append(self.episode_starts, 0.0)  # index N: the padding row's
        self.env_change = env_change(storage.n_steps, storage.n_envs)
        obs = obs_to_tensor(data["observations"], device)
        self.obs = {k: _padded(v) for k, v in obs.items()} if isinstance(obs, dict) else _padded(obs)
        columns = {
            "actions": data["actions"].astype(np.float32, copy=False),
            "values": data["values"],
            "log_probs": data["log_probs"],
            "advantages": data["advantages"],
            "returns": data["returns"],
            "episode_starts": self.episode_starts,
        }
        self.columns = {
            k: _padded(torch.as_tensor(v.reshape(len(v), -1) if k == "actions" else v.reshape(-1), device=device))
            for k, v in columns.items()
        }
        store = storage.lstm_states
        self.state_names = (store.pi_names, store.vf_names)
        self.states = {name: torch.as_tensor(store.flat(name), device=device) for name in store.names}
        # the rollout's masks, padded with the sequences (a padding row allows every action: finite, and outside every mean)
        masks = data.get("action_masks")
        self.masks = (
            None
            if masks is None
            else torch.cat(
                [torch.as_tensor(masks, device=device), torch.ones((1, masks.shape[1]), dtype=torch.bool, device=device)]
            )
        )

    def take(self, batch_inds: np.ndarray) -> SequenceBatch:
        plan = SequencePlan(batch_inds, self.episode_starts, self.env_change)
        gather = torch.as_tensor(plan.gather, device=self.device)
        rows = lambda t: torch.index_select(t, 0, gather)  # noqa: E731  (a fresh contiguous copy, as pad_sequence gives)
        obs = {k: rows(v) for k, v in self.obs.items()} if isinstance(self.obs, dict) else rows(self.obs)
        c = self.columns
        starts = torch.as_tensor(plan.starts, device=self.device)
        # (n_seq, n_layers, hidden) -> (n_layers, n_seq, hidden), fresh and contiguous as sb3-contrib's
        # to_torch(...).contiguous()
        first = {name: torch.index_select(arr, 0, starts).transpose(0, 1).contiguous() for name, arr in self.states.items()}
        states = LstmStates(*(tuple(first[name] for name in names) for names in self.state_names))
        mask = torch.as_tensor(plan.mask, device=self.device) > 1e-8
        return SequenceBatch(
            obs,
            self.cast(rows(c["actions"])),
            rows(c["values"]),
            rows(c["log_probs"]),
            rows(c["advantages"]),
            rows(c["returns"]),
            None if self.masks is None else rows(self.masks),
            states=states,
            episode_starts=rows(c["episode_starts"]),
            mask=mask,
            resets=bool(self.episode_starts[batch_inds].any()),
            zeroing=steps_zeroing(self.padded_starts[plan.gather], plan.n_seq),
        )


def _padded(tensor: torch.Tensor) -> torch.Tensor:
    """``tensor`` with one zero row after its last: the row a padded position gathers."""
    return torch.cat([tensor, tensor.new_zeros((1, *tensor.shape[1:]))])


class SequenceEvaluate:
    """``policy.evaluate_actions`` on a padded minibatch without the module calls (the MLPs' layers'
    ``F.linear``, the LSTMs' ``_VF.lstm``): the same operations in sb3-contrib's order, so the same
    autograd graph and gradients (tests/test_recurrent.py compares them)."""

    def __init__(self, policy: RecurrentActorCritic, whole_sequences: bool = False):
        self.policy, self.whole_sequences = policy, whole_sequences
        self.actor, self.critic = (
            lstm_call(policy.lstm_actor),
            None if policy.lstm_critic is None else lstm_call(policy.lstm_critic),
        )
        self.actor_loop, self.critic_loop = (
            step_loop(policy.lstm_actor),
            None if policy.lstm_critic is None else step_loop(policy.lstm_critic),
        )
        self.pi, self.vf = layers_of(policy.mlp_extractor.policy_net), layers_of(policy.mlp_extractor.value_net)

    def __call__(self, batch: SequenceBatch, actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        p, input_size = self.policy, self.policy.lstm_actor.input_size
        pi_features, vf_features = p.features_pair(batch.obs)

        def sequence(features: torch.Tensor, states: HiddenCell, call: LstmCall, loop: Optional[StepLoop]) -> torch.Tensor:
            if self.whole_sequences:
                return whole_sequence(features, states, batch.episode_starts, call, input_size, batch.resets)
            return process_sequence(
                features, states, batch.episode_starts, call, input_size, batch.resets, loop, batch.zeroing
            )[0]

        latent_pi = sequence(pi_features, batch.states.pi, self.actor, self.actor_loop)
        if self.critic is not None:
            latent_vf = sequence(vf_features, batch.states.vf, self.critic, self.critic_loop)
        elif p.shared_lstm:
            latent_vf = latent_pi.detach()
        else:
            latent_vf = p.critic.forward(vf_features)
        latent_pi, latent_vf = run(self.pi, latent_pi), run(self.vf, latent_vf)
        dist = p.distribution(latent_pi, batch.action_masks)  # masked: each real row's masks are its rollout step's
        log_prob = dist.log_prob(actions)
        values = p.value_net.forward(latent_vf)
        return values, log_prob, dist.entropy()


def whole_sequence(
    features: torch.Tensor,
    states: HiddenCell,
    episode_starts: torch.Tensor,
    call: LstmCall,
    input_size: int,
    resets: bool = True,
) -> torch.Tensor:
    """The fast path's :func:`~ppo_dict.algo.networks.recurrent_policy.process_sequence` for sequences that start
    at their only episode start (a :class:`~ppo_dict.data.recurrent.SequencePlan`'s): the states of the
    sequences whose first step starts an episode zeroed, then one call over every time step; the output."""
    n_seq = states[0].shape[1]
    if resets:
        keep = (1.0 - episode_starts.reshape((n_seq, -1))[:, 0]).view(1, n_seq, 1)
        states = tuple(keep * state for state in states)
    output, _ = call(features.reshape((n_seq, -1, input_size)).swapaxes(0, 1), states)
    return torch.flatten(output.transpose(0, 1), start_dim=0, end_dim=1)


def sequence_loss(
    evaluate: SequenceEvaluate, batch: SequenceBatch, settings: UpdateSettings, log: UpdateLog
) -> tuple[torch.Tensor, np.ndarray]:
    """``RecurrentPPO.train``'s loss of one minibatch: PPO's (:func:`~ppo_dict.algo.training.update.evaluated_loss`),
    each term a mean over the real transitions (:class:`~ppo_dict.algo.training.update.Masked`); records its parts in
    ``log``. Returns ``(loss, approx_kl)``."""
    return logged_loss(evaluated_loss(evaluate(batch, batch.actions), batch, settings, Masked(batch.mask)), log)


def recurrent_update(
    policy: RecurrentActorCritic,
    optimizer: torch.optim.Optimizer,
    storage: RolloutStorage,
    settings: UpdateSettings,
    n_updates: int,
    device: torch.device,
    splits: Optional[list[int]] = None,
    whole_sequences: bool = False,
) -> tuple[dict[str, float], int]:
    """``n_epochs`` passes of sb3-contrib's sequence minibatches (``RecurrentPPO.train``); returns the
    ``train/*`` logs and the updated epoch counter, as :func:`~ppo_dict.algo.training.update.ppo_update`.
    ``splits``: each epoch's rotation, instead of numpy's draws (tests); ``whole_sequences``: the fast
    path (:func:`whole_sequence`, ``--lstm_fast_path``)."""
    policy.train()
    for group in optimizer.param_groups:
        group["lr"] = settings.learning_rate
    rollout = SequenceRollout(storage, policy.action_spec.to_training, device)
    size, evaluate, log = storage.n_steps * storage.n_envs, SequenceEvaluate(policy, whole_sequences), UpdateLog()
    n_updates = run_epochs(
        GradientStep(policy, optimizer),
        settings,
        size,
        n_updates,
        log,
        lambda epoch: rotated_indices(size, None if splits is None else splits[epoch]),
        lambda indices: sequence_loss(evaluate, rollout.take(indices), settings, log),
    )
    return update_logs(policy, log, rollout.data, settings, n_updates), n_updates
