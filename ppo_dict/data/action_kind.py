"""What every kind of action space answers: :class:`ActionSpec`, with the answers most kinds share.

The kinds (Box, with or without gSDE; Discrete, MultiDiscrete, MultiBinary, with or without sb3-contrib's masks) and
the factory that picks one for a space are ``ppo_dict.data.actions``, whose doc lists what a spec holds.
"""

from __future__ import annotations

from typing import Optional, Union

import numpy as np
import torch
from gymnasium import spaces
from torch import nn

from ppo_dict.data.distributions import Distribution, GSDENoise, MaskedDistribution
from ppo_dict.data.lean_sampling import LeanSampler


class ActionSpec:
    """One kind of action space, and everything done with its actions (see ``ppo_dict.data.actions``' doc).

    The base class is what most kinds share: stored by their shape in their dtype, handed to the
    env and to the loss as sampled, no log-std parameter, sampled through ``ActorCritic.forward``.
    """

    #: sb3-contrib's maskable distribution: the passes take the env's masks
    masked = False
    #: ``ppo_dict.algo.training.update.GaussianEvaluate`` scores the actions (a diagonal Gaussian, no gSDE)
    lean_evaluate = False

    def __init__(self, space: spaces.Space):
        self.space = space
        self.gsde: Optional[GSDENoise] = None  # gSDE's exploration matrices, made by build()

    def problem(self) -> str:
        """Why sb3 refuses this space (``""`` when it takes it), in sb3's words."""
        return ""

    @property
    def layout(self) -> tuple[tuple[int, ...], np.dtype, int]:
        """``(shape sent to one env, dtype, action_dim stored per transition)`` as sb3 (``get_action_dim``)."""
        return tuple(self.space.shape), np.dtype(self.space.dtype), int(np.prod(self.space.shape))

    @property
    def n_outputs(self) -> int:
        """The action net's outputs."""
        raise NotImplementedError

    @property
    def mask_sizes(self) -> Optional[list[int]]:
        """The categoricals an invalid-action mask covers, in order (their sum is sb3-contrib's
        ``mask_dims``); None: sb3-contrib's MaskablePPO takes no masks for this space."""
        return None

    def build(self, latent_dim: int, log_std_init: float) -> tuple[nn.Linear, Optional[nn.Parameter]]:
        """``(action_net, log_std or None)``, created as sb3's ``proba_distribution_net`` creates them
        (torch RNG: the Linear's init, then with gSDE the first exploration matrices)."""
        return nn.Linear(latent_dim, self.n_outputs), None

    def distribution(
        self,
        head: torch.Tensor,
        log_std: Optional[torch.Tensor],
        latent_pi: torch.Tensor,
        masks: Optional[torch.Tensor] = None,
    ) -> Union[Distribution, MaskedDistribution]:
        """The distribution of the action net's output ``head`` [B, n_outputs] (sb3 ``_get_action_dist_from_latent``);
        ``masks`` (bool ``[B, n_outputs]``, masked kinds only): sb3-contrib's ``apply_masking``."""
        if masks is not None:
            raise ValueError("action masks given to a policy built without action_masks=True")
        return self.unmasked(head, log_std, latent_pi)

    def unmasked(self, head: torch.Tensor, log_std: Optional[torch.Tensor], latent_pi: torch.Tensor) -> Distribution:
        raise NotImplementedError

    def explore(self, log_std: Optional[torch.Tensor], n_envs: int, t: Optional[int] = None, sample_freq: int = -1) -> None:
        """sb3's exploration-noise schedule during a rollout: at its start (``t`` None) and before
        rollout step ``t`` (``sample_freq``: sb3's ``sde_sample_freq``). Nothing, for most kinds."""

    def sampler(self, n_envs: int, device: torch.device, dtype: torch.dtype) -> Optional[LeanSampler]:
        """The rollout step's lean sampling for ``n_envs`` envs (``dtype``: the action net's), or None:
        the step runs ``ActorCritic.forward`` itself."""
        return None

    def to_env(self, actions: np.ndarray, out: Optional[np.ndarray] = None) -> np.ndarray:
        """The actions ``[B, ...]`` the envs get (into ``out`` when given): the sampled ones."""
        if out is None:
            return actions
        out[...] = actions
        return out

    def env_module(self) -> nn.Module:
        """:meth:`to_env` as a module of an exported graph (torch ops)."""
        return nn.Identity()

    def to_training(self, actions: torch.Tensor) -> torch.Tensor:
        """A minibatch's stored actions (float32 ``[B, action_dim]``, as sb3's buffer holds them) as the
        distribution scores them (sb3 ``PPO.train``)."""
        return actions
