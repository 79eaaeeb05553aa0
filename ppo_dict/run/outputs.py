"""What a run of the command line writes while it trains (``python -m ppo_dict.main_ppo``): its run directory claimed
once the model is built, ``config.json``, the logger's writers (``progress.csv``, wandb, TensorBoard), ``monitor.csv``,
the checkpoints, the evaluation and the progress bar after each update; and the last stdout line: one JSON object of
the run's counters, its speed and the last value of every ``rollout/*`` and ``eval/*`` key (read by scripts and
sweeps). The files written at the end (the last checkpoint, the model file, the sb3 export, the learning curve) are
the command line's own (``main_ppo.write_outputs``).
"""

from __future__ import annotations

import os
from typing import Any, Callable, Optional

import numpy as np

from ppo_dict.algo.ppo import PPO
from ppo_dict.core.config import Config
from ppo_dict.core.logger import Logger
from ppo_dict.envs import EnvSpec
from ppo_dict.run.checkpoint import CHECKPOINT_DIR, CheckpointManager, Every, Resumed, SaveDue, write_config
from ppo_dict.run.monitor_csv import MonitorFile
from ppo_dict.run.progress import Progress
from ppo_dict.run.run_dir import BRANCHES, PROGRESS, RunDirLock, claim, keep_progress_after
from ppo_dict.run.tracking import CSVWriter, scalars


def open_outputs(
    cfg: Config, resumed: Optional[Resumed], logger: Logger, spec: EnvSpec, closers: list[Callable[[], None]]
) -> Any:
    """The run directory ``cfg.run_dir`` (settled by ``main``, claimed by ``run``): its ``config.json`` (with
    ``env_id``, the gymnasium id ``spec`` made: ``Reacher-v5`` for ``--env gym_Reacher-v2``), and the logger's
    writers (CSV, wandb, TensorBoard), their closing added to ``closers``. Returns the wandb tracker, or None.
    """
    run_dir = cfg.run_dir
    write_config(cfg, os.path.join(run_dir, "config.json"), env_id=spec.gym_id)
    resume_step, home = (None, None) if resumed is None else (resumed.steps, resumed.home)
    source = None if home is None else os.path.join(home, PROGRESS)  # the rows a resumed run continues: its run's
    if resume_step is not None and source == os.path.join(run_dir, PROGRESS):
        keep_progress_after(run_dir, resume_step)
    logger.writers.append(CSVWriter(os.path.join(run_dir, PROGRESS), resume_step, source))
    tracker = None
    if cfg.project is not None:
        from ppo_dict.run.tracking import WandbTracker

        tracker = WandbTracker(cfg, run_dir, resuming=resumed is not None)
        logger.writers.append(tracker)
    if cfg.tensorboard_log is not None:
        from ppo_dict.run.tracking import TensorBoardWriter

        board = TensorBoardWriter(cfg.tensorboard_log, resuming=resumed is not None)
        logger.writers.append(board)
        closers.append(board.close)
    return tracker


def after_update_services(
    ppo: PPO,
    cfg: Config,
    spec: EnvSpec,
    tracker: Any,
    closers: list[Callable[[], None]],
    resumed: Optional[Resumed],
    save_due: SaveDue,
) -> tuple[CheckpointManager, Callable[[PPO], None]]:
    """The episodes' ``monitor.csv``, checkpoints (when ``save_due``), evaluation and progress, run after each update:
    ``(checkpoints, after_update)``."""
    resume = None if resumed is None else (resumed.steps, resumed.home)
    monitor = MonitorFile(cfg.run_dir, spec.gym_id, cfg.info_keywords, ppo.episodes, resume)
    closers.append(monitor.close)
    checkpoints = CheckpointManager(os.path.join(cfg.run_dir, CHECKPOINT_DIR), cfg.keep_checkpoints)
    eval_due = Every(cfg.eval_freq, ppo.num_timesteps)
    evaluator = None
    if cfg.eval_freq > 0:
        from ppo_dict.run.evaluation import Evaluator

        evaluator = Evaluator(cfg, spec, cfg.run_dir)
        evaluator.load_history(ppo.num_timesteps)
        if tracker is not None:
            evaluator.on_video.append(tracker.log_video)
        closers.append(evaluator.close)
    progress = Progress(cfg.total_timesteps, ppo.num_timesteps, cfg.progress)
    closers.append(progress.close)

    def after_update(m: PPO) -> None:
        monitor.flush()  # before this update's checkpoint, which counts the episodes written
        progress.update(m.num_timesteps, m.ep_rew_mean)
        if evaluator is not None and eval_due(m.num_timesteps):
            evaluator.evaluate(m)
        if save_due(m.num_timesteps):
            checkpoints.save(m)

    return checkpoints, after_update


class Outputs:
    """What a run opens to write (a plain run's, or rank 0's), opened in order: its run directory claimed
    (:func:`~ppo_dict.run.run_dir.claim`: once the model is built and restored, so a run refused until then writes
    nothing), then its files and writers (:func:`open_outputs`), then the services after each update
    (:func:`after_update_services`). One that fails to open closes what it had opened, and raises."""

    def __init__(
        self,
        cfg: Config,
        ppo: PPO,
        spec: EnvSpec,
        logger: Logger,
        resumed: Optional[Resumed],
        fresh_dir: bool,
        save_due: SaveDue,
    ):
        self.owned: Optional[RunDirLock] = None
        self.tracker: Any = None
        self.closers: list[Callable[[], None]] = []
        try:
            self.owned = claim(cfg, resumed, fresh_dir)
            self.tracker = open_outputs(cfg, resumed, logger, spec, self.closers)
            self.checkpoints, self.after_update = after_update_services(
                ppo, cfg, spec, self.tracker, self.closers, resumed, save_due
            )
        except BaseException:
            self.close(1)
            raise

    def close(self, exit_code: int) -> None:
        """What the run opened to write, closed: the outputs (newest first), the tracker with the exit status, the run
        directory's lock."""
        for close in reversed(self.closers):
            close()
        if self.tracker is not None:
            self.tracker.finish(exit_code)
        if self.owned is not None:
            self.owned.release()


def say_where_a_resume_writes(cfg: Config, resumed: Resumed, run_dir_typed: bool) -> None:
    """Where a run resumed from ``resumed`` writes, where it is not the checkpoint's run directory: a branch of it, or
    a new one for a checkpoint outside any (``run_dir_typed``: the user chose it)."""
    source, home = resumed.file, resumed.home
    if home is not None and os.path.dirname(cfg.run_dir) == os.path.join(home, BRANCHES):
        print(
            f"{source} is older than the run's newest checkpoint, which is kept: this run is a branch, "
            f"written to {cfg.run_dir}",
            flush=True,
        )
    elif home is None and not run_dir_typed:
        print(
            f"{source} is in no run directory (its config.json and checkpoints/): this run writes a new one, {cfg.run_dir}",
            flush=True,
        )


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
