"""sb3-contrib's recurrent actor-critic (``RecurrentActorCriticPolicy``: MlpLstmPolicy, CnnLstmPolicy,
MultiInputLstmPolicy), and :func:`build_policy`, the policy a config describes.

The layout: features -> LSTM -> the actor's and critic's MLPs -> heads. Built as sb3-contrib builds
it, so the torch RNG is drawn in its order: first everything sb3's ``ActorCriticPolicy`` builds
(its MLPs taking the LSTM's width, then sb3's orthogonal init), then ``lstm_actor`` and the
critic's ``lstm_critic`` or ``critic`` Linear with torch's own initialisation. Parameter order and
names are sb3-contrib's: ``[log_std], features extractor, mlp_extractor, action_net, value_net,
lstm_actor, lstm_critic | critic``.

``rnn_type="gru"`` (``--rnn_type gru``, no library's) puts ``nn.GRU`` cells in the LSTMs' places, under
their names, each with one state per layer (``ppo_dict.data.recurrent.CELL_STATES``).

The LSTMs are run as ``nn.LSTM.forward`` runs them (``_VF.lstm``, the op the module calls), without
the module call around each time step (:func:`lstm_call`). :func:`process_sequence` is
``_process_sequence``: one LSTM call for a batch without episode starts, else one call per time step
with the states zeroed where an episode starts. The two give the same outputs but different
gradients, so the update takes the branch sb3-contrib takes, minibatch by minibatch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Optional, Union

import numpy as np
import torch
from gymnasium import spaces
from torch import _VF, nn

from ppo_dict.algo.networks.policy import ActorCritic, policy_settings
from ppo_dict.data.recurrent import CELL_STATES, LstmStates
from ppo_dict.data.storage import TensorObs
from ppo_dict.envs import channel_first_space

if TYPE_CHECKING:
    from ppo_dict.core.config import Config

#: a cell's states (:data:`~ppo_dict.data.recurrent.CELL_STATES`): an LSTM's ``(h, c)``, a GRU's ``(h,)``
HiddenCell = tuple[torch.Tensor, ...]
LstmCall = Callable[[torch.Tensor, HiddenCell], tuple[torch.Tensor, HiddenCell]]
#: the per-step branch: ``(features [T, n_seq, input], 1 - episode_starts [T, n_seq], the steps that zero states
#: (:func:`steps_zeroing`), states) -> (output [T, n_seq, hidden], states)``
StepLoop = Callable[[torch.Tensor, torch.Tensor, list[bool], HiddenCell], tuple[torch.Tensor, HiddenCell]]


def run_lstm(lstm: nn.RNNBase, x: torch.Tensor, hx: HiddenCell) -> tuple[torch.Tensor, HiddenCell]:
    """``lstm(x, (h, c))`` (a GRU's ``gru(x, h)``) for a time-major 3-d ``x`` and given states: the ``_VF.lstm``
    (``_VF.gru``) call of the module's ``forward`` with its own arguments, without its per-call checks and hooks."""
    if isinstance(lstm, nn.GRU):
        out, h = _VF.gru(
            x,
            hx[0],
            lstm._flat_weights,
            lstm.bias,
            lstm.num_layers,
            float(lstm.dropout),
            lstm.training,
            lstm.bidirectional,
            lstm.batch_first,
        )
        return out, (h,)
    out, h, c = _VF.lstm(
        x,
        hx,
        lstm._flat_weights,
        lstm.bias,
        lstm.num_layers,
        float(lstm.dropout),
        lstm.training,
        lstm.bidirectional,
        lstm.batch_first,
    )
    return out, (h, c)


def lstm_call(lstm: nn.LSTM) -> LstmCall:
    """:func:`run_lstm` of ``lstm``."""
    return lambda x, hx: run_lstm(lstm, x, hx)


def process_sequence(
    features: torch.Tensor,
    states: HiddenCell,
    episode_starts: torch.Tensor,
    call: LstmCall,
    input_size: int,
    resets: Optional[bool] = None,
    loop: Optional[StepLoop] = None,
    zeroing: Optional[list[bool]] = None,
) -> tuple[torch.Tensor, HiddenCell]:
    """sb3-contrib's ``_process_sequence``: ``features [n_seq * len, input_size]`` (sequence-major),
    ``states`` ``[n_layers, n_seq, hidden]`` at each sequence's start, ``episode_starts [n_seq * len]``.
    Returns ``(output [n_seq * len, hidden], states after the last step)``.

    ``resets``: whether any episode start is set, when the caller knows (else read from the tensor,
    as ``th.all(episode_starts == 0.0)``). ``1 - episode_start`` is computed once per step for h and c
    (sb3-contrib computes it twice: the same values, and no gradient flows through it). ``loop``: the
    per-step branch as ATen runs it (:func:`~ppo_dict.algo.networks.lstm_inference.step_loop`), else ``call`` per step.
    ``zeroing``: :func:`steps_zeroing` of ``episode_starts`` when the caller knows it (else read from the tensor).
    """
    n_seq = states[0].shape[1]
    features_sequence = features.reshape((n_seq, -1, input_size)).swapaxes(0, 1)
    if resets is None:
        resets = not bool(torch.all(episode_starts == 0.0))
    if not resets:
        output, states = call(features_sequence, states)
        return torch.flatten(output.transpose(0, 1), start_dim=0, end_dim=1), states
    keep = 1.0 - episode_starts.reshape((n_seq, -1)).swapaxes(0, 1)
    zeroing = steps_zeroing(episode_starts, n_seq) if zeroing is None else zeroing
    if loop is not None:
        output, states = loop(features_sequence, keep, zeroing, states)
        return torch.flatten(output.transpose(0, 1), start_dim=0, end_dim=1), states
    outputs = []
    for step_features, step_keep, zeroes in zip(features_sequence, keep, zeroing):
        if zeroes:
            step_keep = step_keep.view(1, n_seq, 1)
            states = tuple(step_keep * state for state in states)
        hidden, states = call(step_features.unsqueeze(dim=0), states)
        outputs.append(hidden)
    return torch.flatten(torch.cat(outputs).transpose(0, 1), start_dim=0, end_dim=1), states


def steps_zeroing(episode_starts: Union[torch.Tensor, np.ndarray], n_seq: int) -> list[bool]:
    """Per time step of the per-step branch, whether sb3-contrib's ``(1 - episode_start) * state`` can
    change a value: at the first step always (the states given are the caller's tensors), after it
    where some sequence starts an episode. Elsewhere the factor is 1.0 everywhere, and ``1.0 * x`` is
    ``x`` to the bit, forward and in the gradient, so the step takes the previous step's states as they
    are: a sequence of a minibatch starts an episode only at its first step, so an update's loop
    multiplies once per sequence batch, not twice per step and LSTM. ``episode_starts``: ``[n_seq * len]``,
    sequence-major, a tensor or (the update's, known before any tensor is read) a numpy array."""
    zeroing = (episode_starts.reshape((n_seq, -1)) != 0.0).any(0).tolist()  # axis 0: numpy and torch alike
    zeroing[0] = True
    return zeroing


class RecurrentActorCritic(ActorCritic):
    """sb3-contrib's ``RecurrentActorCriticPolicy`` without the optimizer (see the module doc).

    Args (besides :class:`~ppo_dict.algo.networks.policy.ActorCritic`'s): ``lstm_hidden_size``,
    ``n_lstm_layers``, ``shared_lstm`` (the critic reads the actor's LSTM output, detached),
    ``enable_critic_lstm`` (an LSTM of the critic's own; with neither, a ``Linear(features, hidden)``),
    ``lstm_kwargs`` (both LSTMs' further arguments: ``dropout``, ``bias``), ``rnn_type`` (``"lstm"``,
    sb3-contrib's; ``"gru"``: ``nn.GRU`` cells in the same places, under the same module names, built
    with the same arguments; no library has it).
    """

    def __init__(
        self,
        observation_space: spaces.Space,
        action_space: spaces.Space,
        model: str = "mlp",
        lstm_hidden_size: int = 256,
        n_lstm_layers: int = 1,
        shared_lstm: bool = False,
        enable_critic_lstm: bool = True,
        lstm_kwargs: Optional[dict[str, Any]] = None,
        rnn_type: str = "lstm",
        **kwargs: Any,
    ):
        if shared_lstm and enable_critic_lstm:
            raise ValueError("You must choose between shared LSTM, seperate or no LSTM for the critic.")  # sb3-contrib's words
        if shared_lstm and not kwargs.get("share_features_extractor", True):
            raise ValueError("If the features extractor is not shared, the LSTM cannot be shared.")
        self.lstm_output_dim = lstm_hidden_size  # before ActorCritic builds the MLPs on it, as sb3-contrib
        super().__init__(observation_space, action_space, model=model, **kwargs)
        self.shared_lstm, self.enable_critic_lstm = shared_lstm, enable_critic_lstm
        lstm_kwargs = dict(lstm_kwargs or {})  # both LSTMs', as sb3-contrib's
        if rnn_type not in CELL_STATES:
            raise ValueError(f"rnn_type={rnn_type!r}: one of {', '.join(CELL_STATES)}")
        self.rnn_type = rnn_type
        cell = nn.GRU if rnn_type == "gru" else nn.LSTM
        self.lstm_actor = cell(self.features_dim, lstm_hidden_size, num_layers=n_lstm_layers, **lstm_kwargs)
        self.lstm_hidden_state_shape = (n_lstm_layers, 1, lstm_hidden_size)
        self.critic: Optional[nn.Linear] = None
        self.lstm_critic: Optional[nn.LSTM] = None
        if not (shared_lstm or enable_critic_lstm):
            self.critic = nn.Linear(self.features_dim, lstm_hidden_size)
        if enable_critic_lstm:
            self.lstm_critic = cell(self.features_dim, lstm_hidden_size, num_layers=n_lstm_layers, **lstm_kwargs)

    def latent_input_dim(self) -> int:
        return self.lstm_output_dim

    @property
    def critic_has_states(self) -> bool:
        """Whether the critic's LSTM states are its own (else they are the actor's)."""
        return self.lstm_critic is not None

    # ------------------------------------------------------------------ the passes (sb3-contrib's)
    def features_pair(self, obs: TensorObs) -> tuple[torch.Tensor, torch.Tensor]:
        """``(actor features, critic features)``: sb3's ``extract_features`` (one tensor when shared)."""
        features = self._preprocess(obs)
        pi_features = self.pi_features_extractor(features)
        return pi_features, (pi_features if self.share_features_extractor else self.vf_features_extractor(features))

    def lstm_latents(
        self,
        pi_features: torch.Tensor,
        vf_features: torch.Tensor,
        states: LstmStates,
        episode_starts: torch.Tensor,
        resets: Optional[bool] = None,
    ) -> tuple[torch.Tensor, torch.Tensor, LstmStates]:
        """The LSTMs' outputs for the actor and the critic, and the states after them (sb3-contrib ``forward``'s first
        half)."""
        latent_pi, states_pi = process_sequence(
            pi_features, states.pi, episode_starts, lstm_call(self.lstm_actor), self.lstm_actor.input_size, resets
        )
        if self.lstm_critic is not None:
            latent_vf, states_vf = process_sequence(
                vf_features, states.vf, episode_starts, lstm_call(self.lstm_critic), self.lstm_critic.input_size, resets
            )
        elif self.shared_lstm:
            latent_vf, states_vf = latent_pi.detach(), tuple(state.detach() for state in states_pi)
        else:
            latent_vf, states_vf = self.critic(vf_features), states_pi
        return latent_pi, latent_vf, LstmStates(states_pi, states_vf)

    def forward(
        self,
        obs: TensorObs,
        states: LstmStates,
        episode_starts: torch.Tensor,  # type: ignore[override]
        deterministic: bool = False,
        action_masks: Optional[torch.Tensor] = None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, LstmStates]:
        """``(actions, values [B, 1], log_probs [B], states after the step)`` (sb3-contrib ``forward``;
        ``action_masks`` bool ``[B, mask_dim]``: a policy built with masks samples among the valid actions)."""
        latent_pi, latent_vf, states = self.lstm_latents(*self.features_pair(obs), states, episode_starts)
        latent_pi = self.mlp_extractor.forward_actor(latent_pi)
        latent_vf = self.mlp_extractor.forward_critic(latent_vf)
        values = self.value_net(latent_vf)
        dist = self.distribution(latent_pi, action_masks)
        actions = dist.mode() if deterministic else dist.sample()
        log_prob = dist.log_prob(actions)
        return actions.reshape((-1, *self.action_space.shape)), values, log_prob, states

    def evaluate_actions(
        self,
        obs: TensorObs,
        actions: torch.Tensor,
        states: LstmStates,  # type: ignore[override]
        episode_starts: torch.Tensor,
        action_masks: Optional[torch.Tensor] = None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(values [B, 1], log_prob [B], entropy [B])`` of padded sequences (sb3-contrib ``evaluate_actions``;
        ``action_masks``: the padded masks of a masked policy)."""
        latent_pi, latent_vf, _ = self.lstm_latents(*self.features_pair(obs), states, episode_starts)
        dist = self.distribution(self.mlp_extractor.forward_actor(latent_pi), action_masks)
        log_prob = dist.log_prob(actions)
        values = self.value_net(self.mlp_extractor.forward_critic(latent_vf))
        return values, log_prob, dist.entropy()

    def predict_values(
        self,
        obs: TensorObs,
        states: HiddenCell,  # type: ignore[override]
        episode_starts: torch.Tensor,
    ) -> torch.Tensor:
        """Critic only, from the critic's states (sb3-contrib ``predict_values``): ``values [B, 1]``."""
        features = self.vf_features_extractor(self._preprocess(obs))
        if self.lstm_critic is not None:
            latent_vf, _ = process_sequence(
                features, states, episode_starts, lstm_call(self.lstm_critic), self.lstm_critic.input_size
            )
        elif self.shared_lstm:
            latent_vf = process_sequence(
                features, states, episode_starts, lstm_call(self.lstm_actor), self.lstm_actor.input_size
            )[0].detach()
        else:
            latent_vf = self.critic(features)
        return self.value_net(self.mlp_extractor.forward_critic(latent_vf))

    def act(
        self,
        obs: TensorObs,
        states: HiddenCell,
        episode_starts: torch.Tensor,
        deterministic: bool = False,
        action_masks: Optional[torch.Tensor] = None,
    ) -> tuple[torch.Tensor, HiddenCell]:
        """The actor alone (sb3-contrib ``_predict``, what ``predict`` runs): ``(actions [B, *action_shape],
        the actor's states after the step)`` from its states ``[n_layers, B, hidden]`` before it, zeroed where
        ``episode_starts [B]`` is set; ``action_masks`` (masked policies): only valid actions."""
        features = self.pi_features_extractor(self._preprocess(obs))
        latent_pi, states = process_sequence(
            features, states, episode_starts, lstm_call(self.lstm_actor), self.lstm_actor.input_size
        )
        dist = self.distribution(self.mlp_extractor.forward_actor(latent_pi), action_masks)
        actions = dist.mode() if deterministic else dist.sample()
        return actions.reshape((-1, *self.action_space.shape)), states

    # ------------------------------------------------------------------ sb3-contrib's methods for scripts
    # (ppo_dict.algo.networks.policy_surface)
    def get_distribution(
        self,
        obs: TensorObs,
        lstm_states: tuple[torch.Tensor, torch.Tensor],  # type: ignore[override]
        episode_starts: torch.Tensor,
        action_masks: Optional[Any] = None,
    ) -> tuple[Any, tuple[torch.Tensor, ...]]:
        """sb3-contrib's: ``(distribution, the actor's states after the step)`` (masked by ``action_masks``, a masked
        policy)."""
        features = self.pi_features_extractor(self._preprocess(obs))
        latent_pi, lstm_states = process_sequence(
            features, lstm_states, episode_starts, lstm_call(self.lstm_actor), self.lstm_actor.input_size
        )
        masks = (
            None if action_masks is None else torch.as_tensor(np.asarray(action_masks), dtype=torch.bool, device=self.device)
        )
        return self.distribution(self.mlp_extractor.forward_actor(latent_pi), masks), lstm_states

    def _predict(
        self,
        observation: TensorObs,
        lstm_states: tuple[torch.Tensor, torch.Tensor],  # type: ignore[override]
        episode_starts: torch.Tensor,
        deterministic: bool = False,
        action_masks: Optional[Any] = None,
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, ...]]:
        distribution, lstm_states = self.get_distribution(observation, lstm_states, episode_starts, action_masks)
        return distribution.get_actions(deterministic=deterministic), lstm_states

    def predict(
        self,
        observation: Union[np.ndarray, dict[str, np.ndarray]],
        state: Any = None,  # type: ignore[override]
        episode_start: Any = None,
        deterministic: bool = False,
        action_masks: Optional[np.ndarray] = None,
    ) -> tuple[np.ndarray, tuple[np.ndarray, np.ndarray]]:
        """sb3-contrib's ``policy.predict``: ``(actions, (h, c))`` (a GRU's ``(h,)``), the actor's states after the step
        (None: zeros before it); ``action_masks`` (a masked policy): only the valid actions, as
        ``MaskableActorCriticPolicy.predict``."""
        self.set_training_mode(False)
        observation, vectorized = self.obs_to_tensor(observation)
        n_envs = (observation[next(iter(observation))] if isinstance(observation, dict) else observation).shape[0]
        if state is None:
            state = np.concatenate([np.zeros(self.lstm_hidden_state_shape) for _ in range(n_envs)], axis=1)
            state = (state,) * len(CELL_STATES[self.rnn_type])
        if episode_start is None:
            episode_start = np.array([False for _ in range(n_envs)])
        with torch.no_grad():
            states = tuple(torch.tensor(s, dtype=torch.float32, device=self.device) for s in state)
            episode_starts = torch.tensor(episode_start, dtype=torch.float32, device=self.device)
            masks = None if action_masks is None else np.asarray(action_masks, dtype=bool).reshape(n_envs, -1)
            actions, states = self._predict(
                observation, lstm_states=states, episode_starts=episode_starts, deterministic=deterministic, action_masks=masks
            )
            states = tuple(s.cpu().numpy() for s in states)
        return self._actions_out(actions, vectorized), states

    def initial_states(self, n_envs: int, device: Optional[torch.device] = None) -> LstmStates:
        """Zero states for ``n_envs`` envs (sb3-contrib's first rollout, and ``predict`` without a state)."""
        shape = (self.lstm_actor.num_layers, n_envs, self.lstm_actor.hidden_size)
        cell = CELL_STATES[self.rnn_type]
        return LstmStates(
            tuple(torch.zeros(shape, device=device) for _ in cell), tuple(torch.zeros(shape, device=device) for _ in cell)
        )


def build_policy(cfg: Config, observation_space: spaces.Space, action_space: spaces.Space, **classes: Any) -> ActorCritic:
    """The policy a :class:`~ppo_dict.core.config.Config` describes (channel-last images seen as [C, H, W]).
    ``use_sde`` is sb3's PPO argument, not a policy keyword, so it is not in :func:`policy_settings`;
    ``action_masks`` picks sb3-contrib's ``MaskableActorCriticPolicy``, a recurrent model its
    ``RecurrentActorCriticPolicy``. ``classes``: sb3's ``features_extractor_class`` and
    ``features_extractor_kwargs``, an ``activation_fn`` class (sb3's Python API; the config names no class)."""
    settings = {**policy_settings(cfg), **classes}
    if cfg.recurrent:
        return RecurrentActorCritic(
            channel_first_space(observation_space),
            action_space,
            model=cfg.model.removesuffix("_lstm"),
            use_sde=cfg.use_sde,
            action_masks=cfg.action_masks,
            rnn_type=cfg.rnn_type or "lstm",
            **settings,
            **cfg.lstm_settings,
        )
    return ActorCritic(
        channel_first_space(observation_space),
        action_space,
        model=cfg.model,
        use_sde=cfg.use_sde,
        action_masks=cfg.action_masks,
        **settings,
    )
