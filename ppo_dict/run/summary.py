"""The last line a run prints on stdout: one JSON object of its counters, its speed and the last value of every
``rollout/*`` and ``eval/*`` key (``python -m ppo_dict.main_ppo``'s summary, read by scripts and sweeps).
"""

from __future__ import annotations

from typing import Any, Optional

import numpy as np

from ppo_dict.algo.ppo import PPO
from ppo_dict.core.config import Config
from ppo_dict.run.tracking import scalars


def summary(
    ppo: PPO, cfg: Config, wall_seconds: float, interrupted: bool, checkpoint: Optional[str], start_steps: int = 0
) -> dict[str, Any]:
    """The last stdout line: counters, speed (of this process), the last value of every ``rollout/*``/``eval/*`` key."""
    rew = ppo.ep_rew_mean
    metrics: dict[str, Any] = {}
    for values in ppo.logger.history:
        metrics.update({k: v for k, v in scalars(values).items() if k.startswith(("rollout/", "eval/"))})
    return {
        "env": cfg.env,
        "seed": cfg.seed,
        "env_steps": ppo.num_timesteps,
        "iterations": ppo.iteration,
        "wall_seconds": round(wall_seconds, 3),
        "fps": round((ppo.num_timesteps - start_steps) / max(wall_seconds, 1e-9), 1),
        "rollout_fps": ppo.timing.logs(ppo.n_envs)["time/rollout_fps"],
        "rollout_seconds": round(ppo.timing.rollout, 3),
        "update_seconds": round(ppo.timing.update, 3),
        "ep_rew_mean": None if np.isnan(rew) else rew,
        "interrupted": interrupted,
        "run_dir": cfg.run_dir,
        "checkpoint": checkpoint,
        "metrics": metrics,
    }
