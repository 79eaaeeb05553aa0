"""rl-zoo's side of the results page: its PPO entries as sb3 objects, its envs as it builds them, its published scores.

:func:`zoo_setup` reads the installed rl_zoo3's ``ppo.yml`` entry for an env id through the command line's
parser (``ppo_dict.interop.hyperparams.translate``, which names every key it cannot read) and turns it into
what rl-zoo's ``ExperimentManager`` hands sb3: PPO's keyword arguments (``lin_<x>`` and constants as its
``_preprocess_schedules`` makes them, ``policy_kwargs`` with their classes), ``n_envs``, ``n_timesteps``,
the ``VecNormalize`` arguments (``normalize``, with the entry's ``gamma`` as ``_preprocess_normalization``
adds it), the ``env_wrapper`` (rl-zoo's ``get_wrapper_class``), ``frame_stack``. :func:`make_envs` then builds
the vec env as rl-zoo's ``create_envs`` does, with the ``make_vec_env`` it is given (sb3's or ppo_dict's).

An entry that cannot be reproduced is refused with :class:`ZooEntryError`, naming the env, the entry and the key.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

#: rl-zoo's published PPO scores: the ``ppo`` rows of rl-baselines3-zoo's ``benchmark.md`` (commit 0088472b of
#: github.com/DLR-RM/rl-baselines3-zoo), transcribed as written there. One trained agent per env, evaluated for
#: ``eval_timesteps`` (about 150,000 agent steps) with the deterministic policy (stochastic on Atari).
BENCHMARK_COMMIT = "0088472b"
BENCHMARK_MD = """
|ppo  |Acrobot-v1                 |    -73.506|    18.201|1M         |        149979|         2013|
|ppo  |Ant-v3                     |   1327.158|   451.577|1M         |        149572|          175|
|ppo  |AntBulletEnv-v0            |   2865.922|    56.468|2M         |        150000|          150|
|ppo  |AsteroidsNoFrameskip-v4    |   2156.174|   744.640|10M        |        602092|          149|
|ppo  |BeamRiderNoFrameskip-v4    |   3397.000|  1662.368|10M        |        598926|           46|
|ppo  |BipedalWalker-v3           |    213.299|   129.490|5M         |        149826|          233|
|ppo  |BipedalWalkerHardcore-v3   |    122.374|   117.605|100M       |        148036|          105|
|ppo  |BreakoutNoFrameskip-v4     |    398.033|    33.328|10M        |        600418|           60|
|ppo  |CartPole-v1                |    500.000|     0.000|100k       |        150000|          300|
|ppo  |EnduroNoFrameskip-v4       |    996.364|   176.090|10M        |        572416|           11|
|ppo  |HalfCheetah-v3             |   5819.099|   663.530|1M         |        150000|          150|
|ppo  |HalfCheetahBulletEnv-v0    |   2924.721|    64.465|2M         |        150000|          150|
|ppo  |Hopper-v3                  |   2410.435|    10.026|1M         |        150000|          150|
|ppo  |HopperBulletEnv-v0         |   2575.054|   223.301|2M         |        149094|          152|
|ppo  |LunarLander-v2             |    242.119|    31.823|1M         |        149636|          369|
|ppo  |LunarLanderContinuous-v2   |    270.863|    32.072|1M         |        149956|          526|
|ppo  |MountainCar-v0             |   -110.423|    19.473|1M         |        149954|         1358|
|ppo  |MountainCarContinuous-v0   |     88.343|     2.572|20k        |        149983|          633|
|ppo  |Pendulum-v1                |   -172.225|   104.159|100k       |        150000|          750|
|ppo  |PongNoFrameskip-v4         |     20.989|     0.105|10M        |        599902|           90|
|ppo  |QbertNoFrameskip-v4        |  15627.108|  3313.538|10M        |        600248|           83|
|ppo  |ReacherBulletEnv-v0        |     17.091|    11.048|1M         |        150000|         1000|
|ppo  |RoadRunnerNoFrameskip-v4   |  40680.645|  6675.058|10M        |        605786|          155|
|ppo  |SeaquestNoFrameskip-v4     |   1783.636|    34.096|10M        |        598243|           66|
|ppo  |SpaceInvadersNoFrameskip-v4|    960.331|   425.355|10M        |        603771|          136|
|ppo  |Swimmer-v3                 |    281.561|     9.671|1M         |        150000|          150|
|ppo  |Walker2DBulletEnv-v0       |   2109.992|    13.899|2M         |        150000|          150|
|ppo  |Walker2d-v3                |   3478.798|   821.708|1M         |        149343|          171|
"""


@dataclass(frozen=True)
class Published:
    """One row of rl-zoo's ``benchmark.md``: its env id (maybe another version than ours), score and budget."""

    env: str
    mean: float
    std: float
    n_timesteps: str
    eval_timesteps: int
    eval_episodes: int


