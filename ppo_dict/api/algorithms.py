"""The algorithms of sb3's API, one table entry each: the sb3 class whose signature they take, their
policy names, the policy keyword arguments those take, and what they fix in the config.

A new algorithm is an entry here and a subclass of :class:`~ppo_dict.api.base.Algorithm` with its
own ``learn`` and ``predict`` signatures (below: PPO's, MaskablePPO's and RecurrentPPO's).
"""

from __future__ import annotations

import importlib
import inspect
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Optional

import numpy as np

from ppo_dict.api.arguments import LSTM_FIELDS, POLICY_FIELDS, extras_signature
from ppo_dict.api.base import Algorithm
from ppo_dict.api.learning import learn

#: sb3's policy aliases and the model ppo_dict builds for each (None: by the observation, CombinedExtractor)
ACTOR_CRITIC = {"MlpPolicy": "mlp", "CnnPolicy": "cnn", "MultiInputPolicy": None}
#: sb3-contrib's RecurrentPPO's (None: by the observation, CombinedExtractor then the LSTM)
RECURRENT = {"MlpLstmPolicy": "mlp_lstm", "CnnLstmPolicy": "cnn_lstm", "MultiInputLstmPolicy": None}


@dataclass(frozen=True)
class AlgorithmSpec:
    """One algorithm of sb3's API.

    Attributes:
        name: sb3's class name. sb3_class: ``"module:Class"`` of the class whose signature, defaults
            and zips the algorithm takes. policies: alias -> model. policy_classes: the class names a
            zip of it names -> alias. policy_kwargs: the policy keyword arguments its policies take
            (of :data:`~ppo_dict.api.arguments.POLICY_FIELDS` and ``LSTM_FIELDS``). fixed: config values it
            sets. model_suffix: what its multi-input policy adds to the model the observation picks.
            policy_base: ``"module:Class"`` of the sb3 policy class a script's own policy class subclasses
            (trained through its own methods: ``ppo_dict.algo.networks.own_policy``); None: not supported.
    """

    name: str
    sb3_class: str
    policies: dict[str, Optional[str]]
    policy_classes: dict[str, str]
    policy_kwargs: tuple[str, ...]
    fixed: dict[str, Any]
    model_suffix: str = ""
    policy_base: Optional[str] = None

    @property
    def multi_input(self) -> str:
        """The policy for Dict observations (its model is picked by the observation)."""
        return next(alias for alias, model in self.policies.items() if model is None)

    @property
    def recurrent(self) -> bool:
        """Whether its policies have an LSTM (sb3-contrib's RecurrentPPO)."""
        return "lstm_hidden_size" in self.policy_kwargs

    def policy_for(self, model: str) -> str:
        """The alias of the policy that builds ``model`` (a config's ``--model``) for an observation that is no Dict."""
        return next(alias for alias, built in self.policies.items() if built == model)

    def sb3(self) -> type:
        module, _, name = self.sb3_class.partition(":")
        return getattr(importlib.import_module(module), name)

    def signature(self) -> inspect.Signature:
        """sb3's ``__init__`` signature (self dropped) with ppo_dict's keyword-only settings after it."""
        return _signature(self.name)

    def bind(self, *args: Any, **kwargs: Any) -> tuple[dict[str, Any], dict[str, Any]]:
        """``(sb3 arguments with their defaults, the ppo_dict settings given)`` of a call (a setting
        not given is the config's default, or what the vec env given asks for); a wrong call is sb3's TypeError."""
        bound = self.signature().bind(*args, **kwargs)
        extras = {p.name for p in extras_signature()}
        given = {k: v for k, v in bound.arguments.items() if k in extras}
        bound.apply_defaults()
        return {k: v for k, v in bound.arguments.items() if k not in extras}, given


