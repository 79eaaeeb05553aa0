"""``model.policy`` as sb3's policy classes: ppo_dict's networks and passes, sb3's class, files and distributions.

The layers below ``api/`` do not import sb3, so ppo_dict's policies (``ppo_dict.algo.networks.policy.ActorCritic``,
``ppo_dict.algo.networks.recurrent_policy.RecurrentActorCritic``) are not sb3's classes. The API's policy is one of the
classes here, each ppo_dict's policy first and sb3's class after it (:func:`as_sb3_policy` gives the built policy
its class; nothing of sb3's ``__init__`` runs, nothing is rebuilt), so that

* ``isinstance(model.policy, ActorCriticPolicy)`` holds (sb3-contrib's ``MaskableActorCriticPolicy`` for
  MaskablePPO's, ``RecurrentActorCriticPolicy`` for RecurrentPPO's);
* every pass the trainer and ``predict`` run is ppo_dict's own (first in the method order): the bits stay;
* what only sb3 has comes from sb3: ``parameters_to_vector``, ``load_from_vector``, ``save`` (sb3's
  ``{"state_dict", "data"}`` file, whose ``data`` are sb3's constructor arguments: ``ActorCriticPolicy.load``
  rebuilds sb3's own policy from it);
* ``load`` (a classmethod, as sb3's) reads a policy file of sb3's or ours as data, nothing it names run
  (``ppo_dict.interop.policy_file``), into this class's policy (feed-forward policies);
* ``get_distribution`` returns sb3's ``Distribution`` objects (a recurrent policy's with its states), made by sb3's own
  ``proba_distribution`` from the policy's action net, as sb3's ``_get_action_dist_from_latent`` does;
* the policy pickles (``torch.save(model.policy)``): its classes are importable by name.
"""

from __future__ import annotations

import importlib
import inspect
from typing import Any, Optional

import torch
from stable_baselines3.common import distributions as sb3_distributions
from stable_baselines3.common.policies import ActorCriticPolicy, BasePolicy

from ppo_dict.algo.networks.policy import ActorCritic
from ppo_dict.algo.networks.recurrent_policy import RecurrentActorCritic, lstm_call, process_sequence
from ppo_dict.data.actions import Masked
from ppo_dict.core.errors import CheckpointError
from ppo_dict.core.reading import one_line
from ppo_dict.data.storage import TensorObs
from ppo_dict.interop.policy_file import read_policy_file

try:  # sb3-contrib's classes where it is installed (MaskablePPO's and RecurrentPPO's policies need it)
    from sb3_contrib.common.maskable.distributions import make_masked_proba_distribution
    from sb3_contrib.common.maskable.policies import MaskableActorCriticPolicy
    from sb3_contrib.common.recurrent.policies import RecurrentActorCriticPolicy
except ImportError:  # pragma: no cover (sb3-contrib is an install requirement of the API's extras)
    MaskableActorCriticPolicy = RecurrentActorCriticPolicy = None  # type: ignore[assignment,misc]


class SB3Surface:
    """What the classes below add to ppo_dict's policy (a mixin before it)."""

    #: the ppo_dict class whose passes these are (the trainer's checks ask for it: ``ppo_dict.algo.rollout.sharded_rollout``)
    surface_of: type = ActorCritic
    #: the sb3 class whose ``load`` reads this class's files
    sb3_base: type = ActorCriticPolicy
    sb3_data: dict[str, Any]

    def _get_constructor_parameters(self) -> dict[str, Any]:
        """sb3's: the arguments sb3's class is built with to give this policy (its ``save`` writes them)."""
        return dict(self.sb3_data)

    @classmethod
    def load(cls, path: str, device: Any = "auto") -> Any:  # type: ignore[override]
        """sb3's ``load`` of a policy file (sb3's ``save``, or this class's), read as data (``ppo_dict.interop.policy_file``:
        nothing it names runs): this class's policy, built from the file's arguments, with its parameters."""
        from stable_baselines3.common.utils import get_device

        state, arguments = read_policy_file(path)
        policy = policy_from_arguments(cls, arguments)
        try:
            policy.load_state_dict(state)
        except RuntimeError as exc:
            raise CheckpointError(
                f"{path}: its parameters are not those of the policy its arguments build: {one_line(exc)}"
            ) from None
        return policy.to(get_device(device))


