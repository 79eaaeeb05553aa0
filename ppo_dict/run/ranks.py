"""The command line as one rank of a run that ``torchrun`` started: joining, agreeing, one run's outputs, one message.

``torchrun --standalone --nproc-per-node 2 -m ppo_dict.main_ppo ...`` starts one process per rank with the same
flags. Each rank joins the default process group (gloo, through torchrun's rendezvous and store: its
``--rdzv-conf join_timeout`` bounds the wait for the others; nothing here re-implements it), keeps its share of
this host's CPUs (its affinity pinned to them, so its layout, its workers and their threads stay there), checks
the config like a single process and refuses it on every rank if one rank refuses it, before any env starts.
Rank 0 decides what is drawn or timed (a seed not given, the default run directory) and writes the run's
outputs; every rank trains (``ppo_dict.algo.ranks``).

Faults: a rank that raises prints one ``error: rank r (host): ...`` line and leaves its message in torchrun's store
before it exits; the others, whose next collective fails, end without a word of their own, except where no rank
left a message (one killed, or hung past the group's timeout): then the first to notice names the ranks that are
gone. torchrun's agent then ends every rank still running (SIGTERM, then SIGKILL) and reports their exits.
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import io
import os
import pickle
import random
import signal
import sys
import time
import traceback
from datetime import timedelta
from typing import Any, Callable, Iterator, Optional

import numpy as np
import torch
import torch.distributed as dist

from ppo_dict.algo.ranks import Ranks
from ppo_dict.algo.rollout.rollout_step import RankRows
from ppo_dict.core import file_effects
from ppo_dict.core.config import Config
from ppo_dict.core.errors import ConfigError, PPODictError, RankError, RankLostError, RenderBackendError
from ppo_dict.core.layout import Layout, layout_problems
from ppo_dict.core.machine import cpu_budget
from ppo_dict.core.reading import one_line
from ppo_dict.core.ranks import RankInfo, cpu_share, env_range, ranks_text
from ppo_dict.interop.trained_agent import TrainedAgent
from ppo_dict.run import rendezvous
from ppo_dict.run.checks import check_run
from ppo_dict.run.env_states import entries_of, local_entries
from ppo_dict.run.checkpoint import Resumed

#: Seconds a collective waits for the other ranks before it gives up: torch's default (a rank may spend long in its
#: part of a step: an evaluation or checkpoint on rank 0). A rank that dies ends the others at once, one that hangs
#: in an env after ``--step_timeout`` (its own timeout raises).
GROUP_TIMEOUT = 1800.0
#: The store keys (torchrun's store, which outlives the ranks): the first fault's message, and who reported a loss.
FAULT, LOST, ALIVE, HOST = "ppo_dict/fault", "ppo_dict/lost", "ppo_dict/alive/", "ppo_dict/host/"
#: Seconds the ranks that lost another one wait for each other, to tell who is gone.
ROLL_CALL = 2.0
#: What to do after a rank failed.
RESUME_HINT = "--resume auto with the same command continues from the last checkpoint"


def join_ranks(environ: Optional[dict[str, str]] = None) -> Optional[RankInfo]:
    """Join the run torchrun started (None: no torchrun, or one rank: a plain run): pin this process to its share of
    the host's CPUs, reach the store within its own timeout (``ppo_dict.run.rendezvous``), join the default process
    group (gloo) on it unless the program joined it already. An environment that places no rank, or a store not
    reached, is one ``error:`` line and the exit (2, 1)."""
    env = os.environ if environ is None else environ
    try:
        info = RankInfo.from_env(env, store=True)
        rendezvous.rendezvous_timeout(env)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr, flush=True)
        raise SystemExit(2) from None
    if info is None:
        return None
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, cpu_share(sorted(os.sched_getaffinity(0)), cpu_budget()[0], info.local_rank, info.local_world))
    if not dist.is_initialized():
        import torch._dynamo  # noqa: F401  (before the group is made: see leave)

        try:
            store = rendezvous.store(info, env)
        except RankError as exc:
            print(f"error: {exc}", file=sys.stderr, flush=True)
            raise SystemExit(1) from None
        store.set_timeout(timedelta(seconds=GROUP_TIMEOUT))  # the collectives' timeout from here on
        dist.init_process_group(
            "gloo",
            store=dist.PrefixStore("default_pg", store),
            rank=info.rank,
            world_size=info.world,
            timeout=timedelta(seconds=GROUP_TIMEOUT),
        )
        atexit.register(leave)
    store = _store()
    if store is not None:
        store.set(f"{HOST}{info.rank}", info.host)
    return info


def leave() -> None:
    """Leave the process group :func:`join_ranks` made, at exit while the interpreter is whole: the group is released and
    its gloo threads joined. A gloo thread still alive when the interpreter ends aborts the process (SIGABRT,
    "terminate called without an active exception") if it then frees a collective's tensors, which takes the GIL.
    Hence :func:`join_ranks` imports ``torch._dynamo`` before it makes the group: imported after (the run's check builds
    the policy on the meta device, which imports it), it keeps the group alive past ``destroy_process_group``
    (torch 2.13), and with it the threads (tests/test_torchrun.py checks they are gone)."""
    if dist.is_initialized():
        dist.destroy_process_group()


def _store() -> Any:
    """torchrun's store (the default group's), with a short timeout for the few keys read here; None where there is none."""
    try:
        store = dist.distributed_c10d._get_default_store()
        store.set_timeout(timedelta(seconds=5))
        return store
    except Exception:  # noqa: BLE001 (a program's own group without a store: faults are then reported by each rank)
        return None


def rank_rows(cfg: Config, info: RankInfo) -> RankRows:
    """This rank's envs of ``cfg``'s global ones, as the run's plan names them (its policy steps sample with their draws)."""
    envs = env_range(cfg.num_envs, info.rank, info.world)
    return RankRows(info.name, envs.start, envs.stop, cfg.num_envs)