def published_scores(text: str = BENCHMARK_MD) -> dict[str, Published]:
    """``{env id: Published}`` from the transcribed rows."""
    rows = {}
    for line in text.strip().splitlines():
        _, env, mean, std, steps, eval_steps, episodes = [cell.strip() for cell in line.strip("|").split("|")]
        rows[env] = Published(env, float(mean), float(std), steps, int(eval_steps), int(episodes))
    return rows


ZOO_SCORES = published_scores()


def versionless(env_id: str) -> str:
    """``HalfCheetah-v5`` -> ``HalfCheetah``."""
    return re.sub(r"-v\d+$", "", env_id)


def version(env_id: str) -> int:
    found = re.search(r"-v(\d+)$", env_id)
    return int(found.group(1)) if found else -1


def same_or_other_version(env_id: str, names: Any) -> Optional[str]:
    """``env_id`` if ``names`` holds it, else the newest other version of the same env there, else None."""
    if env_id in names:
        return env_id
    others = [name for name in names if versionless(name) == versionless(env_id) and version(name) >= 0]
    return max(others, key=version) if others else None


def published(env_id: str) -> Optional[Published]:
    """rl-zoo's published PPO score for ``env_id``, or for another version of it (its ``env`` says which)."""
    name = same_or_other_version(env_id, ZOO_SCORES)
    return ZOO_SCORES[name] if name else None


class ZooEntryError(ValueError):
    """An rl-zoo entry this script cannot reproduce; the message names the env, the entry and each key."""


@dataclass
class ZooSetup:
    """What rl-zoo's ``ExperimentManager`` makes of one ``ppo.yml`` entry.

    Attributes:
        env: the gymnasium id trained. key: the entry read (another version's, ``atari`` or ``default`` where
            rl_zoo3 has none of the id's own); mapping: why that entry, ``""`` for the id's own.
        policy: sb3's policy name. ppo_kwargs: PPO's keyword arguments (schedules and ``policy_kwargs`` built).
        n_envs, n_timesteps: rl-zoo's. normalize: ``VecNormalize``'s keyword arguments, None without one.
        wrapper: rl-zoo's ``env_wrapper`` as one callable (None without). frame_stack: ``VecFrameStack``'s
            ``n_stack`` (None without). deterministic: how rl-zoo's benchmark evaluates (stochastic on Atari).
    """

    env: str
    key: str
    mapping: str
    policy: str
    ppo_kwargs: dict[str, Any]
    n_envs: int
    n_timesteps: int
    normalize: Optional[dict[str, Any]] = None
    wrapper: Optional[Callable[[Any], Any]] = None
    frame_stack: Optional[int] = None
    deterministic: bool = True
    entry: dict[str, Any] = field(default_factory=dict)

    def describe(self) -> str:
        """One paragraph: the entry read and what was made of it."""
        chain = ["make_vec_env" + (" + env_wrapper" if self.wrapper else "")]
        if self.normalize is not None:
            chain.append(f"VecNormalize({', '.join(f'{k}={v}' for k, v in sorted(self.normalize.items()))})")
        if self.frame_stack:
            chain.append(f"VecFrameStack({self.frame_stack})")
        kwargs = ", ".join(f"{k}={v!r}" for k, v in sorted(self.ppo_kwargs.items()))
        entry = f"rl_zoo3 ppo.yml[{self.key}]" + (f" ({self.mapping})" if self.mapping else "")
        return (
            f"{self.env}: {entry}: {self.n_envs} envs, {self.n_timesteps:,} steps, {' -> '.join(chain)}; "
            f"PPO({self.policy!r}, {kwargs}); evaluated {'deterministically' if self.deterministic else 'stochastically'}"
        )


