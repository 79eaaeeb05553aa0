"""The run's plan: which rollout step, books, bootstrap and update run, and why, decided once.

One frozen :class:`Plan` names what a run runs, each part with its reason (the flags, the device, the layout the
machine's load left, the start probe's result), and the parts are built from it: the collector's policy steps
(``ppo_dict.algo.rollout.collect``: central, double-buffered, recurrent, graphed, each built with the global batch's
draws over ranks), the sharded step (built, probed and handed to every process here, before anything else is built)
and the update (``ppo_dict.algo.ppo``). Nothing swaps a part once it is built.

:func:`plan_rollout` decides it on a pool's own storage, at start; :func:`preview_plan` on storage laid out as the
run's will be, for ``--dry_run``, where no env has started: its policy step says what the start probe will decide, and
what the same probe found on that stand-in. :meth:`Plan.lines` is what both print.

None of it changes a number of the run but ``--double_buffer`` and a device other than the CPU (their lines say so):
the sharded step runs only where the probe found each process's rows to be the whole batch's, bit for bit.
"""

from __future__ import annotations

import pickle
from dataclasses import dataclass
from typing import Any, Callable, Optional

import cloudpickle
import torch

from ppo_dict.algo.networks.recurrent_policy import RecurrentActorCritic
from ppo_dict.algo.rollout.normalize import Normalizer
from ppo_dict.algo.rollout.rollout_step import PolicyStep, RankRows, StepObsToDevice
from ppo_dict.algo.rollout.sharded_rollout import ShardedRollout, processes_of, sharding_problem
from ppo_dict.core.config import Config
from ppo_dict.core.errors import RankError
from ppo_dict.core.layout import Layout
from ppo_dict.data.storage import RolloutStorage

#: The rollout step: the main process samples every env's actions (sb3's order), each process its own envs',
#: or the main process one half's while the workers step the other (``--double_buffer``).
CENTRAL, SHARDED, DOUBLE_BUFFERED = "central", "sharded", "double-buffered"
#: The update: sb3's loop on the CPU, sb3-contrib's sequence minibatches, the device's loop, the global batch over ranks.
EXACT, RECURRENT, DEVICE, RANKS = "exact", "recurrent", "device", "ranks"
#: What the policy step's reason starts with where the step could not be built, or the probe refused it.
NOT_BUILT = "the sharded step could not be built: "


@dataclass(frozen=True)
class Plan:
    """What a run's rollouts and updates run, and why (see the module doc).

    Attributes:
        step: :data:`CENTRAL`, :data:`SHARDED` or :data:`DOUBLE_BUFFERED`; ``step_why``: why.
        granule: the sharded step's windows (the probe's smallest granule whose windows agree), else None.
        probed: whether the start probe ran (False: a flag, the device or the policy ruled the sharded step out first).
        at_start: a ``--dry_run``'s plan: the probe's part is what the start probe will decide.
        workers: worker processes step envs (else every env steps in this process).
        recurrent, graphed, device: the recurrent step (LSTM states carried), replayed as CUDA graphs, the policy's device.
        books, bootstrap (properties, from the fields): where a step's books are kept and the time-limit bootstrap's
        form, in words. overlap: the per-env bootstrap and the episodes are owed, done while the workers step the next
        step. device_bootstrap: a step's cut episodes are valued in one batch on the device. update: :data:`EXACT`,
        :data:`RECURRENT`, :data:`DEVICE` or :data:`RANKS`; ``update_why``: what it is and why. ranks: over ``torchrun``
        ranks, this rank's envs of the global batch (every policy step samples with its rows of
            the global draws), else None.
        layout: the envs over the processes (``ppo_dict.core.layout``, the machine's load and the flags behind it), where
            the run was planned with one.
    """

    step: str
    step_why: str
    granule: Optional[int]
    probed: bool
    at_start: bool
    workers: bool
    recurrent: bool
    graphed: bool
    device: str
    overlap: bool
    device_bootstrap: bool
    update: str
    update_why: str
    ranks: Optional[RankRows] = None
    layout: Optional[Layout] = None

    @property
    def books(self) -> str:
        return books_words(self.step)

    @property
    def bootstrap(self) -> str:
        return bootstrap_words(self.step, self.recurrent, self.overlap, self.device_bootstrap, self.device)

    @property
    def step_line(self) -> str:
        """The ``policy step:`` line: where the step runs, and why."""
        where = "in each process for the envs it steps" if self.step == SHARDED else "in the main process for every env"
        kinds = [
            what
            for what, on in (
                (", recurrent", self.recurrent),
                (f", on {self.device}", self.device != "cpu"),
                (", replayed as a CUDA graph", self.graphed),
            )
            if on
        ]
        line = f"{where}{''.join(kinds)} ({self.step_why})"
        if self.at_start and self.probed:  # a dry run: no env started, the probe ran on storage laid out as the run's
            return (
                f"policy step: the start probe decides, on the run's own storage; here, on rows laid out as the run's: {line}"
            )
        return f"policy step: {line}"

    @property
    def policy_line(self) -> str:
        """:attr:`step_line` where worker processes step envs ("" where every env steps in this process)."""
        return self.step_line if self.workers else ""

    def lines(self) -> list[str]:
        """What ``--dry_run`` prints of the plan, and the run's start (the layout's line is said before, from
        :attr:`layout`)."""
        return [self.step_line, f"books: {self.books}", f"bootstrap: {self.bootstrap}", f"update: {self.update_why}"]