ALGORITHMS: dict[str, AlgorithmSpec] = {
    "PPO": AlgorithmSpec(
        "PPO",
        "stable_baselines3:PPO",
        ACTOR_CRITIC,
        {
            "ActorCriticPolicy": "MlpPolicy",
            "ActorCriticCnnPolicy": "CnnPolicy",
            "MultiInputActorCriticPolicy": "MultiInputPolicy",
        },
        POLICY_FIELDS,
        {},
        policy_base="stable_baselines3.common.policies:ActorCriticPolicy",
    ),
    "MaskablePPO": AlgorithmSpec(
        "MaskablePPO",
        "sb3_contrib:MaskablePPO",
        ACTOR_CRITIC,
        {
            "MaskableActorCriticPolicy": "MlpPolicy",
            "MaskableActorCriticCnnPolicy": "CnnPolicy",
            "MaskableMultiInputActorCriticPolicy": "MultiInputPolicy",
        },
        tuple(f for f in POLICY_FIELDS if f not in ("log_std_init", "full_std", "use_expln", "squash_output")),
        {"action_masks": True},
        policy_base="sb3_contrib.common.maskable.policies:MaskableActorCriticPolicy",
    ),
    "RecurrentPPO": AlgorithmSpec(
        "RecurrentPPO",
        "sb3_contrib:RecurrentPPO",
        RECURRENT,
        {
            "RecurrentActorCriticPolicy": "MlpLstmPolicy",
            "RecurrentActorCriticCnnPolicy": "CnnLstmPolicy",
            "RecurrentMultiInputActorCriticPolicy": "MultiInputLstmPolicy",
        },
        POLICY_FIELDS + LSTM_FIELDS,
        {},
        "_lstm",
    ),
    # no library has it: RecurrentPPO's arguments, policies and defaults, with MaskablePPO's masks (docs/recurrent.md)
    "MaskableRecurrentPPO": AlgorithmSpec(
        "MaskableRecurrentPPO",
        "sb3_contrib:RecurrentPPO",
        RECURRENT,
        {},
        POLICY_FIELDS + LSTM_FIELDS,
        {"action_masks": True},
        "_lstm",
    ),
}


@lru_cache(maxsize=None)
def _signature(name: str) -> inspect.Signature:
    parameters = list(inspect.signature(ALGORITHMS[name].sb3().__init__).parameters.values())[1:]
    return inspect.Signature(parameters + extras_signature())


class PPO(Algorithm):
    """``stable_baselines3.PPO``'s API on ppo_dict's trainer: the same arguments, defaults and numbers
    (bit for bit on the CPU), with ppo_dict's settings as keyword-only arguments (``docs/python_api.md``)."""

    spec = ALGORITHMS["PPO"]

    def learn(
        self,
        total_timesteps: int,
        callback: Any = None,
        log_interval: int = 1,
        tb_log_name: str = "PPO",
        reset_num_timesteps: bool = True,
        progress_bar: bool = False,
    ) -> "PPO":
        """sb3's ``learn``: train for ``total_timesteps`` env steps with sb3's callbacks."""
        return learn(self, total_timesteps, callback, log_interval, tb_log_name, reset_num_timesteps, progress_bar)


class MaskablePPO(Algorithm):
    """``sb3_contrib.MaskablePPO``'s API on ppo_dict's trainer (the envs' ``action_masks()``, written by
    the workers beside the observation): the same arguments, defaults and numbers."""

    spec = ALGORITHMS["MaskablePPO"]

    def learn(
        self,
        total_timesteps: int,
        callback: Any = None,
        log_interval: int = 1,
        tb_log_name: str = "MaskablePPO",
        reset_num_timesteps: bool = True,
        use_masking: bool = True,
        progress_bar: bool = False,
    ) -> "MaskablePPO":
        """sb3-contrib's ``learn``: as PPO's, with ``use_masking`` (False: the envs' ``action_masks()`` not asked, the rollout
        sampled unmasked and the update given all-True masks, as sb3-contrib's)."""
        return learn(
            self, total_timesteps, callback, log_interval, tb_log_name, reset_num_timesteps, progress_bar, use_masking
        )

    def predict(
        self,
        observation: Any,
        state: Any = None,
        episode_start: Any = None,
        deterministic: bool = False,
        action_masks: Optional[np.ndarray] = None,
    ) -> tuple[np.ndarray, Any]:
        """sb3-contrib's ``predict``: only the actions ``action_masks`` allows (all of them when None)."""
        return self._predict(observation, state, episode_start, deterministic, action_masks)


