"""Actor-critic networks, built exactly as sb3's ``ActorCriticPolicy`` builds them.

Bit-exactness with sb3 depends on three things this module reproduces (sb3's ``policies.py``):
modules are created in sb3's order (each creation draws from the torch RNG), the orthogonal
re-initialisation visits modules in sb3's order, and ``parameters()`` yields ``log_std`` first.
Submodule names are sb3's too, so a ``state_dict`` loads into an sb3 policy unchanged.
"""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING, Any, Optional, Sequence, Union

import numpy as np
import torch
from gymnasium import spaces
from torch import nn
from torch.nn import functional as F

from ppo_dict.algo.networks.policy_surface import PolicySurface
from ppo_dict.core.parse import NetArch
from ppo_dict.data.actions import action_spec
from ppo_dict.data.distributions import Distribution, GSDENoise
from ppo_dict.data.storage import TensorObs
from ppo_dict.envs import is_image_space, ppo_observation_problem

if TYPE_CHECKING:
    from ppo_dict.core.config import Config

ACTIVATION_CLASSES: dict[str, type[nn.Module]] = {
    "tanh": nn.Tanh,
    "relu": nn.ReLU,
    "elu": nn.ELU,
    "leaky_relu": nn.LeakyReLU,
    "gelu": nn.GELU,
    "silu": nn.SiLU,
    "selu": nn.SELU,
    "sigmoid": nn.Sigmoid,
}


def flat_dim(space: spaces.Space) -> int:
    """Features one space contributes after preprocessing (sb3 ``get_flattened_obs_dim``): n one-hot
    entries for Discrete, sum(nvec) for MultiDiscrete, the element count for Box and MultiBinary."""
    if isinstance(space, spaces.Discrete):
        return int(space.n)
    if isinstance(space, spaces.MultiDiscrete):
        return int(np.sum(space.nvec))
    return int(np.prod(space.shape))


class Preprocessor:
    """sb3 ``preprocess_obs`` for one space, decided once (a plain object, not a closure: the policy pickles, as
    ``torch.save(model.policy)`` does): ``/ 255.0`` for images (not ``* (1/255)``: not bit-exact), ``float()`` for
    other boxes and MultiBinary, one-hot for Discrete (``nvec``: ``[n]``), concatenated one-hots for MultiDiscrete
    (sb3's one per ``th.split`` column, viewed as ``[B, sum(nvec)]``)."""

    def __init__(self, kind: str, nvec: Sequence[int] = ()):
        self.kind, self.nvec = kind, [int(n) for n in nvec]

    def __call__(self, obs: torch.Tensor) -> torch.Tensor:
        if self.kind == "image":
            return obs.float() / 255.0
        if self.kind == "float":
            return obs.float()
        if self.kind == "one_hot":
            return F.one_hot(obs.long(), num_classes=self.nvec[0]).float()
        parts = [
            F.one_hot(column.long(), num_classes=self.nvec[i]).float()
            for i, column in enumerate(torch.split(obs.long(), 1, dim=1))
        ]
        return torch.cat(parts, dim=-1).view(obs.shape[0], sum(self.nvec))


def preprocessor(space: spaces.Space, normalize_images: bool) -> Preprocessor:
    """:class:`Preprocessor` of ``space``."""
    if isinstance(space, spaces.Box):
        return Preprocessor("image" if normalize_images and is_image_space(space) else "float")
    if isinstance(space, spaces.Discrete):
        return Preprocessor("one_hot", [int(space.n)])
    if isinstance(space, spaces.MultiDiscrete):
        return Preprocessor("one_hots", [int(n) for n in space.nvec])
    if isinstance(space, spaces.MultiBinary):
        return Preprocessor("float")
    raise ValueError(f"{space} observation space is not supported")


# ----------------------------------------------------------------------------------------------
# Features extractors (sb3 torch_layers.py)


class FlattenExtractor(nn.Module):
    def __init__(self, space: spaces.Space):
        super().__init__()
        self.features_dim = flat_dim(space)  # sb3's get_flattened_obs_dim
        self.flatten = nn.Flatten()

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.flatten(obs)


class NatureCNN(nn.Module):
    """Mnih et al. 2015's CNN on a channel-first image, then ``Linear(n_flatten, features_dim)`` + ReLU."""

    def __init__(self, space: spaces.Box, features_dim: int = 512, normalized_image: bool = False):
        super().__init__()
        self.features_dim = features_dim
        n_input_channels = space.shape[0]
        self.cnn = nn.Sequential(
            nn.Conv2d(n_input_channels, 32, kernel_size=8, stride=4, padding=0),
            nn.ReLU(),
            nn.Conv2d(32, 64, kernel_size=4, stride=2, padding=0),
            nn.ReLU(),
            nn.Conv2d(64, 64, kernel_size=3, stride=1, padding=0),
            nn.ReLU(),
            nn.Flatten(),
        )
        # sb3 runs a sample through the CNN for the size; zeros give the same shape without any RNG.
        with torch.no_grad():
            n_flatten = self.cnn(torch.zeros((1, *space.shape))).shape[1]
        self.linear = nn.Sequential(nn.Linear(n_flatten, features_dim), nn.ReLU())

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.linear(self.cnn(obs))


