"""One run over several processes (ranks) that ``torchrun`` started: who this rank is, which envs it steps, which CPUs it uses.

Pure bookkeeping, no communication (``ppo_dict.run.ranks`` joins the process group, ``ppo_dict.algo.distributed``
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
    def from_env(cls, environ: Optional[Mapping[str, str]] = None) -> Optional["RankInfo"]:
        """This process's place as ``torchrun`` wrote it in the environment; None where it did not (a plain run)
        or where the run has one rank (``WORLD_SIZE=1``: a plain run too, sb3's numbers bit for bit)."""
        env = os.environ if environ is None else environ
        try:
            world = int(env.get("WORLD_SIZE", "1"))
            if world <= 1:
                return None
            rank = int(env["RANK"])
            local_rank = int(env.get("LOCAL_RANK", rank))
            local_world = int(env.get("LOCAL_WORLD_SIZE", world))
        except (KeyError, ValueError) as exc:
            raise ValueError(f"torchrun's environment is incomplete or not numbers (WORLD_SIZE={env.get('WORLD_SIZE')!r}, "
                             f"RANK={env.get('RANK')!r}, LOCAL_RANK={env.get('LOCAL_RANK')!r}, "
                             f"LOCAL_WORLD_SIZE={env.get('LOCAL_WORLD_SIZE')!r}): {exc}") from exc
        return cls(rank, world, local_rank, local_world, socket.gethostname())

    @property
    def name(self) -> str:
        """``rank 1 (host)``: how messages name this rank."""
        return f"rank {self.rank} ({self.host})"


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
