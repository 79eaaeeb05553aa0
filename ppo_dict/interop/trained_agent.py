"""Starting from an sb3 PPO zip (sb3-contrib's MaskablePPO's, RecurrentPPO's): ``--trained_agent FILE.zip``, rl-zoo's
``--trained-agent``.

rl-zoo continues a saved agent as ``PPO.load(zip, env, seed=seed, **hyperparams).learn(n)``
(``ExperimentManager._load_pretrained_agent``, then ``learn`` with ``reset_num_timesteps=True``),
with ``VecNormalize.load`` when ``<zip folder>/<env id>/vecnormalize.pkl`` exists. ppo_dict does
the same, so that the two continue bit for bit (``tests/parity/test_trained_agent.py``):

* settings, lowest first: sb3's defaults, the zip's saved PPO hyperparameters (``load`` puts them
  back before its keyword arguments), the ``--hyperparams`` entry, then the policy the zip holds
  (rl-zoo deletes ``policy`` and ``policy_kwargs`` from the entry), and the flags typed;
* seeds as ``load(seed=...)`` sets them: the policy is built afresh (the same torch RNG draws),
  then the zip's parameters and Adam state replace its own;
* counters as ``learn(reset_num_timesteps=True)`` leaves them: steps, iterations and episode
  statistics start at 0 (so schedules start over), ``n_updates`` continues from the zip;
* with a ``vecnormalize.pkl``, its statistics and settings (its ``norm_obs``, ``gamma``, ...)
  replace ``--normalize``'s, as ``VecNormalize.load`` replaces the entry's ``normalize``.

Reading the zip needs stable-baselines3 (the ``zoo`` or ``test`` extra). Nothing in the zip or the
pickle is unpickled (``ppo_dict.interop.sb3_zip``, ``ppo_dict.interop.vecnormalize``) unless
``--trust_pickles`` says so: then both are read as sb3 and rl-zoo read them, after one warning line.
"""

from __future__ import annotations

import os
import zipfile
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Optional

import numpy as np
import torch
from gymnasium import spaces

from ppo_dict.algo.networks.policy import ACTIVATION_CLASSES
from ppo_dict.core.config import FIELDS, Config
from ppo_dict.core.errors import CheckpointError
from ppo_dict.core.reading import one_line
from ppo_dict.envs import channel_first_space, contains_image, gym_id_of
from ppo_dict.interop.sb3_zip import class_name, gymnasium_unpatched, read_zip, refuse_unrebuilt, trust_warning  # noqa: F401
from ppo_dict.interop.schedules import is_schedule_text
from ppo_dict.interop.vecnormalize import read_statistics, statistics_candidates

if TYPE_CHECKING:
    from ppo_dict.algo.ppo import PPO

#: sb3's PPO policy classes (``stable_baselines3.common.policies``) -> ppo_dict's model for them
PPO_POLICIES = {"ActorCriticPolicy": "mlp", "ActorCriticCnnPolicy": "cnn", "MultiInputActorCriticPolicy": None}
#: sb3-contrib's MaskablePPO policy classes (``sb3_contrib.common.maskable.policies``): ppo_dict's with ``--action_masks``
MASKABLE_POLICIES = {
    "MaskableActorCriticPolicy": "mlp",
    "MaskableActorCriticCnnPolicy": "cnn",
    "MaskableMultiInputActorCriticPolicy": None,
}
#: sb3-contrib's RecurrentPPO policy classes (``sb3_contrib.common.recurrent.policies``): ppo_dict's recurrent models
RECURRENT_POLICIES = {
    "RecurrentActorCriticPolicy": "mlp_lstm",
    "RecurrentActorCriticCnnPolicy": "cnn_lstm",
    "RecurrentMultiInputActorCriticPolicy": None,
}
POLICY_MODULES = {
    "stable_baselines3.common.policies": PPO_POLICIES,
    "sb3_contrib.common.maskable.policies": MASKABLE_POLICIES,
    "sb3_contrib.common.recurrent.policies": RECURRENT_POLICIES,
}
#: RecurrentActorCriticPolicy's keyword arguments (Config fields under the same name) and their defaults
LSTM_KWARGS = {"lstm_hidden_size": 256, "n_lstm_layers": 1, "shared_lstm": False, "enable_critic_lstm": True}
#: the sb3 ``PPO`` attributes a zip saves that are Config fields under the same name
HYPERPARAMETERS = (
    "learning_rate",
    "n_steps",
    "batch_size",
    "n_epochs",
    "gamma",
    "gae_lambda",
    "clip_range",
    "clip_range_vf",
    "normalize_advantage",
    "ent_coef",
    "vf_coef",
    "max_grad_norm",
    "target_kl",
    "sde_sample_freq",
)
#: policy_kwargs ppo_dict builds the same way (the optimizer's own settings travel in its saved state)
POLICY_KWARGS = (
    "net_arch",
    "activation_fn",
    "ortho_init",
    "log_std_init",
    "share_features_extractor",
    "normalize_images",
    "full_std",
    "use_expln",
    "squash_output",
    "optimizer_kwargs",
)
DEFAULT_EXTRACTORS = ("FlattenExtractor", "NatureCNN", "CombinedExtractor")