class CombinedExtractor(nn.Module):
    """sb3 ``CombinedExtractor``: NatureCNN per image key, flatten for the rest, concatenated in key order."""

    def __init__(self, space: spaces.Dict, cnn_output_dim: int = 256, normalized_image: bool = False):
        super().__init__()
        extractors: dict[str, nn.Module] = {}
        total = 0
        for key, sub in space.spaces.items():
            if is_image_space(sub) or (normalized_image and isinstance(sub, spaces.Box) and len(sub.shape) == 3):
                extractors[key] = NatureCNN(sub, features_dim=cnn_output_dim)
                total += cnn_output_dim
            else:
                extractors[key] = nn.Flatten()
                total += flat_dim(sub)
        self.extractors = nn.ModuleDict(extractors)
        self.features_dim = total

    def forward(self, obs: dict[str, torch.Tensor]) -> torch.Tensor:
        return torch.cat([extractor(obs[key]) for key, extractor in self.extractors.items()], dim=1)


class MlpExtractor(nn.Module):
    """Separate policy and value MLPs; all policy layers are created before any value layer."""

    def __init__(self, feature_dim: int, net_arch: NetArch, activation_fn: type[nn.Module]):
        super().__init__()
        pi_dims, vf_dims = (
            (net_arch.get("pi", []), net_arch.get("vf", [])) if isinstance(net_arch, dict) else (net_arch, net_arch)
        )
        self.policy_net, self.latent_dim_pi = self._mlp(feature_dim, pi_dims, activation_fn)
        self.value_net, self.latent_dim_vf = self._mlp(feature_dim, vf_dims, activation_fn)

    @staticmethod
    def _mlp(in_dim: int, dims: list[int], activation_fn: type[nn.Module]) -> tuple[nn.Sequential, int]:
        layers: list[nn.Module] = []
        for dim in dims:
            layers += [nn.Linear(in_dim, dim), activation_fn()]
            in_dim = dim
        return nn.Sequential(*layers), in_dim

    def forward_actor(self, features: torch.Tensor) -> torch.Tensor:
        return self.policy_net(features)

    def forward_critic(self, features: torch.Tensor) -> torch.Tensor:
        return self.value_net(features)


def features_extractor(
    model: str, observation_space: spaces.Space, cls: Optional[type[nn.Module]], kwargs: Optional[dict[str, Any]]
) -> tuple[type[nn.Module], dict[str, Any]]:
    """``(class, kwargs)`` of a policy's features extractor: ``cls`` as given (sb3's own classes as
    this module's, which build the same modules), else the model's (``cnn``: NatureCNN; Dict: CombinedExtractor)."""
    kwargs = dict(kwargs or {})
    if cls is None:
        if isinstance(observation_space, spaces.Dict):
            return CombinedExtractor, kwargs
        return (NatureCNN, kwargs) if model == "cnn" else (FlattenExtractor, kwargs)
    if getattr(cls, "__module__", "") == "stable_baselines3.common.torch_layers" and cls.__name__ in SB3_EXTRACTORS:
        return SB3_EXTRACTORS[cls.__name__], kwargs
    return cls, kwargs


#: sb3's features extractors, by name, and the classes here that build the same modules
SB3_EXTRACTORS: dict[str, type[nn.Module]] = {
    "FlattenExtractor": FlattenExtractor,
    "NatureCNN": NatureCNN,
    "CombinedExtractor": CombinedExtractor,
}


# ----------------------------------------------------------------------------------------------
# The actor-critic