def central_line(why: str) -> str:
    return f"policy step: in the main process for every env ({why})"


def plan_rollout(
    cfg: Config,
    pool: Any,
    policy: Any,
    normalizer: Optional[Normalizer],
    device: torch.device,
    ranks: Optional[RankRows] = None,
    layout: Optional[Layout] = None,
) -> tuple[Plan, Optional[ShardedRollout]]:
    """The plan for a run on ``pool`` with ``policy`` and ``normalizer`` (``ranks``: this rank's envs of a run over ranks;
    ``layout``: the run plan's), and the sharded step where it is chosen: built, probed on the pool's own storage and
    given to every process."""
    workers = bool(hasattr(pool, "attach") and pool.blocks)
    processes = processes_of(pool.main_envs, pool.blocks) if workers else []
    return decide(
        cfg,
        pool.storage,
        pool.backend.label,
        processes,
        policy,
        normalizer,
        device,
        ranks,
        layout,
        pool.waits,
        attach=pool.attach if workers else None,
    )


def preview_plan(
    cfg: Config,
    storage: RolloutStorage,
    label: str,
    layout: Layout,
    policy: Any,
    normalizer: Optional[Normalizer],
    device: torch.device,
    ranks: Optional[RankRows] = None,
) -> Plan:
    """``--dry_run``'s plan: :func:`decide` on ``storage`` laid out as the run's (no env started, nothing handed to a
    process)."""
    processes = processes_of(layout.main, list(layout.blocks)) if layout.processes else []
    return decide(
        cfg, storage, label, processes, policy, normalizer, device, ranks, layout, bool(layout.processes), at_start=True
    )[0]


def decide(
    cfg: Config,
    storage: RolloutStorage,
    label: str,
    processes: list[tuple[range, bool]],
    policy: Any,
    normalizer: Optional[Normalizer],
    device: torch.device,
    ranks: Optional[RankRows],
    layout: Optional[Layout],
    waits: bool,
    attach: Optional[Callable[..., dict[int, Optional[str]]]] = None,
    at_start: bool = False,
) -> tuple[Plan, Optional[ShardedRollout]]:
    """The plan, and the sharded step where chosen (``attach``: gives it to the pool's processes; None: a preview)."""
    if ranks is not None and PolicyStep(policy, 1).sampler is None:
        raise RankError(
            f"{ranks.name}: the policy samples through its own forward, which cannot take the global batch's draws"
        )
    sharded, granule, probed, why = sharded_step(cfg, storage, label, processes, policy, normalizer, device, ranks, attach)
    recurrent = isinstance(policy, RecurrentActorCritic)
    step = DOUBLE_BUFFERED if cfg.double_buffer else SHARDED if granule is not None else CENTRAL
    overlap = step != DOUBLE_BUFFERED and waits
    device_bootstrap = device.type != "cpu" and not recurrent
    update, update_why = update_choice(cfg, device, recurrent, ranks)
    plan = Plan(
        step,
        why,
        granule,
        probed,
        at_start,
        bool(processes),
        recurrent,
        cfg.cuda_graphs,
        str(device),
        overlap,
        device_bootstrap,
        update,
        update_why,
        ranks,
        layout,
    )
    return plan, sharded