def rank_problems(cfg: Config, info: RankInfo, unit: int = 1) -> list[str]:
    """What this config cannot do as one of ``info.world`` ranks, one line each (torchrun's settings named)."""
    world, problems = info.world, []
    if cfg.num_envs < world:
        problems.append(
            f"n_envs={cfg.num_envs}: fewer envs than the {world} ranks torchrun started; each rank steps at least one"
        )
    unsupported = [
        (cfg.recurrent, f"model={cfg.model!r} (RecurrentPPO)"),
        (cfg.double_buffer, "double_buffer=True"),
        (cfg.use_sde, "use_sde=True"),
        (unit > 1, "a Godot game (its agents come in units)"),
    ]
    problems += [
        f"{what}: not supported under torchrun (one rank, or a plain run, trains it)" for flag, what in unsupported if flag
    ]
    if cfg.device not in ("cpu", "auto"):
        problems.append(f"device={cfg.device!r}: under torchrun the ranks train on the CPU (gloo); --device cpu")
    envs = env_range(cfg.num_envs, info.rank, info.world)
    if len(envs):  # the layout settings count per rank: judged on this rank's envs
        problems += [
            f"{p} (rank {info.rank} steps {len(envs)} of the {cfg.num_envs} envs: the layout settings count per rank)"
            for p in layout_problems(
                len(envs), cfg.num_workers, cfg.envs_per_worker, cfg.main_envs, cfg.main_steps_envs, cfg.double_buffer, unit
            )
        ]
    return problems


