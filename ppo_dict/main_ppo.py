"""Command line: ``python -m ppo_dict.main_ppo --env gym_Reacher-v2 --model mlp``.

Parses flags into one :class:`~ppo_dict.config.Config`, refuses a bad config before any env or
process exists (exit 2, every problem listed), trains, saves what was asked, and prints one JSON
summary line last. Ctrl-C / SIGTERM finish the current update, save, close the workers and exit
130 / 143; a second signal stops at once without writing anything.
"""
from __future__ import annotations

import json
import signal
import sys
import time
from typing import Any, Optional

import numpy as np
import torch

from ppo_dict.config import Config, config_from_args, validate
from ppo_dict.env_pool import make_env_pool
from ppo_dict.errors import ConfigError
from ppo_dict.export import export_sb3, save_model
from ppo_dict.ppo import PPO


class StopFlag:
    """SIGINT/SIGTERM handler: the first signal asks training to stop, a second one interrupts."""

    def __init__(self) -> None:
        self.signum: Optional[int] = None

    def __call__(self, signum: int, frame: Any) -> None:
        if self.signum is not None:
            raise KeyboardInterrupt  # second signal: unwind now, close() kills the workers
        self.signum = signum
        name = signal.Signals(signum).name
        print(f"\n{name} received: finishing the current update, then saving and stopping "
              "(send it again to stop at once without saving)", file=sys.stderr, flush=True)

    def install(self) -> None:
        signal.signal(signal.SIGINT, self)
        signal.signal(signal.SIGTERM, self)

    @property
    def exit_code(self) -> int:
        return 0 if self.signum is None else 128 + self.signum


def summary(model: PPO, cfg: Config, wall_seconds: float, interrupted: bool) -> dict[str, Any]:
    rew = model.ep_rew_mean
    return {
        "env": cfg.env,
        "seed": cfg.seed,
        "env_steps": model.num_timesteps,
        "iterations": model.iteration,
        "wall_seconds": round(wall_seconds, 3),
        "fps": round(model.num_timesteps / max(wall_seconds, 1e-9), 1),
        "ep_rew_mean": None if np.isnan(rew) else rew,
        "interrupted": interrupted,
    }


def run(cfg: Config) -> int:
    """Train with a validated config; returns the process exit code."""
    stop = StopFlag()
    stop.install()
    torch.set_num_threads(cfg.torch_threads)
    spec = cfg.env_spec()
    if spec.notice:
        print(spec.notice, flush=True)
    start = time.time()
    pool = make_env_pool(cfg, spec)
    try:
        model = PPO(cfg, pool)
        model.learn(should_stop=lambda: stop.signum is not None)
        if cfg.save_path:
            print(f"saved {save_model(model, cfg.save_path)}", flush=True)
        if cfg.export_sb3:
            print(f"exported {export_sb3(model, cfg.export_sb3)} (stable_baselines3.PPO.load)", flush=True)
    except KeyboardInterrupt:
        print("interrupted twice: stopped without saving", file=sys.stderr, flush=True)
        return 128 + (stop.signum or signal.SIGINT)
    finally:
        pool.close()
    print(json.dumps(summary(model, cfg, time.time() - start, stop.signum is not None)), flush=True)
    return stop.exit_code


def main(argv: Optional[list[str]] = None) -> int:
    cfg = config_from_args(argv)  # argparse exits 2 on unknown flags or unparsable values
    try:
        validate(cfg)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if cfg.seed is None:
        cfg = cfg.replace(seed=int(np.random.SeedSequence().generate_state(1)[0]))
        print(f"seed: {cfg.seed} (drawn at random; pass --seed {cfg.seed} to repeat this run)", flush=True)
    return run(cfg)


if __name__ == "__main__":
    sys.exit(main())