def zoo_entries() -> dict[str, Any]:
    """The installed rl_zoo3's ``ppo.yml``, read with the command line's bounded YAML reader."""
    from ppo_dict.interop.hyperparams import RL_ZOO, hyperparams_file, read_yaml

    with open(hyperparams_file(RL_ZOO)) as f:
        return read_yaml(f)


def entry_key(env_id: str, entries: dict[str, Any]) -> tuple[str, str]:
    """``(key, mapping)``: the id's own entry; else another version's (named: rl_zoo3 2.9.2 has the MuJoCo v4
    entries); else rl-zoo's own fallbacks (``ExperimentManager.read_hyperparameters``): ``atari`` for a game
    ale-py makes, ``default``. Raises :class:`ZooEntryError` for an id gymnasium does not know."""
    import gymnasium as gym

    from ppo_dict.envs.spec import is_atari_entry

    from ppo_dict.envs.make import is_mujoco_py_stub

    try:
        spec = gym.spec(env_id)
    except gym.error.Error as exc:
        raise ZooEntryError(f"{env_id}: not a registered gymnasium id ({exc})") from None
    if is_mujoco_py_stub(spec):
        raise ZooEntryError(
            f"{env_id}: gymnasium registers it only to say it needs mujoco-py; "
            f"train {spec.name}-v5 (with this entry's settings where rl_zoo3 has no v5 entry)"
        )
    other = same_or_other_version(env_id, [key for key in entries if key not in ("atari", "default")])
    if other == env_id:
        return env_id, ""
    if other is not None:
        return other, f"rl_zoo3 has {other}'s entry, not {env_id}'s: {env_id} trained with {other}'s settings"
    if is_atari_entry(spec.entry_point):
        return "atari", "rl-zoo's entry for every Atari game without its own"
    return "default", f"rl-zoo's default entry: ppo.yml has none for {env_id}"


def schedule(value: Any) -> Any:
    """rl-zoo's ``_preprocess_schedules``: ``lin_<x>`` -> its ``SimpleLinearSchedule``; a number -> sb3's
    ``ConstantSchedule`` (a negative one, a disabled clip, left as it is)."""
    from rl_zoo3.utils import SimpleLinearSchedule
    from stable_baselines3.common.utils import ConstantSchedule

    if isinstance(value, str):
        return SimpleLinearSchedule(float(value.split("_")[1]))
    return value if value < 0 else ConstantSchedule(float(value))


#: ``translate``'s values that are PPO keyword arguments of the same name; the schedules among them
PPO_VALUES = (
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
    "use_sde",
    "sde_sample_freq",
)
SCHEDULES = ("learning_rate", "clip_range", "clip_range_vf")
#: ``translate``'s values this module reads besides (rl-zoo's own keys)
HANDLED = ("n_envs", "total_timesteps", "model", "normalize", "frame_stack")