class RankRun:
    """One rank's part of a command-line run: agreements before the start, outputs on rank 0, the stop and the
    checkpoints every rank reaches together, and the end's message."""

    def __init__(self, info: RankInfo):
        self.info = info
        self.ranks: Optional[Ranks] = None
        self.group = Ranks(info, info.world)  # collectives before the run's env count is known
        # which global envs this rank steps, in words (a fault's message: env indices are the rank's own)
        self.envs = "no envs yet"

    @property
    def writes(self) -> bool:
        """Whether this rank writes the run's outputs (rank 0)."""
        return self.info.rank == 0

    def agree(self, problems: list[str]) -> list[str]:
        """Every rank's problems (each once; one only some ranks found names them): a config is refused on all or none."""
        everyone = self.group.gather_objects(list(problems), what="the config check")
        merged: dict[str, list[int]] = {}
        for rank, found in enumerate(everyone):
            for problem in found:
                merged.setdefault(problem, []).append(rank)
        return [
            p if len(who) == self.info.world else f"{p} (on rank{'s' * (len(who) > 1)} {', '.join(map(str, who))})"
            for p, who in merged.items()
        ]

    def first(self, value: Any, what: str) -> Any:
        """Rank 0's ``value`` on every rank (a seed drawn, a run directory named by the time)."""
        return self.group.from_first(value, what)

    def layouts_text(self, cfg: Config, layout: Layout) -> str:
        """``--dry_run``'s lines for the ranks: the split of the envs, then each rank's host and layout."""
        lines = self.group.gather_objects((self.info.host, layout.text(cfg.mp_method)), what="the dry run's layouts")
        head = f"ranks: {ranks_text(cfg.num_envs, self.info.world)}; the update over all of them (gloo)"
        return "\n".join([head, *(f"  rank {r} ({host}): {text}" for r, (host, text) in enumerate(lines))])

    def envs_text(self, cfg: Config) -> str:
        """This rank's envs in words: ``4-7 of 8``."""
        envs = env_range(cfg.num_envs, self.info.rank, self.info.world)
        self.envs = f"{envs.start}-{envs.stop - 1} of {cfg.num_envs} (its env k is env {envs.start} + k)"
        return f"{envs.start}-{envs.stop - 1} of {cfg.num_envs}"

    def before_checkpoints(
        self, after_update: Callable[[Any], None], save_due: Callable[[int], bool]
    ) -> Callable[[Any], None]:
        """``after_update`` (rank 0's services; nothing on the others) after the ranks' agreement on every update whose
        checkpoint is due (``save_due``, asked alike on every rank): a checkpoint is written when every rank reached it."""

        def after(ppo: Any) -> None:
            due = save_due(ppo.num_timesteps)
            if due:
                self.agree_state(ppo)
                ppo.env_snapshot = self.gather_envs(local_entries(ppo))
            after_update(ppo)
            if due:
                ppo.env_snapshot = None

        return after

    def stopped(self, ppo: Any, signum: Optional[int]) -> Optional[int]:
        """The end of training on every rank together: the stop any rank received (None: none), said once by rank 0,
        and the ranks' agreement before rank 0 writes the last checkpoint."""
        signum = self.any_stop(signum)
        if signum and self.writes:
            print(
                f"{signal.Signals(signum).name} received: every rank stopped after the same update ({ppo.num_timesteps} "
                f"steps); rank 0 saves the run once",
                file=sys.stderr,
                flush=True,
            )
        self.agree_state(ppo)
        ppo.env_snapshot = self.gather_envs(ppo.env_local if ppo.env_local is not None else local_entries(ppo))
        return signum

    def gather_envs(self, local: Any) -> Optional[dict[str, Any]]:
        """Every rank's envs (their states and the next rollout's rows, ``ppo_dict.run.env_states``) as rank 0's
        checkpoint holds them: rank 0's value; None on the other ranks."""
        parts = self.ranks.gather_objects(local, what="the envs' states") if self.ranks else [local]
        return entries_of(parts) if self.writes else None

    def from_rank_0(self, decision: bool) -> bool:
        """Rank 0's ``decision`` on every rank (each rank asks at the same point): a choice by a clock, which every rank
        must take alike."""
        mine = int(decision) if self.writes else 0
        return bool(self.ranks.largest(mine, what="rank 0's decision")) if self.ranks else decision

    def any_stop(self, stopped: Optional[int]) -> Optional[int]:
        """The stop signal any rank received (every rank stops after the same update), else None."""
        signum = self.ranks.largest(stopped or 0, what="the stop check") if self.ranks else (stopped or 0)
        return signum or None

    def agree_state(self, ppo: Any) -> None:
        """Before a checkpoint: every rank reached it with the same state (parameters, Adam, normaliser, RNG streams,
        episodes), which rank 0 then writes for all. A rank that differs is a :class:`RankError` naming it."""
        digests = self.ranks.gather_objects(state_digest(ppo), what="the checkpoint's agreement")
        odd = [r for r, digest in enumerate(digests) if digest != digests[0]]
        if odd:
            raise RankError(
                f"rank{'s' * (len(odd) > 1)} {', '.join(map(str, odd))} reached checkpoint step "
                f"{ppo.num_timesteps} with a state different from rank 0's (parameters, Adam, normaliser or RNG "
                f"streams): the ranks diverged"
            )

    @contextlib.contextmanager
    def quiet(self) -> Iterator[None]:
        """Ranks other than 0 say nothing of what every rank would say alike (rank 0 says it)."""
        if self.writes:
            yield
            return
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            yield

    def fault(self, exc: BaseException, code: int = 1) -> int:
        """The end of this rank after ``exc``: one message for the whole run (see the module doc); returns ``code``
        (1 where another rank was lost). An error not of ppo_dict's own (a bug) keeps its traceback."""
        if not isinstance(exc, PPODictError):
            traceback.print_exception(exc, file=sys.stderr)
        store = _store()
        if isinstance(exc, RankLostError):
            gone = self.roll_call(store)
            if store is None or (not _has(store, FAULT) and store.add(LOST, 1) == 1):
                named = ", ".join(f"rank {r} ({_get(store, f'{HOST}{r}') or 'host unknown'})" for r in gone) or "another rank"
                print(
                    f"error: {named} stopped answering (it died, hung or was killed: torchrun's report gives its exit); "
                    f"{exc}; every rank ends ({RESUME_HINT})",
                    file=sys.stderr,
                    flush=True,
                )
            return 1
        message = f"{self.info.name}, stepping envs {self.envs}: {type(exc).__name__}: {exc}"
        if store is None or store.add(f"{FAULT}/count", 1) == 1:
            if store is not None:
                store.set(FAULT, message)
            print(f"error: {message}", file=sys.stderr, flush=True)
        return code

    def roll_call(self, store: Any) -> list[int]:
        """The ranks that did not check in within :data:`ROLL_CALL` seconds (the lost ones), by the store."""
        if store is None:
            return []
        store.set(f"{ALIVE}{self.info.rank}", "1")
        time.sleep(ROLL_CALL)
        return [r for r in range(self.info.world) if not _has(store, f"{ALIVE}{r}")]


