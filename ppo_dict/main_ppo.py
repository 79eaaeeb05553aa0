"""Command line: ``python -m ppo_dict.main_ppo --env gym_Reacher-v2 --model mlp``.

Parses flags into one :class:`~ppo_dict.core.config.Config`, refuses a bad config before any env or
process exists (exit 2, every problem listed, the machine's resources included; ``--dry_run`` stops
there and prints the run plan, exit 0), trains, saves what was asked, and prints one JSON
summary line last. Ctrl-C / SIGTERM / SIGHUP drop the rollout or update in progress, save the state from before
it (the envs included), close the workers and exit 130 / 143 / 129 within a few seconds (``ppo_dict.run.stopping``); a
second signal stops at once without writing anything more, and one while the command line starts ends it cleanly
(same exit status, no traceback: ``ppo_dict.run.startup``). An env hung in the main process ends the run after
``--step_timeout`` seconds (``ppo_dict.vec.watchdog``), as a hung worker does.

A run writes into its run directory (``--run_dir``, default ``runs/<env>__<seed>__<time>``):
``config.json`` (resolved), ``progress.csv`` (every logged value), ``monitor.csv`` (the training episodes, as
sb3's ``Monitor`` writes them), ``checkpoints/``,
``evaluations.npz`` and ``best_model.pt`` (with ``--eval_freq``), ``videos/`` (``--video``) and
``learning_curve.png`` (``ppo_dict.run.outputs``). ``--resume RUN_DIR|FILE`` continues from a checkpoint. The run
owns its directory (``ppo_dict.run.run_dir``): locked while it writes, never overwritten without ``--overwrite True``,
untouched by a refused run; resuming from an older checkpoint branches into ``RUN_DIR/branches/from_<steps>``.
"""

from __future__ import annotations

import json
import signal
import sys
import time
from typing import Any, Optional

from ppo_dict.run import startup

if __name__ == "__main__":  # before the imports below take their seconds: a stop signal then ends the start cleanly
    startup.exit_on_stop_signals()

from ppo_dict.run.cli import CommandLine, read_command_line  # noqa: E402 (argparse and the config's fields: no torch)

if __name__ == "__main__":  # --help, or a flag argparse refuses, answered in a fraction of a second: before torch is imported
    COMMAND_LINE = read_command_line(None)

import torch  # noqa: E402 (after the start-up signal handlers and the command line)

from ppo_dict.algo.ppo import PPO
from ppo_dict.core import file_effects
from ppo_dict.core.config import Config
from ppo_dict.core.errors import CheckpointError, ConfigError, PPODictError
from ppo_dict.core.logger import Logger
from ppo_dict.interop.hyperparams import hyperparams_text
from ppo_dict.interop.sb3 import export_sb3
from ppo_dict.interop.trained_agent import TrainedAgent, apply_trained_agent
from ppo_dict.run.checkpoint import CheckpointManager, Resumed, SaveDue, restore, save_model
from ppo_dict.run.cli import read_config
from ppo_dict.run.env_states import resume_envs
from ppo_dict.run.outputs import Outputs, say_where_a_resume_writes, summary
from ppo_dict.run.ranks import RankRun, check_everywhere, join_ranks, rank_rows, settle_everywhere
from ppo_dict.run.run_dir import default_run_dir
from ppo_dict.run.run_plan import device_notice, dry_run_text, main_share_notice, plan_run, resume_line
from ppo_dict.run.sources import sources
from ppo_dict.run.stopping import StopFlag, learn_until_stopped
from ppo_dict.vec import EnvPool, watchdog
from ppo_dict.vec.backend import EnvBackend


def write_outputs(ppo: PPO, cfg: Config, checkpoints: CheckpointManager) -> str:
    """At the end (and after a first Ctrl-C/SIGTERM): checkpoint, model file, sb3 export, learning curve.
    Each file written is named on stdout and in ``watchdog.WATCHDOG.written``, which a second signal's message reads."""
    written = watchdog.WATCHDOG.written
    last_checkpoint = checkpoints.save(ppo)
    written.append(last_checkpoint)
    print(f"checkpoint {last_checkpoint}", flush=True)
    if cfg.save_path:
        written.append(save_model(ppo, cfg.save_path))
        print(f"saved {written[-1]}", flush=True)
    if cfg.export_sb3:
        loader = (
            "sb3_contrib.RecurrentPPO"
            if cfg.recurrent
            else "sb3_contrib.MaskablePPO"
            if cfg.action_masks
            else "stable_baselines3.PPO"
        )
        written.append(export_sb3(ppo, cfg.export_sb3))
        print(f"exported {written[-1]} ({loader}.load)", flush=True)
    if cfg.plot:
        from ppo_dict.plot import plot_run

        try:
            written.append(plot_run(cfg.run_dir))
            print(f"plotted {written[-1]}", flush=True)
        except ValueError as exc:  # e.g. no episode finished yet: nothing to draw, the run itself is fine
            print(f"no learning curve: {exc}", file=sys.stderr, flush=True)
    return last_checkpoint


