"""sb3's Python API on ppo_dict's trainer: change one import, keep the script, get the same numbers.

    from ppo_dict import PPO          # instead of: from stable_baselines3 import PPO
    from ppo_dict import MaskablePPO  # instead of: from sb3_contrib import MaskablePPO
    from ppo_dict import RecurrentPPO # instead of: from sb3_contrib import RecurrentPPO
    from ppo_dict import MaskableRecurrentPPO  # RecurrentPPO with MaskablePPO's masks (no library has it)
    from ppo_dict import make_vec_env # sb3's signature; its envs run in ppo_dict's workers

``docs/python_api.md`` is the guide. The algorithms are a table (:mod:`.algorithms`); the
arguments become the command line's config (:mod:`.arguments`, :mod:`.checks`) and sb3's attributes,
assignable between ``learn`` calls (:mod:`.settings`); the envs (:mod:`.envs`); the model built as
sb3 builds it (:mod:`.building`); ``learn`` with sb3's callbacks (:mod:`.learning`), sb3's rollout
buffer (:mod:`.buffer`) and what sb3 keeps between ``learn`` calls (:mod:`.carry`); sb3's zips (:mod:`.files`);
sb3-contrib's masked ``evaluate_policy`` and ``MaskableEvalCallback`` with a recurrent model's states carried
(:mod:`.recurrent_evaluation`).
"""

from ppo_dict.api.algorithms import ALGORITHMS, MaskablePPO, MaskableRecurrentPPO, PPO, RecurrentPPO
from ppo_dict.api.envs import make_vec_env
from ppo_dict.api.recurrent_evaluation import MaskableEvalCallback, evaluate_policy

__all__ = [
    "PPO",
    "MaskablePPO",
    "RecurrentPPO",
    "MaskableRecurrentPPO",
    "ALGORITHMS",
    "make_vec_env",
    "MaskableEvalCallback",
    "evaluate_policy",
]