def _has(store: Any, key: str) -> bool:
    try:
        return bool(store.check([key]))
    except Exception:  # noqa: BLE001 (the store gone with the agent: nothing more to learn)
        return False


def _get(store: Any, key: str) -> Optional[str]:
    return store.get(key).decode() if store is not None and _has(store, key) else None


def state_digest(ppo: Any) -> str:
    """A digest of what every rank holds alike: parameters, Adam's state, the normaliser, the RNG streams, the episodes."""
    digest = hashlib.sha256()
    for tensor in ppo.policy.state_dict().values():
        digest.update(tensor.detach().cpu().numpy().tobytes())
    for state in ppo.optimizer.state_dict()["state"].values():
        for value in state.values():
            digest.update(value.cpu().numpy().tobytes() if isinstance(value, torch.Tensor) else repr(value).encode())
    if ppo.normalizer is not None:
        digest.update(pickle.dumps(ppo.normalizer.state_dict()))
    digest.update(torch.get_rng_state().numpy().tobytes())
    digest.update(pickle.dumps((np.random.get_state(), random.getstate())))
    digest.update(pickle.dumps([sorted(e.items()) for e in ppo.episodes.info_buffer]))
    return digest.hexdigest()


def check_everywhere(
    cfg: Config,
    agent: Optional[TrainedAgent],
    unreadable: dict[str, str],
    resumed: Optional[Resumed],
    flags: dict[str, Any],
    dry_run: bool,
    rank: Optional[RankRun],
) -> tuple[Any, Optional[PPODictError]]:
    """``(the run's check, None)``, or ``(None, why the run is refused)``: every problem, the machine's resources included;
    over ranks the same verdict on every rank (a problem one rank found refuses the run on all), said by rank 0."""
    check, refused = None, None
    try:
        with contextlib.nullcontext() if rank is None else rank.quiet():
            if resumed is not None:  # its config may import a module or launch a program: said first, refused by --dry_run
                file_effects.announce(resumed.file, cfg, flags, dry_run)
            if cfg.video:
                from ppo_dict.envs.make import prepare_video

                prepare_video(cfg.env)  # MuJoCo's headless GL backend, pygame without a display
            check = check_run(cfg, agent, unreadable, resumed=resumed)
    except (ConfigError, RenderBackendError) as exc:
        refused = exc
    except (OSError, ValueError, RecursionError) as exc:
        # a file a check read that no reader bounded yet: one message, never a traceback
        refused = ConfigError([f"the run cannot be checked: {one_line(exc)}"])
    if rank is None:
        return check, refused
    problems = [] if refused is None else refused.problems if isinstance(refused, ConfigError) else [str(refused)]
    problems = rank.agree(problems + ([] if check is None else rank_problems(cfg, rank.info, check.backend.unit)))
    return (None, ConfigError(problems)) if problems else (check, None)


def settle_everywhere(
    cfg: Config, flags: dict[str, Any], rank: Optional[RankRun], default_run_dir: Callable[[Config], str]
) -> tuple[Config, bool]:
    """The run's seed (drawn where not given) and run directory (``default_run_dir(cfg)`` where not given), rank 0's over
    ranks; and whether the directory must be created now."""
    if cfg.seed is None:
        seed = int(np.random.SeedSequence().generate_state(1)[0])
        cfg = cfg.replace(seed=seed if rank is None else rank.first(seed, "the seed"))
        if rank is None or rank.writes:
            print(f"seed: {cfg.seed} (drawn at random; pass --seed {cfg.seed} to repeat this run)", flush=True)
    if not cfg.run_dir:  # the run's config, settled: the plan, the pool and PPO check this one, once
        run_dir = default_run_dir(cfg)
        cfg = cfg.replace(run_dir=run_dir if rank is None else rank.first(run_dir, "the run directory"))
    fresh = "run_dir" not in flags and not os.path.exists(cfg.run_dir)
    return cfg, fresh if rank is None else rank.first(fresh, "the run directory")