def sharded_step(
    cfg: Config,
    storage: RolloutStorage,
    label: str,
    processes: list[tuple[range, bool]],
    policy: Any,
    normalizer: Optional[Normalizer],
    device: torch.device,
    ranks: Optional[RankRows],
    attach: Optional[Callable[..., dict[int, Optional[str]]]],
) -> tuple[Optional[ShardedRollout], Optional[int], bool, str]:
    """``(sharded step or None, its granule, whether the probe ran, why)``: the sharded step where the run allows it,
    it can be built (its policy pickled, its shared block made) and the start probe passes; given to every process
    (``attach``) where one is given. A policy that cannot be pickled or a block that cannot be made is said, and the
    central step runs; any other error is a fault, and propagates."""
    if not processes:
        return None, None, False, "every env steps in this process"
    problem = sharding_problem(cfg, storage, policy, normalizer, device)
    if problem:
        return None, None, False, problem
    # the step the run's draws are made with (the global batch's over ranks)
    central = PolicyStep(policy, storage.n_envs, ranks)
    try:
        payload = cloudpickle.dumps(policy)
    except (pickle.PicklingError, TypeError) as exc:  # an attribute pickle cannot carry (a lock, an open file)
        return (
            None,
            None,
            False,
            f"{NOT_BUILT}its policy cannot be pickled for the other processes ({type(exc).__name__}: {exc})",
        )
    try:
        sharded = ShardedRollout(cfg, storage, label, policy, normalizer, central, payload)
    except OSError as exc:  # memfd_create, ftruncate or mmap refused (no memory, no descriptor left)
        return None, None, False, f"{NOT_BUILT}its shared block cannot be made ({type(exc).__name__}: {exc})"
    granule, why = sharded.probe(StepObsToDevice(storage, device), processes)
    if granule is None:
        return None, None, True, f"start probe: {why}"
    if attach is not None:
        program = sharded.program
        refused = attach(program, cloudpickle.dumps(program), [sharded.block.fd])
        sharded.block.release_fd()
        if any(refused.values()):
            worker, reason = next((w, reason) for w, reason in refused.items() if reason)
            return None, None, True, f"{NOT_BUILT}worker {worker} could not take it: {reason}"
    return sharded, granule, True, why


def books_words(step: str) -> str:
    if step == SHARDED:
        return (
            "each process its own envs' (finite checks, normalised rows, rewards, bootstrap, episode starts); the main "
            "process the whole batch's (VecNormalize's statistics, the episodes in sb3's order)"
        )
    if step == DOUBLE_BUFFERED:
        return (
            "the main process, each half's after its step (VecNormalize's statistics take each half as its own batch: not "
            "sb3's numbers)"
        )
    return "the main process, every env's after each step, in sb3's order"


def bootstrap_words(step: str, recurrent: bool, overlap: bool, device_bootstrap: bool, device: str) -> str:
    """The time-limit bootstrap's form, ``reward += gamma * V(terminal observation)`` where an episode was cut."""
    if step == SHARDED:
        return "in each process, for its envs cut by a time limit, the critic on a batch of one (sb3's shape)"
    if device_bootstrap:
        return f"a step's cut episodes valued in one batch on {device}, owed until the next step's synchronisation"
    if step == DOUBLE_BUFFERED and not recurrent:
        return "each half's cut episodes valued in one batch (not sb3's rounding)"
    critic = "the recurrent critic from the env's states after the step" if recurrent else "the critic"
    owed = ", done while the workers step the next step" if overlap else ""
    return f"per env in env order, {critic} on a batch of one (sb3's){owed}"


def update_choice(cfg: Config, device: torch.device, recurrent: bool, ranks: Optional[RankRows]) -> tuple[str, str]:
    """``(the update, its words)``: the device's loop for a feed-forward policy off the CPU, else the global batch's over
    ranks, else sb3-contrib's sequence minibatches for a recurrent policy, else sb3's loop."""
    if device.type != "cpu" and not recurrent:
        return DEVICE, (
            f"on {device}: the minibatch indices drawn on the device, no host work per minibatch (a feed-forward "
            "policy off the CPU; not bit-exact with sb3)"
        )
    if ranks is not None:
        return (
            RANKS,
            f"over ranks: each rank's rows of the global minibatch ({ranks.n_envs} envs), gradients all-reduced (torchrun)",
        )
    if recurrent:
        whole = "; whole sequences per LSTM call (--lstm_fast_path)" if cfg.lstm_fast_path else ""
        return RECURRENT, f"sb3-contrib's sequence minibatches, masked means (a recurrent policy{whole})"
    return EXACT, f"sb3's loop: numpy's permutation, the minibatches in order, Adam (on {device})"
