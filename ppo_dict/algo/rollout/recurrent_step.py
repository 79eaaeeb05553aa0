"""The recurrent policy's work in one rollout step, and its critic for the bootstrap and the last values.

:class:`RecurrentStep` is :class:`~ppo_dict.algo.rollout.rollout_step.PolicyStep` with sb3-contrib's LSTMs
between the features and the MLPs: every env's sequence is one step long, so each LSTM is one
``_VF.lstm`` call on ``[1, n_envs, features]`` with the stored states, multiplied by
``1 - episode_start`` first when any env starts an episode (sb3-contrib's ``_process_sequence``
takes its loop branch then: the same one call per LSTM, on the zeroed states). The states after
the step are returned for the caller to store. Values, the sampler and the RNG draws are
:class:`PolicyStep`'s, so every float is sb3-contrib's ``forward``'s. The LSTM calls take their
weights laid out for oneDNN once per rollout (:class:`~ppo_dict.algo.networks.lstm_inference.PackedLstm`:
the same kernel on the same values).
"""

from __future__ import annotations

from typing import Optional

import numpy as np
import torch

from ppo_dict.algo.networks.lstm_inference import PackedLstm
from ppo_dict.algo.networks.recurrent_policy import HiddenCell, RecurrentActorCritic, process_sequence
from ppo_dict.algo.rollout.rollout_step import Out, PolicyStep, RankRows, linear, run
from ppo_dict.data.recurrent import LstmStates
from ppo_dict.data.storage import TensorObs


class RecurrentStep(PolicyStep):
    """Samples ``(actions, values, log_probs, states after the step)`` for ``n_envs`` envs from their
    states before it (see the module doc)."""

    policy: RecurrentActorCritic

    def __init__(self, policy: RecurrentActorCritic, n_envs: int, ranks: Optional[RankRows] = None):
        # the LSTMs with their weights laid out for oneDNN once per rollout (ppo_dict.algo.networks.lstm_inference)
        self._packed = [PackedLstm(lstm, n_envs) for lstm in (policy.lstm_actor, policy.lstm_critic) if lstm is not None]
        self._actor = self._packed[0]
        self._critic_lstm = self._packed[1] if policy.lstm_critic is not None else None
        super().__init__(policy, n_envs, ranks)
        self._critic_linear = None if policy.critic is None else linear(policy.critic)
        self.input_size = policy.lstm_actor.input_size

    @torch.no_grad()
    def refresh(self) -> None:
        """:meth:`PolicyStep.refresh`, and the LSTMs' weights laid out anew (once per rollout: the update changed them)."""
        super().refresh()
        for lstm in self._packed:
            lstm.refresh()

    def features(self, obs: TensorObs) -> tuple[torch.Tensor, torch.Tensor]:
        """``(actor features, critic features)`` (the same tensor when the extractor is shared)."""
        if self._features is None:
            return self.policy.features_pair(obs)
        features = self._features(self.policy._preprocess(obs))
        return features, features

    @staticmethod
    def keep(episode_starts: np.ndarray, device: torch.device) -> Optional[torch.Tensor]:
        """``(1 - episode_start).view(1, n, 1)`` as float32 (sb3-contrib's ``th.tensor(starts, dtype=float32)``),
        or None when no env starts an episode (its one-call branch: the states as they are)."""
        if not episode_starts.any():
            return None
        return (1.0 - torch.as_tensor(episode_starts, dtype=torch.float32, device=device)).view(1, len(episode_starts), 1)

    def _one_step(
        self, call, features: torch.Tensor, states: HiddenCell, keep: Optional[torch.Tensor]
    ) -> tuple[torch.Tensor, HiddenCell]:
        hx = states if keep is None else tuple(keep * state for state in states)
        output, states = call(features.unsqueeze(0), hx)
        return output[0], states

    @torch.inference_mode()
    def __call__(
        self,
        obs: TensorObs,
        states: LstmStates,
        keep: Optional[torch.Tensor],  # type: ignore[override]
        out: Optional[Out] = None,
        rows: Optional[slice] = None,
        masks: Optional[torch.Tensor] = None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, LstmStates]:
        """One step; ``states``: each env's before it; ``keep``: :meth:`keep` of the episode starts;
        ``out``, ``rows`` and ``masks`` (bool ``[n_envs, mask_dim]``, a masked policy's) as :class:`PolicyStep`'s."""
        pi_features, vf_features = self.features(obs)
        latent_pi, states_pi = self._one_step(self._actor, pi_features, states.pi, keep)
        if self._critic_lstm is not None:
            latent_vf, states_vf = self._one_step(self._critic_lstm, vf_features, states.vf, keep)
        elif self.policy.shared_lstm:
            latent_vf, states_vf = latent_pi, states_pi
        else:
            latent_vf, states_vf = self._critic_linear(vf_features), states_pi
        latent_pi, latent_vf = run(self._pi, latent_pi), run(self._vf, latent_vf)
        if out is None:
            values = self._value_head(latent_vf)
        else:
            values = torch.addmm(self._value_bias, latent_vf, self._value_weight.t(), out=out[1].view(-1, 1))
        head = self._action_head(latent_pi)
        if self.sampler is None:  # sb3's distribution itself (unmasked MultiBinary): one bernoulli
            dist = self.policy.action_spec.distribution(head, getattr(self.policy, "log_std", None), latent_pi, masks)
            actions = dist.sample()
            log_probs = dist.log_prob(actions)
            if out is not None:
                out[0].copy_(actions.reshape(out[0].shape))
                out[2].copy_(log_probs)
        else:
            actions, log_probs = self.sampler(head, latent_pi, None if out is None else (out[0], out[2]), rows, masks)
        return actions, values, log_probs, LstmStates(states_pi, states_vf)

    def recurrent_critic(self, obs: TensorObs, states: HiddenCell, episode_starts: torch.Tensor, resets: bool) -> torch.Tensor:
        """sb3-contrib's ``predict_values(obs, states, episode_starts)``, ``[B, 1]``: the time-limit bootstrap
        (one env, its critic states after the step, no start) and the last values (every env, ``dones``)."""
        features = self.features(obs)[1]
        if self._critic_lstm is not None:
            latent_vf = process_sequence(features, states, episode_starts, self._critic_lstm, self.input_size, resets)[0]
        elif self.policy.shared_lstm:
            latent_vf = process_sequence(features, states, episode_starts, self._actor, self.input_size, resets)[0]
        else:
            latent_vf = self._critic_linear(features)
        return self._value_head(run(self._vf, latent_vf))