def zoo_setup(env_id: str, entries: Optional[dict[str, Any]] = None) -> ZooSetup:
    """rl-zoo's setup for ``env_id`` (see the module doc); :class:`ZooEntryError` lists every key it cannot reproduce."""
    import rl_zoo3.import_envs  # noqa: F401  rl-zoo's registrations (ale-py's games), as its train.py imports them
    from rl_zoo3.utils import get_wrapper_class

    from ppo_dict.algo.networks.policy import ACTIVATION_CLASSES
    from ppo_dict.interop.hyperparams import NORMALIZE_KWARGS, POLICY_KWARGS, translate

    entries = zoo_entries() if entries is None else entries
    key, mapping = entry_key(env_id, entries)
    entry = dict(entries[key])
    where = f"{env_id}: rl_zoo3 ppo.yml[{key}]"
    # env_wrapper is rl-zoo's get_wrapper_class's: any wrapper class the installed packages hold, as rl-zoo imports
    # it (the command line applies sb3's AtariWrapper only); every other key goes through the command line's parser.
    values, problems = translate({name: value for name, value in entry.items() if name != "env_wrapper"}, where)
    wrapper = None
    try:
        wrapper = get_wrapper_class(entry)
    except (ImportError, AttributeError, ValueError, AssertionError) as exc:
        problems.append(f"{where}: env_wrapper {entry.get('env_wrapper')!r} cannot be built here: {exc}")
    unread = sorted(set(values) - set(PPO_VALUES) - set(HANDLED) - set(POLICY_KWARGS) - set(NORMALIZE_KWARGS.values()))
    problems += [f"{where}: {name!r} (read as {name}={values[name]!r}) is not reproduced by this script" for name in unread]
    if problems:
        raise ZooEntryError("; ".join(problems))
    ppo_kwargs = {name: schedule(values[name]) if name in SCHEDULES else values[name] for name in PPO_VALUES if name in values}
    policy_kwargs = {name: values[name] for name in POLICY_KWARGS if name in values}
    if "activation_fn" in policy_kwargs:
        policy_kwargs["activation_fn"] = ACTIVATION_CLASSES[policy_kwargs["activation_fn"]]
    if policy_kwargs:
        ppo_kwargs["policy_kwargs"] = policy_kwargs
    normalize = None
    if values.get("normalize"):
        normalize = {sb3_name: values[name] for sb3_name, name in NORMALIZE_KWARGS.items() if name in values}
        if "gamma" in entry:  # rl-zoo's _preprocess_normalization: the discount of the algorithm
            normalize["gamma"] = values["gamma"]
    return ZooSetup(
        env_id,
        key,
        mapping,
        entry["policy"],
        ppo_kwargs,
        int(values.get("n_envs", 1)),
        int(values["total_timesteps"]),
        normalize,
        wrapper,
        values.get("frame_stack"),
        deterministic=not stochastic_evaluation(env_id),
        entry=entry,
    )


def stochastic_evaluation(env_id: str) -> bool:
    """rl-zoo's enjoy (its benchmark's evaluation): the stochastic policy on Atari and MiniGrid, else the deterministic one."""
    import gymnasium as gym

    from ppo_dict.envs.spec import is_atari_entry

    entry_point = gym.spec(env_id).entry_point
    return is_atari_entry(entry_point) or "minigrid" in str(entry_point)


def make_envs(setup: ZooSetup, make_vec_env: Callable[..., Any], n_envs: int, seed: int, evaluation: bool = False) -> Any:
    """The vec env rl-zoo's ``ExperimentManager.create_envs`` builds: ``make_vec_env`` (sb3's or ppo_dict's, same
    arguments) with the env wrapper, then ``VecNormalize`` (for ``evaluation``: not training, rewards not
    normalised, as rl-zoo's eval env), ``VecFrameStack``, ``VecTransposeImage`` for channel-last images.

    One difference, which changes no number: the id is passed as it is, so sb3 makes it with
    ``render_mode="rgb_array"`` where rl-zoo passes ``gym.spec(id).make`` (no render mode)."""
    from stable_baselines3.common.preprocessing import is_image_space, is_image_space_channels_first
    from stable_baselines3.common.vec_env import VecFrameStack, VecNormalize, VecTransposeImage

    env = make_vec_env(setup.env, n_envs=n_envs, seed=seed, wrapper_class=setup.wrapper)
    if setup.normalize is not None:
        env = VecNormalize(env, **{**setup.normalize, **({"training": False, "norm_reward": False} if evaluation else {})})
    if setup.frame_stack:
        env = VecFrameStack(env, setup.frame_stack)
    space = env.observation_space
    if is_image_space(space) and not is_image_space_channels_first(space):
        env = VecTransposeImage(env)
    return env