class RecurrentPPO(Algorithm):
    """``sb3_contrib.RecurrentPPO``'s API on ppo_dict's trainer (``--model mlp_lstm | cnn_lstm``): the same
    arguments, defaults (``n_steps=128, batch_size=128``) and numbers; ``policy_kwargs``' LSTM settings
    are the command line's flags. ``predict`` carries the actor's LSTM states as sb3-contrib's does (so
    ``evaluate_policy`` and ``EvalCallback`` work); ``save`` writes sb3-contrib's zip and ``load`` reads it
    (and ppo_dict's recurrent model files and checkpoints). ``policy_kwargs=dict(rnn_type="gru")``: torch's GRU in
    the LSTMs' places (the command line's ``--rnn_type gru``), one state per layer, saved as ppo_dict's checkpoint."""

    spec = ALGORITHMS["RecurrentPPO"]

    def learn(
        self,
        total_timesteps: int,
        callback: Any = None,
        log_interval: int = 1,
        tb_log_name: str = "RecurrentPPO",
        reset_num_timesteps: bool = True,
        progress_bar: bool = False,
    ) -> "RecurrentPPO":
        """sb3-contrib's ``learn``: as PPO's, the LSTM states carried from rollout to rollout."""
        return learn(self, total_timesteps, callback, log_interval, tb_log_name, reset_num_timesteps, progress_bar)

    def predict(
        self, observation: Any, state: Any = None, episode_start: Any = None, deterministic: bool = False
    ) -> tuple[np.ndarray, Any]:
        """sb3-contrib's ``predict``: ``(actions, (h, c))``, the actor's LSTM states after the step (float32
        ``[n_lstm_layers, n_envs, lstm_hidden_size]``); ``state``: those the previous call returned (None: zeros);
        ``episode_start``: the envs whose episode starts with this observation (their states are zeroed first)."""
        return self._predict(observation, state, episode_start, deterministic, None)

    def save(self, path: Any, exclude: Any = None, include: Any = None) -> None:
        """sb3-contrib's zip of an LSTM model (``RecurrentPPO.load`` of either library opens it); a GRU model's is ppo_dict's
        checkpoint (no sb3-contrib class reads a GRU), as :meth:`MaskableRecurrentPPO.save` writes it, which
        :meth:`load` reads."""
        if self.cfg.rnn_type == "gru":
            save_checkpoint(self, path, exclude, include)
        else:
            super().save(path, exclude, include)


class MaskableRecurrentPPO(Algorithm):
    """RecurrentPPO with MaskablePPO's invalid-action masks, which neither library has: RecurrentPPO's arguments,
    defaults and LSTM policies (``MlpLstmPolicy``, ...), sb3-contrib's mask conventions (the envs' ``action_masks()``,
    directly or through ``ActionMasker``; ``predict(obs, state, episode_start, action_masks=...)``). With every action
    valid its numbers are RecurrentPPO's with sb3-contrib's masked distribution (docs/recurrent.md). ``save`` writes
    ppo_dict's checkpoint (no sb3-contrib class reads a masked recurrent zip); ``load`` reads it back."""

    spec = ALGORITHMS["MaskableRecurrentPPO"]

    def learn(
        self,
        total_timesteps: int,
        callback: Any = None,
        log_interval: int = 1,
        tb_log_name: str = "MaskableRecurrentPPO",
        reset_num_timesteps: bool = True,
        use_masking: bool = True,
        progress_bar: bool = False,
    ) -> "MaskableRecurrentPPO":
        """RecurrentPPO's ``learn`` with MaskablePPO's ``use_masking`` (False: MaskablePPO's unmasked rollout)."""
        return learn(
            self, total_timesteps, callback, log_interval, tb_log_name, reset_num_timesteps, progress_bar, use_masking
        )

    def predict(
        self,
        observation: Any,
        state: Any = None,
        episode_start: Any = None,
        deterministic: bool = False,
        action_masks: Optional[np.ndarray] = None,
    ) -> tuple[np.ndarray, Any]:
        """RecurrentPPO's ``predict`` (the actor's LSTM states in and out) among the actions ``action_masks`` allows
        (all of them when None), as MaskablePPO's."""
        return self._predict(observation, state, episode_start, deterministic, action_masks)

    def save(self, path: Any, exclude: Any = None, include: Any = None) -> None:
        """ppo_dict's checkpoint of this model (``.zip`` added to a path without it, as sb3 adds it): parameters, Adam,
        counters; :meth:`load` reads it. ``exclude`` and ``include`` are sb3's zip's and are refused when given."""
        save_checkpoint(self, path, exclude, include)


def save_checkpoint(algorithm: Algorithm, path: Any, exclude: Any, include: Any) -> None:
    """:func:`ppo_dict.api.files.save_checkpoint` (imported when called: ``files`` imports the run layer's checkpoints)."""
    from ppo_dict.api.files import save_checkpoint as write

    write(algorithm, path, exclude, include)
