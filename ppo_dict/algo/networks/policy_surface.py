"""sb3's policy methods on ppo_dict's policies: what inference and export code calls on ``model.policy``.

Scripts written for sb3 call ``model.policy.predict(obs)``, ``obs_to_tensor``, ``get_distribution``,
``extract_features``, ``set_training_mode``, ``scale_action``... ppo_dict's networks are sb3's modules
(the same names, the same parameters), and these are sb3's methods on them, expression for expression
(sb3's ``BaseModel``, ``BasePolicy`` and ``ActorCriticPolicy``; sb3-contrib's ``MaskableActorCriticPolicy``
with ``action_masks``; ``ppo_dict.algo.networks.recurrent_policy``: its ``RecurrentActorCriticPolicy``'s), so they give
sb3's numbers; ``evaluate_actions`` and ``predict_values`` are the policies' own, with sb3's signatures.
The observation checks (``is_vectorized_observation``, ``maybe_transpose``) are sb3's own functions,
imported where they are called: this surface is for scripts written for sb3, which have it.
"""

from __future__ import annotations

import copy
import warnings
from typing import Any, Optional, Union

import numpy as np
import torch
from gymnasium import spaces
from torch import nn

from ppo_dict.data.storage import TensorObs, obs_to_tensor
from ppo_dict.envs import is_image_space

#: sb3's words for a reset's ``(obs, info)`` given to ``predict`` (its BasePolicy.predict)
GYM_TUPLE = (
    "You have passed a tuple to the predict() function instead of a Numpy array or a Dict. You are probably mixing "
    "Gym API with SB3 VecEnv API: `obs, info = env.reset()` (Gym) vs `obs = vec_env.reset()` (SB3 VecEnv). See "
    "related issue https://github.com/DLR-RM/stable-baselines3/issues/1694 and documentation for more information: "
    "https://stable-baselines3.readthedocs.io/en/master/guide/vec_envs.html#vecenv-api-vs-gym-api"
)