@dataclass
class TrainedAgent:
    """What an sb3 PPO zip (and the ``vecnormalize.pkl`` beside it) gives a new run.

    ``saved``: the zip's hyperparameters as Config values (below ``--hyperparams`` and flags);
    ``pinned``: what the zip fixes (the policy, and the normalisation with a pkl), above the
    ``--hyperparams`` entry; flags that contradict it are refused by :func:`agent_problems`.
    """

    path: str
    saved: dict[str, Any]
    pinned: dict[str, Any]
    policy_state: dict[str, torch.Tensor]
    optimizer_state: dict[str, Any]
    n_updates: int
    observation_space: spaces.Space
    action_space: spaces.Space
    vecnormalize: Optional[str] = None
    normalizer_state: Optional[dict[str, Any]] = None
    normalized_keys: tuple[str, ...] = ()
    notes: list[str] = field(default_factory=list)
    # the zip's num_timesteps (what ppo_dict.enjoy names the replayed model by; a new run's counters start at 0)
    steps: int = 0


def schedule_value(value: Any) -> Any:
    """A saved schedule as a Config value: a float, ``lin_<x>`` for rl-zoo's ``SimpleLinearSchedule`` (as
    ``ppo_dict.interop.sb3_zip`` rebuilds it, or the object itself), or None when ppo_dict has no schedule
    with the same arithmetic (sb3's ``LinearSchedule``, a lambda, a schedule not unpickled)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if is_schedule_text(value):
        return value
    name = type(value).__name__
    if name == "FloatSchedule":  # sb3 wraps every schedule in one: float(inner(progress))
        return schedule_value(value.value_schedule)
    if name == "ConstantSchedule":
        return float(value.val)
    if name == "SimpleLinearSchedule":  # rl-zoo's lin_<x>: progress_remaining * initial_value, as ours
        return f"lin_{float(value.initial_value)!r}"
    return None


def vecnormalize_candidates(zip_path: str, env: str) -> list[str]:
    """Where the statistics may lie: rl-zoo's ``<zip folder>/<env id>/``, then ``<zip without .zip>/``
    (ppo_dict's ``--export_sb3``; the same folder when the zip is named after the env, as rl-zoo names
    it); in each, ppo_dict's ``vecnormalize.npz`` before sb3's ``vecnormalize.pkl``."""
    env_id = gym_id_of(env) or env
    folders = [os.path.join(os.path.dirname(zip_path), env_id), zip_path[: -len(".zip")]]
    return statistics_candidates(list(dict.fromkeys(os.path.normpath(p) for p in folders)))


def _load_zip(path: str, trust_pickles: bool) -> tuple[dict[str, Any], dict[str, Any]]:
    try:
        import stable_baselines3  # noqa: F401  (reads the parameters)
    except ImportError as exc:
        raise CheckpointError(
            f"--trained_agent {path}: reading an sb3 zip needs stable-baselines3 "
            "(pip install stable-baselines3==2.9.2, or ppo_dict's zoo extra)"
        ) from exc
    if not zipfile.is_zipfile(path):
        raise CheckpointError(f"{path}: not a zip file (an sb3 model is the .zip PPO.save writes)")
    try:
        data, params = read_zip(path, trust_pickles)
    except CheckpointError:
        raise
    except Exception as exc:  # truncated, a bad parameter file, with --trust_pickles an unpicklable object...
        raise CheckpointError(f"{path}: cannot read as an sb3 model zip: {one_line(exc)}") from exc
    if not data or not params:
        raise CheckpointError(f"{path}: not an sb3 model zip (no data or no parameters in it)")
    return data, params


def check_is_ppo(path: str, data: dict[str, Any], params: dict[str, Any]) -> None:
    """Refuse a zip of another algorithm, or of a PPO ppo_dict does not implement, naming what it is."""
    module, name = class_name(data.get("policy_class"))
    if name not in POLICY_MODULES.get(module, ()):
        algorithm = module.split(".")[1].upper() if module.startswith("stable_baselines3.") else module.split(".")[0]
        raise CheckpointError(
            f"{path}: not an sb3 PPO model: its policy is {module}.{name} ({algorithm}); "
            f"--trained_agent takes a zip saved by stable_baselines3.PPO (or sb3_contrib.MaskablePPO, "
            f"RecurrentPPO)"
        )
    missing = [k for k in ("clip_range", "n_epochs", "batch_size") if k not in data]
    if missing or "policy.optimizer" not in params:
        raise CheckpointError(
            f"{path}: not an sb3 PPO model: it has no {', '.join(missing or ['policy.optimizer'])} "
            "(an A2C zip has the same policy class)"
        )
    refuse_unrebuilt(path, data, ("policy_class", "observation_space", "action_space", "policy_kwargs"))


def policy_values(path: str, data: dict[str, Any], observation_space: spaces.Space) -> dict[str, Any]:
    """The Config's policy fields as the zip's policy has them (sb3's defaults where it has none)."""
    kwargs = dict(data.get("policy_kwargs") or {})
    kwargs.pop("device", None)
    unsupported = {k: v for k, v in kwargs.items() if k not in POLICY_KWARGS}
    extractor = unsupported.pop("features_extractor_class", None)
    if extractor is not None and getattr(extractor, "__name__", "") not in DEFAULT_EXTRACTORS:
        unsupported["features_extractor_class"] = extractor
    if getattr(unsupported.get("optimizer_class"), "__name__", "") == "Adam":
        unsupported.pop("optimizer_class")
    policy_name = data["policy_class"].__name__
    recurrent = policy_name in RECURRENT_POLICIES
    if recurrent:
        for name in LSTM_KWARGS:
            unsupported.pop(name, None)
        if not unsupported.get("lstm_kwargs", {}):
            unsupported.pop("lstm_kwargs", None)
    if unsupported:
        raise CheckpointError(
            f"{path}: the policy uses policy_kwargs ppo_dict does not implement: "
            + ", ".join(f"{k}={v!r}" for k, v in unsupported.items())
        )
    activation = kwargs.get("activation_fn", torch.nn.Tanh)
    names = {cls: name for name, cls in ACTIVATION_CLASSES.items()}
    if activation not in names:
        raise CheckpointError(
            f"{path}: activation_fn={activation!r} is not one ppo_dict builds ({', '.join(ACTIVATION_CLASSES)})"
        )
    net_arch = kwargs.get("net_arch")
    if isinstance(net_arch, list) and net_arch and isinstance(net_arch[0], dict):
        net_arch = net_arch[0]  # sb3 < 1.8's [dict(pi=..., vf=...)], as sb3's load converts it
    model = {**PPO_POLICIES, **MASKABLE_POLICIES, **RECURRENT_POLICIES}[policy_name]
    model = model or ("cnn" if contains_image(observation_space) else "mlp") + ("_lstm" if recurrent else "")
    lstm = {name: kwargs.get(name, default) for name, default in LSTM_KWARGS.items()} if recurrent else {}
    defaults = {
        name: FIELDS[name].default
        for name in (
            "ortho_init",
            "log_std_init",
            "share_features_extractor",
            "normalize_images",
            "full_std",
            "use_expln",
            "squash_output",
        )
    }
    # use_sde is the algorithm's setting in sb3 (passed to the policy), but it decides the policy's layers
    return {
        "model": model,
        "net_arch": net_arch,
        "activation_fn": names[activation],
        "use_sde": bool(data.get("use_sde", False)),
        "action_masks": policy_name in MASKABLE_POLICIES,  # a MaskablePPO zip continues with masks, a PPO zip without
        **lstm,
        **{name: kwargs.get(name, default) for name, default in defaults.items()},
    }


def saved_values(data: dict[str, Any]) -> dict[str, Any]:
    """The zip's PPO hyperparameters as Config values. A schedule ppo_dict cannot express becomes a
    value the Config refuses by name, unless ``--hyperparams`` or a flag sets that field."""
    values: dict[str, Any] = {}
    for name in HYPERPARAMETERS:
        if name not in data:
            continue
        value = data[name]
        if name in ("learning_rate", "clip_range") or (name == "clip_range_vf" and value is not None):
            expressed = schedule_value(value)
            value = (
                expressed
                if expressed is not None
                else f"<{value!r} from the zip: not a constant or lin_ schedule; pass --{name}>"
            )
        values[name] = value
    return values


def read_trained_agent(path: str, env: str, trust_pickles: bool = False) -> TrainedAgent:
    """Read an sb3 PPO zip (and its ``vecnormalize.pkl``, where rl-zoo puts it) for a run on ``env``.

    Raises :class:`CheckpointError` for a file that is not an sb3 PPO zip (another algorithm
    says which), or one that uses what ppo_dict does not implement (custom extractors), or a pickled value
    that is not rebuilt without ``trust_pickles`` (named).
    """
    statistics = next((c for c in vecnormalize_candidates(path, env) if os.path.isfile(c)), None)
    if trust_pickles:
        trust_warning([path] + ([statistics] if statistics is not None and statistics.endswith(".pkl") else []))
    data, params = _load_zip(path, trust_pickles)
    check_is_ppo(path, data, params)
    observation_space, action_space = data["observation_space"], data["action_space"]
    try:  # the data entry's plain values are the file's, not sb3's: a wrong type is the file's fault
        agent = TrainedAgent(
            path=path,
            saved=saved_values(data),
            pinned=policy_values(path, data, observation_space),
            policy_state=params["policy"],
            optimizer_state=params["policy.optimizer"],
            n_updates=int(data.get("_n_updates", 0)),
            observation_space=observation_space,
            action_space=action_space,
            steps=int(data.get("num_timesteps", 0)),
        )
    except (TypeError, ValueError, KeyError, AttributeError, ArithmeticError) as exc:
        # ArithmeticError: a number past float's range
        raise CheckpointError(f"{path}: its data entry does not read as an sb3 PPO model's: {one_line(exc)}") from None
    if statistics is not None:
        pinned, agent.normalizer_state, agent.normalized_keys, agent.notes = read_statistics(statistics, trust_pickles)
        agent.pinned.update(pinned)
        agent.vecnormalize = statistics
    return agent


def agent_problems(agent: TrainedAgent, cfg: Config, observation_space: spaces.Space, action_space: spaces.Space) -> list[str]:
    """Why ``agent`` cannot continue in this run: other spaces (sb3's ``check_for_correct_spaces``
    wording), flags that contradict the zip, statistics for other observation keys."""
    problems = []
    for what, saved, current in (
        ("Observation", agent.observation_space, channel_first_space(observation_space)),
        ("Action", agent.action_space, action_space),
    ):
        if saved != current:
            problems.append(f"trained_agent={agent.path!r}: {what} spaces do not match: {saved} != {current} (env {cfg.env})")
    for name, value in agent.pinned.items():
        if getattr(cfg, name) != value:
            source = agent.vecnormalize if FIELDS[name].metadata["group"] == "normalize" else "its policy"
            problems.append(
                f"{name}={getattr(cfg, name)!r}: the trained agent's {name} is {value!r} ({source}); "
                f"drop --{name}, the zip decides it"
            )
    if agent.normalizer_state is not None and cfg.normalize:
        from ppo_dict.data.storage import vector_obs_shapes

        ours = {key: tuple(shape) for key, shape in vector_obs_shapes(observation_space).items()}
        saved = {key: tuple(np.shape(rms["mean"])) for key, rms in agent.normalizer_state["obs_rms"].items()}
        if saved != ours:
            problems.append(
                f"trained_agent: {agent.vecnormalize} normalises {saved} (key: shape), "
                f"ppo_dict normalises the vector keys {ours}"
            )
    return problems


def apply_trained_agent(ppo: "PPO", agent: TrainedAgent) -> None:
    """Put the zip's parameters, Adam state, update count (and statistics) into a freshly built ``ppo``.

    Counters stay at 0, as after sb3's ``learn(reset_num_timesteps=True)``.
    """
    ppo.model.load(agent.policy_state, agent.normalizer_state, agent.path)
    ppo.load_optimizer(agent.optimizer_state, agent.path)
    ppo.n_updates = agent.n_updates
    if ppo.policy.use_sde:
        ppo.policy.reset_noise()  # sb3's load ends so: one exploration matrix from the loaded log_std (torch RNG draws)