class ActorCritic(PolicySurface, nn.Module):
    """sb3's ``ActorCriticPolicy`` (MlpPolicy / CnnPolicy / MultiInputPolicy) without the optimizer (the API sets
    ``policy.optimizer``), with its methods for scripts (``predict``, ``obs_to_tensor``, ``get_distribution``...:
    :class:`~ppo_dict.algo.networks.policy_surface.PolicySurface`).

    Args:
        observation_space: one env's observation space (images channel-first).
        action_space: Box (diagonal Gaussian, or gSDE with ``use_sde``), Discrete (categorical),
            MultiDiscrete (one categorical per entry) or MultiBinary (Bernoulli); see ``ppo_dict.data.actions``.
        model: ``mlp`` (flatten; CombinedExtractor for Dict spaces) or ``cnn`` (NatureCNN;
            CombinedExtractor for Dict spaces).
        use_sde, full_std, use_expln, squash_output: gSDE and its settings, sb3's names and defaults.
        action_masks: sb3-contrib's ``MaskableActorCriticPolicy`` (its distributions; the passes take masks).
        features_extractor_class, features_extractor_kwargs: sb3's ``policy_kwargs`` of those names: a
            class called as sb3 calls it, ``cls(observation_space, **kwargs)`` (a user's ``BaseFeaturesExtractor``);
            sb3's own ``FlattenExtractor``, ``NatureCNN`` and ``CombinedExtractor`` are this module's (None: the model's).
    """

    def __init__(
        self,
        observation_space: spaces.Space,
        action_space: spaces.Space,
        model: str = "mlp",
        net_arch: Optional[NetArch] = None,
        activation_fn: Union[str, type[nn.Module]] = "tanh",
        ortho_init: bool = True,
        log_std_init: float = 0.0,
        share_features_extractor: bool = True,
        normalize_images: bool = True,
        use_sde: bool = False,
        full_std: bool = True,
        use_expln: bool = False,
        squash_output: bool = False,
        action_masks: bool = False,
        features_extractor_class: Optional[type[nn.Module]] = None,
        features_extractor_kwargs: Optional[dict[str, Any]] = None,
    ):
        super().__init__()
        problem = ppo_observation_problem(observation_space)
        if problem:
            raise ValueError(problem)
        self.observation_space, self.action_space = observation_space, action_space
        # refuses what sb3 refuses
        self.action_spec = action_spec(action_space, use_sde, action_masks, full_std, use_expln, squash_output)
        problem = self.action_spec.problem()
        if problem:
            raise ValueError(problem)
        self.normalize_images = normalize_images
        subspaces = observation_space.spaces if isinstance(observation_space, spaces.Dict) else {None: observation_space}
        self._preprocessors = {key: preprocessor(sub, normalize_images) for key, sub in subspaces.items()}
        self.share_features_extractor = share_features_extractor
        extractor_class, extractor_kwargs = features_extractor(
            model, observation_space, features_extractor_class, features_extractor_kwargs
        )
        if extractor_class in (NatureCNN, CombinedExtractor) and not normalize_images:  # sb3's ActorCriticPolicy.__init__
            extractor_kwargs["normalized_image"] = True
        if net_arch is None:  # sb3 policies.py: [] for NatureCNN, else pi/vf [64, 64]
            net_arch = [] if extractor_class is NatureCNN else dict(pi=[64, 64], vf=[64, 64])
        self.net_arch = net_arch
        act_cls = ACTIVATION_CLASSES[activation_fn] if isinstance(activation_fn, str) else activation_fn

        def make_features_extractor() -> nn.Module:
            return extractor_class(observation_space, **extractor_kwargs)

        # Creation order = torch RNG consumption order (sb3 ActorCriticPolicy.__init__ and _build).
        self.features_extractor = make_features_extractor()
        self.features_dim = self.features_extractor.features_dim
        self.pi_features_extractor = self.features_extractor
        self.vf_features_extractor = self.features_extractor if share_features_extractor else make_features_extractor()
        self.mlp_extractor = MlpExtractor(self.latent_input_dim(), net_arch, act_cls)
        self.action_dim = self.action_spec.n_outputs
        self.action_net, log_std = self.action_spec.build(self.mlp_extractor.latent_dim_pi, log_std_init)
        if log_std is not None:  # Box only: train/std is logged when the policy has a log_std
            self.log_std = log_std
        self.value_net = nn.Linear(self.mlp_extractor.latent_dim_vf, 1)

        if ortho_init:
            self._orthogonal_init()

    def latent_input_dim(self) -> int:
        """The width the actor's and critic's MLPs take: the features (an LSTM policy: its hidden size)."""
        return self.features_dim

    def _orthogonal_init(self) -> None:
        """sb3's orthogonal re-initialisation, module by module in sb3's order (it is part of the RNG stream)."""
        gains: dict[nn.Module, float] = {
            self.features_extractor: np.sqrt(2),
            self.mlp_extractor: np.sqrt(2),
            self.action_net: 0.01,
            self.value_net: 1,
        }
        if not self.share_features_extractor:
            # sb3 moves the extractors to the end here (GH#1148).
            del gains[self.features_extractor]
            gains[self.pi_features_extractor] = np.sqrt(2)
            gains[self.vf_features_extractor] = np.sqrt(2)
        for module, gain in gains.items():
            module.apply(partial(self._init_weights, gain=gain))

    @staticmethod
    def _init_weights(module: nn.Module, gain: float = 1) -> None:
        if isinstance(module, (nn.Linear, nn.Conv2d)):
            nn.init.orthogonal_(module.weight, gain=gain)
            if module.bias is not None:
                module.bias.data.fill_(0.0)

    # ------------------------------------------------------------------ forward passes
    def _preprocess(self, obs: TensorObs) -> TensorObs:
        if isinstance(obs, dict):
            return {key: prep(obs[key]) for key, prep in self._preprocessors.items()}
        return self._preprocessors[None](obs)

    def _latents(self, obs: TensorObs) -> tuple[torch.Tensor, torch.Tensor]:
        features = self._preprocess(obs)
        pi_features = self.pi_features_extractor(features)
        vf_features = pi_features if self.share_features_extractor else self.vf_features_extractor(features)
        return self.mlp_extractor.forward_actor(pi_features), self.mlp_extractor.forward_critic(vf_features)

    def distribution(self, latent_pi: torch.Tensor, action_masks: Optional[torch.Tensor] = None) -> Distribution:
        """The action distribution of the actor's last hidden layer (sb3 ``_get_action_dist_from_latent``),
        masked by ``action_masks`` (bool ``[B, mask_dim]``) for a policy built with ``action_masks``."""
        return self.action_spec.distribution(
            self.action_net(latent_pi), getattr(self, "log_std", None), latent_pi, action_masks
        )

    @property
    def masked(self) -> bool:
        return self.action_spec.masked

    @property
    def use_sde(self) -> bool:
        return self.action_spec.gsde is not None

    @property
    def action_dist(self) -> GSDENoise:
        """sb3's ``policy.action_dist`` with gSDE, where scripts read it: the exploration noise
        (``exploration_mat``, ``exploration_matrices``, ``sample_weights``, ``get_std``, ``latent_sde_dim``)."""
        if self.action_spec.gsde is None:
            raise AttributeError("policy.action_dist: ppo_dict's policy has sb3's action_dist with gSDE only (use_sde=True)")
        return self.action_spec.gsde

    @torch.no_grad()
    def reset_noise(self, n_envs: int = 1) -> None:
        """Draw new gSDE exploration matrices, one per env (sb3 ``ActorCriticPolicy.reset_noise``)."""
        if self.action_spec.gsde is None:
            raise ValueError("reset_noise() is only available when using gSDE")
        self.action_spec.gsde.sample_weights(self.log_std, batch_size=n_envs)

    def explore(self, n_envs: int, t: Optional[int] = None, sample_freq: int = -1) -> None:
        """The action space's exploration-noise schedule (:meth:`~ppo_dict.data.actions.ActionSpec.explore`):
        at a rollout's start (``t`` None) and before its step ``t``."""
        # not getattr: ~1 us per step for a miss
        self.action_spec.explore(self._parameters.get("log_std"), n_envs, t, sample_freq)

    def forward(
        self, obs: TensorObs, deterministic: bool = False, action_masks: Optional[torch.Tensor] = None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Sample actions for a batch: ``(actions [B, *action_shape], values [B, 1], log_probs [B])``.

        The one torch-RNG draw per step is the distribution's sample over the whole batch, as in sb3
        (one draw per entry for MultiDiscrete; none with gSDE, whose noise was drawn beforehand).
        """
        latent_pi, latent_vf = self._latents(obs)
        values = self.value_net(latent_vf)
        dist = self.distribution(latent_pi, action_masks)
        actions = dist.mode() if deterministic else dist.sample()
        log_prob = dist.log_prob(actions)
        return actions.reshape((-1, *self.action_space.shape)), values, log_prob

    def evaluate_actions(
        self, obs: TensorObs, actions: torch.Tensor, action_masks: Optional[torch.Tensor] = None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(values [B, 1], log_prob [B], entropy [B])`` of given actions (sb3 ``evaluate_actions``)."""
        latent_pi, latent_vf = self._latents(obs)
        dist = self.distribution(latent_pi, action_masks)
        log_prob = dist.log_prob(actions)
        values = self.value_net(latent_vf)
        return values, log_prob, dist.entropy()

    def predict_values(self, obs: TensorObs) -> torch.Tensor:
        """Critic only: ``values [B, 1]``."""
        features = self.vf_features_extractor(self._preprocess(obs))
        return self.value_net(self.mlp_extractor.forward_critic(features))


def policy_settings(cfg: Config) -> dict[str, Any]:
    """The config's policy settings, named as :class:`ActorCritic` and sb3's policy kwargs name them."""
    return dict(
        net_arch=cfg.net_arch,
        activation_fn=cfg.activation_fn,
        ortho_init=cfg.ortho_init,
        log_std_init=cfg.log_std_init,
        share_features_extractor=cfg.share_features_extractor,
        normalize_images=cfg.normalize_images,
        full_std=cfg.full_std,
        use_expln=cfg.use_expln,
        squash_output=cfg.squash_output,
    )
