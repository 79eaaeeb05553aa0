"""Making environments: names, specs, spaces, pixel observations, rendering, ``test_dummy`` and
Godot games. Installed as ``ppo_dict.envs``; nothing here imports the trainer.

* :mod:`.spec`: :class:`EnvSpec` (the picklable recipe) and the names people type.
* :mod:`.make`: :func:`resolve_env_name` (checks a name, before any process starts) and :func:`make_env`.
* :mod:`.spaces`: image-space predicates with sb3's definitions, and the spaces sb3's PPO and vec envs refuse.
* :mod:`.pixels`, :mod:`.render`: rendered frames as the observation, and the GL backend choice.
* :mod:`.atari`: Atari games (ale-py) with sb3's AtariWrapper; :mod:`.frame_stack`: sb3's
  VecFrameStack inside each env; :mod:`.monitor`: sb3's Monitor, for episode statistics from
  beneath training-only wrappers.
* :mod:`.dummy`: the ``test_dummy`` pixel env. :mod:`.toy`: ``PPODictToy-v0``, every space sb3 takes.
  :mod:`.goal`: ``PPODictGoal-v0``, a walk to a goal whose info reports ``is_success`` (sb3's success rate).
  :mod:`.zero_work`: ``PPODictZeroWork-v0``, an env that does no work (the pipeline's own cost).
  :mod:`.godot`: Godot games (protocol, one game process).
* :mod:`.errors`: the errors raised here, and :class:`PPODictError`, the root of every ppo_dict error.
"""

from .make import import_gym_packages, import_id_module, is_atari_env, make_env, resolve_env_name
from .spaces import (
    channel_first_space,
    contains_image,
    is_channel_last,
    is_image_space,
    leaf_spaces,
    ppo_observation_problem,
    vec_space_problem,
)
from .spec import (
    GODOT_BACKEND,
    GODOT_DEMO,
    GODOT_PREFIX,
    GYM_BACKEND,
    GYM_PREFIX,
    TEST_DUMMY,
    AtariOptions,
    EnvSpec,
    PixelOptions,
    gym_id_of,
    is_godot_name,
)

__all__ = [
    "EnvSpec",
    "PixelOptions",
    "AtariOptions",
    "GYM_PREFIX",
    "GODOT_PREFIX",
    "GODOT_DEMO",
    "TEST_DUMMY",
    "GYM_BACKEND",
    "GODOT_BACKEND",
    "gym_id_of",
    "is_godot_name",
    "resolve_env_name",
    "make_env",
    "import_gym_packages",
    "import_id_module",
    "is_atari_env",
    "is_image_space",
    "is_channel_last",
    "channel_first_space",
    "contains_image",
    "leaf_spaces",
    "vec_space_problem",
    "ppo_observation_problem",
]
