"""One run over several processes (ranks) that ``torchrun`` started: who this rank is, which envs it steps, which CPUs it uses.

Pure bookkeeping, no communication (``ppo_dict.run.ranks`` joins the process group, ``ppo_dict.algo.ranks``
holds the collectives). ``torchrun`` tells each process its place through the environment: ``RANK`` and
``WORLD_SIZE`` (global), ``LOCAL_RANK`` and ``LOCAL_WORLD_SIZE`` (on this host). ``n_envs`` stays the run's
global count: rank r steps the contiguous envs :func:`env_range` gives it (env i is env i wherever it steps: its
seed ``seed + i``, its place in sb3's buffer order), and the ranks of one host split its CPUs (:func:`cpu_share`)
instead of each taking them all.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from typing import Mapping, Optional, Sequence


@dataclass(frozen=True)
class RankInfo:
    """This process's place in a run of ``world`` ranks (``local_*``: among the ranks of its host ``host``)."""

    rank: int
    world: int
    local_rank: int
    local_world: int
    host: str

    @classmethod
    def from_env(cls, environ: Optional[Mapping[str, str]] = None, store: bool = False) -> Optional["RankInfo"]:
        """This process's place as ``torchrun`` wrote it in the environment; None where it did not (a plain run)
        or where the run has one rank (``WORLD_SIZE=1``: a plain run too, sb3's numbers bit for bit). ``ValueError``
        names every variable that is missing, not a number or out of its range (:func:`environment_problems`; ``store``:
        the store's address too)."""
        env = os.environ if environ is None else environ
        problems = environment_problems(env, store)
        if problems:
            raise ValueError(f"torchrun's environment does not describe a rank: {'; '.join(problems)}")
        world = int(env.get("WORLD_SIZE", "1"))
        if world <= 1:
            return None
        rank = int(env["RANK"])
        return cls(
            rank, world, int(env.get("LOCAL_RANK", rank)), int(env.get("LOCAL_WORLD_SIZE", world)), socket.gethostname()
        )

    @property
    def name(self) -> str:
        """``rank 1 (host)``: how messages name this rank."""
        return f"rank {self.rank} ({self.host})"


def _whole(env: Mapping[str, str], name: str, low: int, high: int, default: Optional[str] = None) -> tuple[Optional[int], str]:
    """``(the variable's value, "")``, or ``(None, why not)``: a whole number in [low, high]."""
    text = env.get(name, default)
    if text is None:
        return None, f"{name} is not set"
    try:
        value = int(text.strip())
    except ValueError:
        return None, f"{name}={text[:20]!r} is not a whole number"
    return (value, "") if low <= value <= high else (None, f"{name}={value} is not in [{low}, {high}]")


def environment_problems(env: Mapping[str, str], store: bool = False) -> list[str]:
    """What keeps ``env`` from placing a rank (empty: a plain run, or a rank of a run of ``WORLD_SIZE`` ranks):
    ``WORLD_SIZE``, ``RANK``, ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE`` whole numbers in their ranges, and (``store``:
    the rank is joining) the store's ``MASTER_ADDR`` and ``MASTER_PORT`` (a port number) that the ranks meet at."""
    world, problem = _whole(env, "WORLD_SIZE", 1, 2**20, "1")
    if world is None or world == 1:
        return [problem] if problem else []
    rank, rank_problem = _whole(env, "RANK", 0, world - 1)
    local_world, local_problem = _whole(env, "LOCAL_WORLD_SIZE", 1, world, str(world))
    local_rank_problem = (
        ""
        if rank is None and "LOCAL_RANK" not in env
        else _whole(env, "LOCAL_RANK", 0, (local_world or world) - 1, str(rank))[1]
    )
    problems = [p for p in (rank_problem, local_problem, local_rank_problem) if p]
    if store:
        problems += [] if env.get("MASTER_ADDR", "").strip() else ["MASTER_ADDR is not set"]
        problems += [p for p in [_whole(env, "MASTER_PORT", 1, 65535)[1]] if p]
    return problems


def env_range(n_envs: int, rank: int, world: int) -> range:
    """The global envs rank ``rank`` of ``world`` steps: contiguous, as even as whole envs allow, the first ranks
    taking the remainder (10 envs on 4 ranks: 3, 3, 2, 2); empty where there are fewer envs than ranks."""
    base, extra = divmod(n_envs, world)
    start = rank * base + min(rank, extra)
    return range(start, start + base + (rank < extra))


def env_ranges(n_envs: int, world: int) -> list[range]:
    """Every rank's :func:`env_range`, in rank order (their concatenation is ``range(n_envs)``)."""
    return [env_range(n_envs, rank, world) for rank in range(world)]


def cpu_share(cpus: Sequence[int], budget: int, local_rank: int, local_world: int) -> list[int]:
    """The CPUs of ``cpus`` (this process's affinity mask, sorted) that local rank ``local_rank`` of ``local_world``
    keeps: its contiguous part of ``budget`` of them (the CPUs a run may use here: the mask, at most a cgroup
    quota), the first ranks taking the remainder, at least one CPU each (ranks share CPUs only where there are
    fewer CPUs than ranks)."""
    cpus = sorted(cpus)
    budget = max(1, min(budget, len(cpus)))
    if local_world >= budget:
        return [cpus[local_rank % budget]]
    part = env_range(budget, local_rank, local_world)
    return [cpus[i] for i in part]


def ranks_text(n_envs: int, world: int) -> str:
    """The split in words: ``10 envs over 4 ranks: 3/3/2/2 (rank 0: envs 0-2, ...)``."""
    ranges = env_ranges(n_envs, world)
    sizes = "/".join(str(len(r)) for r in ranges)
    spans = ", ".join(f"rank {r}: envs {p.start}-{p.stop - 1}" if len(p) else f"rank {r}: none" for r, p in enumerate(ranges))
    return f"{n_envs} envs over {world} ranks: {sizes} ({spans})"