def sb3_distribution(
    policy: Any, latent_pi: torch.Tensor, action_masks: Optional[Any] = None
) -> sb3_distributions.Distribution:
    """sb3's ``_get_action_dist_from_latent`` (sb3-contrib's with ``apply_masking``) on ``policy``'s action net: sb3's
    distribution object for ``policy``'s action space, made once and kept (as sb3 keeps ``policy.action_dist``)."""
    spec, dist = policy.action_spec, policy.__dict__.get("_sb3_dist")
    if dist is None:
        masked = isinstance(spec, Masked)
        gsde = spec.gsde is not None
        kwargs = (
            dict(full_std=spec.full_std, squash_output=spec.squash, use_expln=spec.use_expln, learn_features=False)
            if gsde
            else None
        )
        dist = (
            make_masked_proba_distribution(policy.action_space)
            if masked
            else sb3_distributions.make_proba_distribution(policy.action_space, use_sde=gsde, dist_kwargs=kwargs)
        )
        policy.__dict__["_sb3_dist"] = dist
    mean_actions = policy.action_net(latent_pi)
    if isinstance(dist, sb3_distributions.DiagGaussianDistribution):
        return dist.proba_distribution(mean_actions, policy.log_std)
    if isinstance(dist, sb3_distributions.StateDependentNoiseDistribution):  # ppo_dict's exploration matrices, sb3's object
        dist.latent_sde_dim, noise = latent_pi.shape[-1], spec.gsde
        dist.exploration_mat, dist.exploration_matrices = noise.exploration_mat, noise.exploration_matrices
        return dist.proba_distribution(mean_actions, policy.log_std, latent_pi)
    made = dist.proba_distribution(action_logits=mean_actions)
    if action_masks is not None:
        made.apply_masking(action_masks)
    return made


class SB3ActorCritic(SB3Surface, ActorCritic, ActorCriticPolicy):  # type: ignore[misc]
    """PPO's policy: ppo_dict's :class:`~ppo_dict.algo.networks.policy.ActorCritic` as sb3's ``ActorCriticPolicy``."""

    def get_distribution(self, obs: TensorObs, action_masks: Optional[Any] = None) -> sb3_distributions.Distribution:
        """sb3's ``get_distribution``: sb3's distribution at ``obs`` (module doc)."""
        features = self.pi_features_extractor(self._preprocess(obs))
        return sb3_distribution(self, self.mlp_extractor.forward_actor(features), action_masks)


CLASSES: dict[str, type] = {"PPO": SB3ActorCritic}

if MaskableActorCriticPolicy is not None:

    class SB3MaskableActorCritic(SB3Surface, ActorCritic, MaskableActorCriticPolicy):  # type: ignore[misc]
        """MaskablePPO's policy: ppo_dict's masked :class:`~ppo_dict.algo.networks.policy.ActorCritic` as sb3-contrib's
        ``MaskableActorCriticPolicy``."""

        sb3_base = MaskableActorCriticPolicy
        get_distribution = SB3ActorCritic.get_distribution

    class SB3RecurrentActorCritic(SB3Surface, RecurrentActorCritic, RecurrentActorCriticPolicy):  # type: ignore[misc]
        """RecurrentPPO's policy: ppo_dict's :class:`~ppo_dict.algo.networks.recurrent_policy.RecurrentActorCritic` as
        sb3-contrib's ``RecurrentActorCriticPolicy``."""

        surface_of = RecurrentActorCritic
        sb3_base = RecurrentActorCriticPolicy

        def get_distribution(
            self,
            obs: TensorObs,
            lstm_states: tuple[torch.Tensor, torch.Tensor],  # type: ignore[override]
            episode_starts: torch.Tensor,
            action_masks: Optional[Any] = None,
        ) -> tuple[Any, tuple[torch.Tensor, ...]]:
            """sb3-contrib's: ``(sb3's distribution, the actor's states after the step)`` (masks: a masked policy's)."""
            features = self.pi_features_extractor(self._preprocess(obs))
            latent_pi, lstm_states = process_sequence(
                features, lstm_states, episode_starts, lstm_call(self.lstm_actor), self.lstm_actor.input_size
            )
            return sb3_distribution(self, self.mlp_extractor.forward_actor(latent_pi), action_masks), lstm_states

    CLASSES.update(
        MaskablePPO=SB3MaskableActorCritic, RecurrentPPO=SB3RecurrentActorCritic, MaskableRecurrentPPO=SB3RecurrentActorCritic
    )