def start_plan(cfg: Config, backend: EnvBackend, rank: Optional[RankRun]) -> Any:
    """The run plan (a rank's: its envs on its CPUs), and the lines that say what it is."""
    # the envs' recipe, the main process's share (a rank's: its envs on its CPUs), the device: worked out once
    plan = plan_run(cfg, backend, None if rank is None else rank.info)
    who = ""
    if rank is not None:
        rank.ranks, who = plan.ranks, f"{rank.info.name}, envs {rank.envs_text(cfg)}: "
    if plan.spec.notice and (rank is None or rank.writes):
        print(plan.spec.notice, flush=True)
    if plan.backend.state_problem and (rank is None or rank.writes):  # said once: what a resume will do with the envs
        print(f"note: {resume_line(plan.backend)}", flush=True)
    if cfg.verbose >= 1:
        print(f"{who}layout: {plan.layout.text(cfg.mp_method)}", flush=True)
    notice = main_share_notice(plan.layout)
    if notice:
        print(f"{who}{notice}", flush=True)
    return plan


def build_trainer(
    cfg: Config,
    plan: Any,
    pool: EnvPool,
    logger: Logger,
    resumed: Optional[Resumed],
    agent: Optional[TrainedAgent],
    rank: Optional[RankRun],
) -> PPO:
    """PPO on the plan's pool (one rank's share of the run's over ranks), resumed or started from a trained agent."""
    ppo = PPO(cfg, pool, logger, device=plan.device, ranks=plan.ranks, layout=plan.layout)
    writes = rank is None or rank.writes
    if cfg.verbose >= 1:  # the plan's lines, as --dry_run says them
        print("\n".join(f"{'' if rank is None else rank.info.name + ': '}{line}" for line in ppo.plan.lines()), flush=True)
    if plan.device_line and writes:
        print(plan.device_line, flush=True)
    if device_notice(ppo.device) and writes:
        print(device_notice(ppo.device), flush=True)
    if resumed is not None:
        restore(ppo, resumed.state, resumed.file)
        # ALE's emulator bytes only from this run's own checkpoints
        envs = resume_envs(ppo, resumed.state, resumed.file, resumed.continues_in(cfg.run_dir))
        if writes:
            print(f"resumed from {resumed.file} at {ppo.num_timesteps} steps ({envs})", flush=True)
    elif agent is not None:
        apply_trained_agent(ppo, agent)
        stats = f" and {agent.vecnormalize}" if agent.vecnormalize else ""
        if writes:
            print(
                f"starting from the trained agent {agent.path}{stats} ({agent.n_updates} updates; steps count from 0, as "
                f"rl-zoo)",
                flush=True,
            )
    return ppo


def run(
    cfg: Config,
    backend: EnvBackend,
    resumed: Optional[Resumed] = None,
    agent: Optional[TrainedAgent] = None,
    fresh_dir: bool = False,
    rank: Optional[RankRun] = None,
) -> int:
    """Train with a validated config, its seed and run directory settled (``main``), on its probed env
    (resuming from ``resumed``, or starting from the trained ``agent``); returns the exit code.
    The run directory is claimed (``ppo_dict.run.run_dir.claim``; ``fresh_dir``: it must be created
    now) once the model is built and restored: a run refused until then writes nothing. ``rank``: this
    process is one rank of a torchrun run (``ppo_dict.run.ranks``): rank 0 alone writes the outputs."""
    stop = StopFlag(quiet=rank is not None)
    stop.install()
    watchdog.start(cfg.step_timeout, hard_exit=True, label=cfg.env)
    watchdog.WATCHDOG.written = []  # this run's (main() may run more than once in a process)
    if rank is not None:  # every rank stops after the same update, or drops the same rollout (ppo_dict.run.ranks)
        watchdog.WATCHDOG.stop_grace = float("inf")
    torch.set_num_threads(cfg.torch_threads)
    plan, writes = start_plan(cfg, backend, rank), rank is None or rank.writes
    logger, outputs = Logger(verbose=cfg.verbose if writes else 0), None
    start, exit_code, last_checkpoint = time.time(), 1, None
    pool = plan.env_pool()
    try:
        ppo = build_trainer(cfg, plan, pool, logger, resumed, agent, rank)
        if rank is None:  # over ranks, every rank finishes the update and drops a rollout together (ppo_dict.run.ranks)
            stop.phase, ppo.stop_asked = (lambda: ppo.phase), (lambda: stop.signum is not None)
        # every save_freq steps or save_every_minutes (rank 0's clock deciding for every rank); asked alike on every rank
        save_due = SaveDue(
            cfg.save_freq, cfg.save_every_minutes, ppo.num_timesteps, None if rank is None else rank.from_rank_0
        )
        if writes:
            outputs = Outputs(cfg, ppo, plan.spec, logger, resumed, fresh_dir, save_due)
        after_update = (lambda m: None) if outputs is None else outputs.after_update
        if rank is None:
            learn_until_stopped(ppo, pool, stop, after_update)
        else:  # the checkpoints and the stop, every rank together
            after_update = rank.before_checkpoints(after_update, save_due)
            learn_until_stopped(ppo, pool, stop, after_update, lambda: rank.any_stop(stop.signum) is not None, say=writes)
            stop.signum = rank.stopped(ppo, stop.signum)
        last_checkpoint = None if outputs is None else write_outputs(ppo, cfg, outputs.checkpoints)
        exit_code = stop.exit_code
    except KeyboardInterrupt:
        print(f"interrupted twice: stopped {watchdog.stopped_text(watchdog.WATCHDOG.written)}", file=sys.stderr, flush=True)
        exit_code = 128 + (stop.signum or signal.SIGINT)
        return exit_code
    finally:
        stop.closing = True  # a signal from here on lets the workers, outputs and lock close (ppo_dict.run.stopping)
        pool.close()
        if outputs is not None:
            outputs.close(exit_code)
    resume_step = 0 if resumed is None else resumed.steps
    if writes:
        print(
            json.dumps(summary(ppo, cfg, time.time() - start, stop.signum is not None, last_checkpoint, resume_step)),
            flush=True,
        )
    return exit_code