class PolicySurface:
    """sb3's ``ActorCriticPolicy`` methods for :class:`~ppo_dict.algo.networks.policy.ActorCritic` (a mixin before
    ``nn.Module``)."""

    observation_space: spaces.Space
    action_space: spaces.Space
    pi_features_extractor: nn.Module
    vf_features_extractor: nn.Module
    features_extractor: nn.Module
    share_features_extractor: bool

    @property
    def device(self) -> torch.device:
        """sb3's: the parameters' device (the CPU for a policy without any)."""
        for param in self.parameters():  # type: ignore[attr-defined]
            return param.device
        return torch.device("cpu")

    @property
    def squash_output(self) -> bool:
        """Whether actions are squashed into [-1, 1] (gSDE with ``squash_output``) and rescaled for the env."""
        return bool(getattr(self.action_spec, "squash", False))  # type: ignore[attr-defined]

    def set_training_mode(self, mode: bool) -> None:
        """sb3's: training or evaluation mode (dropout, batch normalisation)."""
        self.train(mode)  # type: ignore[attr-defined]

    def is_vectorized_observation(self, observation: Union[np.ndarray, dict[str, np.ndarray]]) -> bool:
        """sb3's: whether ``observation`` is a batch (images channel-first or channel-last)."""
        from stable_baselines3.common.preprocessing import maybe_transpose
        from stable_baselines3.common.utils import is_vectorized_observation

        if isinstance(observation, dict):
            return any(
                is_vectorized_observation(maybe_transpose(obs, self.observation_space[key]), self.observation_space[key])
                for key, obs in observation.items()
            )
        return is_vectorized_observation(maybe_transpose(observation, self.observation_space), self.observation_space)

    def obs_to_tensor(self, observation: Union[np.ndarray, dict[str, np.ndarray]]) -> tuple[TensorObs, bool]:
        """sb3's: ``(tensor [B, *obs_shape] or a dict of them, vectorized)`` of one observation or a batch, as
        the env gives it (a channel-last image transposed, as sb3's ``maybe_transpose``)."""
        from stable_baselines3.common.preprocessing import maybe_transpose
        from stable_baselines3.common.utils import is_vectorized_observation

        vectorized = False
        if isinstance(observation, dict):
            if not isinstance(self.observation_space, spaces.Dict):
                raise ValueError(f"The observation provided is a dict but the obs space is {self.observation_space}")
            observation = copy.deepcopy(observation)  # sb3's: a VecFrameStack's dict would otherwise become tensors
            for key, obs in observation.items():
                space = self.observation_space.spaces[key]
                obs_ = maybe_transpose(obs, space) if is_image_space(space) else np.array(obs)
                vectorized = vectorized or is_vectorized_observation(obs_, space)
                observation[key] = obs_.reshape((-1, *space.shape))
        else:
            observation = (
                maybe_transpose(observation, self.observation_space)
                if is_image_space(self.observation_space)
                else np.array(observation)
            )
            vectorized = is_vectorized_observation(observation, self.observation_space)
            observation = observation.reshape((-1, *self.observation_space.shape))
        return obs_to_tensor(observation, self.device), vectorized

    def extract_features(
        self, obs: TensorObs, features_extractor: Optional[nn.Module] = None
    ) -> Union[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        """sb3's: the preprocessed observation through the features extractor, ``(actor's, critic's)`` when not shared."""
        preprocessed = self._preprocess(obs)  # type: ignore[attr-defined]
        if self.share_features_extractor:
            return (self.features_extractor if features_extractor is None else features_extractor)(preprocessed)
        if features_extractor is not None:
            warnings.warn(
                "Provided features_extractor will be ignored because the features extractor is not shared.", UserWarning
            )
        return self.pi_features_extractor(preprocessed), self.vf_features_extractor(preprocessed)

    def get_distribution(self, obs: TensorObs, action_masks: Optional[Any] = None) -> Any:
        """sb3's: the action distribution at ``obs`` (``action_masks``: sb3-contrib's, a policy built with masks)."""
        features = self.pi_features_extractor(self._preprocess(obs))  # type: ignore[attr-defined]
        latent_pi = self.mlp_extractor.forward_actor(features)  # type: ignore[attr-defined]
        return self.distribution(latent_pi, action_masks)  # type: ignore[attr-defined]

    def _predict(
        self, observation: TensorObs, deterministic: bool = False, action_masks: Optional[Any] = None
    ) -> torch.Tensor:
        return self.get_distribution(observation, action_masks).get_actions(deterministic=deterministic)

    def predict(
        self,
        observation: Union[np.ndarray, dict[str, np.ndarray]],
        state: Any = None,
        episode_start: Any = None,
        deterministic: bool = False,
        action_masks: Optional[np.ndarray] = None,
    ) -> tuple[np.ndarray, Any]:
        """sb3's ``policy.predict``: ``(actions, state)`` for one observation or a batch (sb3-contrib's ``action_masks``)."""
        self.set_training_mode(False)
        if isinstance(observation, tuple) and len(observation) == 2 and isinstance(observation[1], dict):
            raise ValueError(GYM_TUPLE)
        obs_tensor, vectorized = self.obs_to_tensor(observation)
        with torch.no_grad():
            actions = self._predict(obs_tensor, deterministic=deterministic, action_masks=action_masks)
        return self._actions_out(actions, vectorized), state

    def _actions_out(self, actions: torch.Tensor, vectorized: bool) -> np.ndarray:
        """sb3's end of ``predict``: reshaped to the space, a Box's rescaled (squashed) or clipped, one env's unbatched."""
        actions = actions.cpu().numpy().reshape((-1, *self.action_space.shape))
        if isinstance(self.action_space, spaces.Box):
            actions = (
                self.unscale_action(actions)
                if self.squash_output
                else np.clip(actions, self.action_space.low, self.action_space.high)
            )
        return actions if vectorized else actions.squeeze(axis=0)

    def scale_action(self, action: np.ndarray) -> np.ndarray:
        """sb3's: from [low, high] to [-1, 1]."""
        low, high = self._bounds("scale")
        return 2.0 * ((action - low) / (high - low)) - 1.0

    def unscale_action(self, scaled_action: np.ndarray) -> np.ndarray:
        """sb3's: from [-1, 1] to [low, high]."""
        low, high = self._bounds("unscale")
        return low + (0.5 * (scaled_action + 1.0) * (high - low))

    def _bounds(self, what: str) -> tuple[np.ndarray, np.ndarray]:
        if not isinstance(self.action_space, spaces.Box):
            raise TypeError(f"Trying to {what} an action using an action space that is not a Box(): {self.action_space}")
        return self.action_space.low, self.action_space.high