def policy_from_arguments(cls: type, arguments: dict[str, Any]) -> Any:
    """``cls``'s policy from an sb3 policy file's constructor arguments
    (:func:`~ppo_dict.interop.policy_file.read_policy_file`'s), as sb3's class builds it from them: the networks, then
    ``optimizer_class(parameters, lr=0.0, **optimizer_kwargs)``."""
    if cls.surface_of is not ActorCritic:
        raise CheckpointError(
            f"{cls.__name__}.load: a recurrent policy's file is read by sb3-contrib's RecurrentActorCriticPolicy.load"
        )
    given = {k: v for k, v in arguments.items() if v is not None}
    use_sde = bool(given.get("use_sde", False))
    known = (
        "net_arch",
        "activation_fn",
        "ortho_init",
        "log_std_init",
        "share_features_extractor",
        "normalize_images",
        "full_std",
        "use_expln",
        "squash_output",
        "features_extractor_class",
        "features_extractor_kwargs",
    )
    unknown = sorted(
        set(given)
        - set(known)
        - {"observation_space", "action_space", "use_sde", "lr_schedule", "optimizer_class", "optimizer_kwargs"}
    )
    if unknown:
        raise CheckpointError(f"{cls.__name__}.load: the file's arguments {unknown} are not ones ppo_dict's policy takes")
    policy = ActorCritic(
        given["observation_space"],
        given["action_space"],
        use_sde=use_sde,
        action_masks=cls.sb3_base is MaskableActorCriticPolicy,
        **{k: given[k] for k in known if k in given},
    )
    optimizer_class = given.get("optimizer_class", torch.optim.Adam)
    # sb3's lr_schedule(1)
    policy.optimizer = optimizer_class(policy.parameters(), lr=0.0, **given.get("optimizer_kwargs", {"eps": 1e-5}))
    policy.__class__ = cls
    sb3_extractors = importlib.import_module("stable_baselines3.common.torch_layers")
    extractor = given.get("features_extractor_class")
    data = {**arguments, "lr_schedule": BasePolicy._dummy_schedule}
    if extractor is not None and extractor.__module__ == ActorCritic.__module__:  # ppo_dict's own of sb3's: sb3's, by name
        data["features_extractor_class"] = getattr(sb3_extractors, extractor.__name__)
    set_sb3_data(policy, data)
    return policy


def sb3_constructor_data(algorithm: Any, policy: Any) -> dict[str, Any]:
    """The arguments sb3's policy class is built with for this algorithm (what sb3's ``_get_constructor_parameters``
    saves): the spaces, sb3's dummy schedule, ``use_sde`` where the class takes it, the script's ``policy_kwargs``, and
    the features extractor of the policy's alias (``CnnPolicy``: NatureCNN) unless ``policy_kwargs`` names one."""
    sb3_class = algorithm.spec.sb3()
    alias = algorithm._arguments["policy"]
    policy_class = sb3_class.policy_aliases.get(alias, alias) if isinstance(alias, str) else alias
    parameters = inspect.signature(policy_class.__init__).parameters
    data: dict[str, Any] = dict(
        observation_space=policy.observation_space, action_space=algorithm.action_space, lr_schedule=BasePolicy._dummy_schedule
    )
    if "use_sde" in parameters:
        data["use_sde"] = bool(algorithm.cfg.use_sde)
    if "features_extractor_class" in parameters:
        data["features_extractor_class"] = parameters["features_extractor_class"].default
    data.update(algorithm.policy_kwargs or {})
    return data


def as_sb3_policy(algorithm: Any, policy: Any) -> Any:
    """``policy`` (ppo_dict's, just built for ``algorithm``) as its sb3 class (module doc); the same object."""
    cls = CLASSES.get(algorithm.spec.name)
    if cls is None or type(policy) is not cls.surface_of:
        return policy
    policy.__class__ = cls
    set_sb3_data(policy, sb3_constructor_data(algorithm, policy))
    return policy


def set_sb3_data(policy: Any, data: dict[str, Any]) -> None:
    """sb3's constructor arguments on ``policy`` (its ``save`` writes them) and what sb3's ``__init__`` would have set
    of them."""
    policy.sb3_data = data
    policy.optimizer_class, policy.optimizer_kwargs = type(policy.optimizer), data.get("optimizer_kwargs") or {}
    policy.features_extractor_class = data.get("features_extractor_class")
    policy.features_extractor_kwargs = data.get("features_extractor_kwargs") or {}