def failed(exc: Exception, rank: Optional[RankRun]) -> int:
    """The exit status of a run that raised ``exc`` (2: a checkpoint or setting refused, else 1), its one message said;
    over ranks, the rank's fault (``ppo_dict.run.ranks``). Anything else is raised on: a bug, with its traceback."""
    code = 2 if isinstance(exc, (CheckpointError, ConfigError)) else 1
    if rank is not None:
        return rank.fault(exc, code)
    # a checkpoint that does not fit this config; a run directory taken meanwhile
    if isinstance(exc, (CheckpointError, ConfigError)):
        print(f"error: {exc}", file=sys.stderr)
    elif isinstance(exc, (PPODictError, OSError)):
        # an env failed, hung or returned NaN, a worker died, a disk filled: which and where
        print(f"error: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
    else:
        raise exc
    return code


def main(argv: Optional[list[str]] = None, line: Optional[CommandLine] = None) -> int:
    """The command line ``argv`` (None: ``sys.argv``), or ``line``, already read from it; returns the exit status."""
    startup.imported()
    info = join_ranks()  # started by torchrun: this process is one rank of the run (ppo_dict.run.ranks); None: a plain run
    rank = None if info is None else RankRun(info)
    writes = rank is None or rank.writes
    if line is None:  # the one parse of the command line: argparse exits 2 on unknown flags
        line = read_command_line(argv)
    flags, unreadable, dry_run = line.flags, line.unreadable, line.dry_run
    resumed, agent = sources(flags, unreadable)
    if "resume" in unreadable or "trained_agent" in unreadable:  # the config's base is missing: nothing else to judge
        print(f"error: {ConfigError(list(unreadable.values()))}", file=sys.stderr)
        return 2
    base = None if agent is None else agent.saved
    # a checkpoint's config proposes values; where the run writes and what it trusts are the command line's
    if resumed is not None:
        base = file_effects.file_values(resumed.state["config"], flags, resumed.file)
    cfg, more = read_config(flags, base=base, pinned=None if agent is None else agent.pinned, algo=line.algo)
    check, refused = check_everywhere(cfg, agent, {**more, **unreadable}, resumed, flags, dry_run, rank)
    if refused is not None:
        if writes:
            print(f"error: {refused}", file=sys.stderr)
        return 2
    base = (
        "its checkpoint's config"
        if resumed is not None
        else "the trained agent's saved ones"
        if agent is not None
        else "sb3's defaults"
    )
    applied = "\n".join(filter(None, [hyperparams_text(cfg, base, read_file=resumed is None), line.algo_note]))
    if dry_run:
        local = None if rank is None else cfg.layout(check.backend.unit, rank=rank.info)  # the plan is this rank's
        ranks = "" if rank is None else "\n" + rank.layouts_text(cfg, local)
        if writes:
            print(
                dry_run_text(cfg, check, applied, None if rank is None else rank_rows(cfg, rank.info), local) + ranks,
                flush=True,
            )
        return 0
    # as rl-zoo prints them
    if (cfg.hyperparams is not None or line.algo_note) and (resumed is None or "hyperparams" in flags) and writes:
        print(applied, flush=True)
    cfg, fresh_dir = settle_everywhere(cfg, flags, rank, default_run_dir)
    if writes and resumed is not None:
        say_where_a_resume_writes(cfg, resumed, "run_dir" in flags)
    try:
        return run(cfg, check.backend, resumed, agent, fresh_dir=fresh_dir, rank=rank)
    except Exception as exc:  # noqa: BLE001 (over ranks, anything one rank raises ends the run with its one message)
        return failed(exc, rank)


if __name__ == "__main__":
    sys.exit(main(line=COMMAND_LINE))
