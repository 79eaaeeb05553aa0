"""A policy of the script's own class, trained by ppo_dict's trainer through the class's own methods.

sb3's documentation's "advanced custom policy" subclasses ``ActorCriticPolicy`` (a network of its own
from ``_build_mlp_extractor``, a ``forward`` of its own...). ppo_dict cannot build such a class's
networks itself, and its lean rollout step and update evaluation (``ppo_dict.algo.rollout.rollout_step``,
``ppo_dict.algo.training.update.GaussianEvaluate``) are its own networks' arithmetic, so the script's object
is built as sb3 builds it (by the API) and the trainer calls its methods, as sb3's loop calls them:
``forward`` once per rollout step over every env in the main process (the central policy step),
``predict_values`` for the time-limit bootstrap and the last values, ``evaluate_actions`` per
minibatch, ``set_training_mode``, ``reset_noise`` at gSDE's cadence. Where the class keeps sb3's
methods these are sb3's, where it overrides them they are its own: sb3's numbers either way, with
the rest of ppo_dict (the worker pool, the shared-memory storage, GAE, the update loop) around them.

:class:`OwnMethodsPolicy` is what the trainer holds: the script's object (``module``: its parameters,
state dict and attributes, which it forwards) with what the trainer asks of an
:class:`~ppo_dict.algo.networks.policy.ActorCritic` (its action space's spec, the passes' signatures).
"""

from __future__ import annotations

from typing import Any, Optional

import torch
from torch import nn

from ppo_dict.data.actions import ActionSpec, action_spec
from ppo_dict.data.storage import TensorObs


class OwnMethodsPolicy:
    """``module`` (an sb3 ``ActorCriticPolicy`` or sb3-contrib ``MaskableActorCriticPolicy`` of the script's class) for
    the trainer; ``use_sde``: sb3's algorithm argument; ``masked``: MaskablePPO's (the passes take the envs' masks)."""

    #: the rollout step runs :meth:`__call__` itself (``ppo_dict.algo.rollout.rollout_step.PolicyStep``)
    own_forward = True

    def __init__(self, module: nn.Module, use_sde: bool = False, masked: bool = False):
        self.module, self.use_sde, self.masked = module, use_sde, masked
        # the env-side conversion (Box: clipped, or rescaled when squashed) and the training-side cast: the space's
        self.action_spec: ActionSpec = action_spec(
            module.action_space, use_sde, masked, squash_output=bool(getattr(module, "squash_output", False))
        )

    def __getattr__(self, name: str) -> Any:
        module = self.__dict__.get("module")
        if module is None:  # a copy being built
            raise AttributeError(name)
        return getattr(module, name)  # parameters(), state_dict(), value_net, log_std, observation_space...

    def __call__(
        self, obs: TensorObs, deterministic: bool = False, action_masks: Optional[torch.Tensor] = None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """sb3's ``self.policy(obs_tensor)`` of ``collect_rollouts`` (sb3-contrib's with ``action_masks``)."""
        if self.masked:
            return self.module(obs, deterministic=deterministic, action_masks=action_masks)
        return self.module(obs, deterministic=deterministic)

    forward = __call__

    def evaluate_actions(
        self, obs: TensorObs, actions: torch.Tensor, action_masks: Optional[torch.Tensor] = None
    ) -> tuple[torch.Tensor, torch.Tensor, Optional[torch.Tensor]]:
        if self.masked:
            return self.module.evaluate_actions(obs, actions, action_masks=action_masks)
        return self.module.evaluate_actions(obs, actions)

    def predict_values(self, obs: TensorObs) -> torch.Tensor:
        return self.module.predict_values(obs)

    def train(self, mode: bool = True) -> "OwnMethodsPolicy":
        self.module.set_training_mode(mode)  # sb3's loop switches modes through it
        return self

    def eval(self) -> "OwnMethodsPolicy":
        return self.train(False)

    def explore(self, n_envs: int, t: Optional[int] = None, sample_freq: int = -1) -> None:
        """sb3's ``collect_rollouts``: ``reset_noise(n_envs)`` at a rollout's start and every ``sample_freq`` steps,
        with gSDE."""
        if self.use_sde and (t is None or (sample_freq > 0 and t % sample_freq == 0)):
            self.module.reset_noise(n_envs)


def policy_object(policy: Any) -> Any:
    """The policy a script holds: the script's own object for :class:`OwnMethodsPolicy`, else the policy itself."""
    return policy.module if isinstance(policy, OwnMethodsPolicy) else policy
