"""sb3's hyperparameters as a model's attributes: read as sb3 holds them, assigned between ``learn`` calls as in sb3.

A curriculum or fine-tuning script changes a model's settings between two ``learn`` calls
(``model.ent_coef = 0.05``). sb3 reads some of them at every rollout or update and others only when it
builds the model, and a value assigned takes effect exactly where sb3's would:

* :data:`LIVE`: read at every rollout or update (``n_epochs``, ``batch_size``, ``ent_coef``, ``clip_range``...):
  the next one uses the value assigned. ``gamma`` is the time-limit bootstrap's (sb3's ``collect_rollouts``);
  GAE's is the rollout buffer's, set when the model is built (``model.rollout_buffer.gamma``, as sb3's).
* :data:`AT_BUILD`: read when the model is built (``learning_rate``: sb3's ``lr_schedule`` is made from it
  then, so assign ``model.lr_schedule`` to change the updates' rate, as in sb3; ``gae_lambda``: the rollout
  buffer's; ``seed``): kept, saved in the zip, and used by a model loaded from it.
* :data:`AT_LEARN`: ``verbose`` and ``tensorboard_log``, read by the next ``learn``.

Every other argument (``n_steps``, ``use_sde``, ``policy_kwargs``...) sized or built something once: assigning
it is an error naming where to give it. A value is read by the config's parsers and checked by its check,
as the constructor's are (one :class:`~ppo_dict.core.errors.ConfigError` listing what is wrong), and
the model's config, its trainer and what ``save`` writes all hold it.
"""

from __future__ import annotations

from typing import Any

from ppo_dict.core.parse import make_schedule

#: read by sb3 at every rollout or update: the next one uses a value assigned
LIVE = (
    "batch_size",
    "n_epochs",
    "gamma",
    "clip_range",
    "clip_range_vf",
    "normalize_advantage",
    "ent_coef",
    "vf_coef",
    "max_grad_norm",
    "sde_sample_freq",
    "target_kl",
)
#: read by sb3 when it builds the model: kept (``save`` writes it, ``load`` builds with it), nothing else changes
AT_BUILD = ("learning_rate", "gae_lambda", "seed")
#: read by the next ``learn``
AT_LEARN = ("verbose", "tensorboard_log")
#: the arguments whose value after ``_setup_model`` is sb3's ``FloatSchedule`` of the one given
SCHEDULED = ("clip_range", "clip_range_vf")

#: an algorithm of sb3's API (``ppo_dict.api.base.Algorithm``, which imports this module)
Algorithm = Any


def read(algorithm: Algorithm, name: str) -> Any:
    """sb3's attribute ``name``: the argument's value, ``clip_range`` (``clip_range_vf``) as sb3's ``FloatSchedule``
    of it once the model is built (sb3's ``PPO._setup_model`` wraps it)."""
    value = algorithm._arguments[name]
    if name in SCHEDULED and value is not None and built(algorithm):
        from stable_baselines3.common.utils import FloatSchedule

        return FloatSchedule(value)
    return value


def built(algorithm: Algorithm) -> bool:
    """Whether ``_setup_model`` has run (a model made with ``_init_setup_model=False`` has not)."""
    return algorithm.__dict__.get("trainer") is not None or algorithm.__dict__.get("_policy") is not None


def assign(algorithm: Algorithm, name: str, value: Any) -> None:
    """``algorithm.<name> = value`` for one of sb3's arguments (see the module doc)."""
    if name in AT_LEARN or name == "seed":
        algorithm._arguments[name] = value
        algorithm.__dict__[name] = value
        return
    if name not in LIVE + AT_BUILD:
        raise AttributeError(
            f"{type(algorithm).__name__}.{name} is fixed once the model is built (sb3 sizes or builds with "
            f"it once): give {name}= to the constructor, or to {type(algorithm).__name__}.load(path, env, "
            f"{name}=...)"
        )
    if name in SCHEDULED and value is not None and type(value).__name__ == "FloatSchedule":
        value = value.value_schedule  # what sb3's FloatSchedule wraps (read() wraps it again)
    changes = {name: value}
    if name == "batch_size":  # None: sb3-contrib's whole rollout as one minibatch
        changes["num_batches"] = 1 if value is None else None
    cfg = algorithm.cfg.replace(**changes)  # the config's parsers: a value none reads is a ConfigError
    cfg.check()
    algorithm._arguments[name] = value
    algorithm.cfg = cfg
    trainer = algorithm.trainer
    if trainer is None:
        return
    # the next rollout's bootstrap and sde_sample_freq, the next update's settings; what the trainer built once
    # (its learning-rate schedule, GAE's gamma and lambda: sb3's lr_schedule and rollout buffer) stays
    trainer.cfg = trainer.collector.cfg = cfg
    if name == "clip_range":
        trainer.clip_schedule = make_schedule(cfg.clip_range)
    elif name == "clip_range_vf":
        trainer.clip_vf_schedule = None if cfg.clip_range_vf is None else make_schedule(cfg.clip_range_vf)
