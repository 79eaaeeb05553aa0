"""What this machine lets a run use: CPU cores, memory, /dev/shm, and the kernel's process and file limits.

Read once per check (:meth:`Machine.probe`); the checks take a :class:`Machine`, so that a test can
ask how a run would be judged on another machine (a 64 MB Docker /dev/shm, a low ``ulimit -u``).
Linux files are read where they exist; elsewhere a limit that cannot be read is treated as absent.
"""

from __future__ import annotations

import os
import resource
import tempfile
from dataclasses import dataclass
from typing import Optional

#: Capabilities that lift RLIMIT_NPROC (CAP_SYS_ADMIN, CAP_SYS_RESOURCE): bits of /proc/self/status's CapEff.
NPROC_EXEMPT_CAPS = (1 << 21) | (1 << 24)


@dataclass(frozen=True)
class Machine:
    """The machine as a run would find it now.

    Attributes:
        cpus: logical CPUs this process may run on (its affinity mask, and a cgroup CPU quota).
        memory_available: bytes a new allocation can get without swapping (``MemAvailable``, and
            what a cgroup memory limit leaves).
        shm_free, tmp_free: free bytes in /dev/shm and the temp dir (``multiprocessing`` puts shared
            arrays in the first that has room).
        nproc_limit: ``ulimit -u`` (RLIMIT_NPROC, soft), or None where it is unlimited or not
            enforced (the kernel does not apply it to root); ``user_tasks``: the processes and threads
            this user runs now, which count against it.
        task_room: processes and threads the kernel can still create (``pid_max``/``threads-max``
            less the tasks running), or None where unknown.
        nofile_limit: ``ulimit -n`` (RLIMIT_NOFILE, soft); ``open_files``: this process's open descriptors.
    """

    cpus: int
    memory_available: Optional[int]
    shm_free: Optional[int]
    tmp_free: Optional[int]
    nproc_limit: Optional[int]
    user_tasks: int
    task_room: Optional[int]
    nofile_limit: Optional[int]
    open_files: int

    @classmethod
    def probe(cls) -> "Machine":
        nproc = nproc_limit()
        return cls(
            usable_cpus(),
            memory_available(),
            free_bytes("/dev/shm"),
            free_bytes(tempfile.gettempdir()),
            nproc,
            0 if nproc is None else user_tasks(),
            task_room(),
            soft_limit(resource.RLIMIT_NOFILE),
            open_files(),
        )


def physical_cores() -> int:
    """Physical CPU cores this process may run on: distinct (package, core) pairs in /proc/cpuinfo,
    at most its CPU budget (:func:`cpu_budget`: the affinity mask, ``taskset`` or a container's cpuset,
    and a cgroup CPU quota); else os.cpu_count(). Where threads or looking waits must not share a core
    (the update's threads, :func:`~ppo_dict.vec.group.default_spin`); the layout counts :func:`cpu_budget`."""
    return min(_physical_cores(), cpu_budget()[0])


def _physical_cores() -> int:
    try:
        with open("/proc/cpuinfo") as f:
            pairs, package = set(), None
            for line in f:
                name, _, value = line.partition(":")
                name = name.strip()
                if name == "physical id":
                    package = value.strip()
                elif name == "core id":
                    pairs.add((package, value.strip()))
        if pairs:
            return len(pairs)
    except OSError:
        pass
    return os.cpu_count() or 1


def _read(path: str) -> Optional[str]:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


#: What bounds :func:`cpu_budget`'s count, in words for the layout line.
AFFINITY, QUOTA, CPU_COUNT = "affinity mask", "cgroup CPU quota", "cpu count"


def usable_cpus() -> int:
    """Logical CPUs this process may run on: its affinity mask, at most a cgroup's CPU quota (rounded up)."""
    return cpu_budget()[0]


def cpu_budget() -> tuple[int, str]:
    """``(logical CPUs this process may run on, what bounds them)``: its affinity mask
    (:data:`AFFINITY`; ``os.cpu_count()``, :data:`CPU_COUNT`, where there is none), or a cgroup's CPU
    quota (:data:`QUOTA`, rounded up) where that is lower. Not /proc/cpuinfo's core ids: inside a VM
    they can count fewer cores than the CPUs the process may use."""
    if hasattr(os, "sched_getaffinity"):
        cpus, source = len(os.sched_getaffinity(0)), AFFINITY
    else:
        cpus, source = os.cpu_count() or 1, CPU_COUNT
    quota = (_read("/sys/fs/cgroup/cpu.max") or "").split()  # cgroup v2: "max 100000" or "200000 100000"
    if len(quota) != 2 or quota[0] == "max":
        v1 = _read("/sys/fs/cgroup/cpu/cpu.cfs_quota_us"), _read("/sys/fs/cgroup/cpu/cpu.cfs_period_us")
        quota = [v.strip() for v in v1] if all(v1) else []
    if len(quota) == 2 and quota[0].lstrip("-").isdigit() and int(quota[0]) > 0 and quota[1].isdigit() and int(quota[1]) > 0:
        allowed = -(-int(quota[0]) // int(quota[1]))
        if allowed < cpus:
            cpus, source = allowed, QUOTA
    return max(1, cpus), source


def memory_available() -> Optional[int]:
    """``MemAvailable`` from /proc/meminfo, at most what this process's cgroup memory limit leaves (bytes)."""
    available = None
    for line in (_read("/proc/meminfo") or "").splitlines():
        if line.startswith("MemAvailable:"):
            available = int(line.split()[1]) * 1024
    left = cgroup_memory_left()
    if left is not None:
        available = left if available is None else min(available, left)
    return available


def cgroup_memory_left() -> Optional[int]:
    """Limit less usage of this process's memory cgroup (v2 ``memory.max``, v1 ``memory.limit_in_bytes``), or None."""
    for line in (_read("/proc/self/cgroup") or "").splitlines():
        _, controllers, path = line.split(":", 2)
        if controllers == "":
            files = (f"/sys/fs/cgroup{path}/memory.max", f"/sys/fs/cgroup{path}/memory.current")
        elif "memory" in controllers.split(","):
            files = (
                f"/sys/fs/cgroup/memory{path}/memory.limit_in_bytes",
                f"/sys/fs/cgroup/memory{path}/memory.usage_in_bytes",
            )
        else:
            continue
        limit, usage = (_read(f) for f in files)
        if limit and usage and limit.strip().isdigit() and usage.strip().isdigit() and int(limit) < 2**60:
            return max(0, int(limit) - int(usage))
    return None


def free_bytes(path: str) -> Optional[int]:
    """Free bytes for an unprivileged writer on the filesystem holding ``path`` (None: no such path)."""
    try:
        st = os.statvfs(path)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


def soft_limit(which: int) -> Optional[int]:
    soft, _ = resource.getrlimit(which)
    return None if soft == resource.RLIM_INFINITY else soft


def nproc_limit() -> Optional[int]:
    """``ulimit -u`` where the kernel applies it: not to root, nor to CAP_SYS_ADMIN or CAP_SYS_RESOURCE holders."""
    limit = soft_limit(resource.RLIMIT_NPROC)
    if limit is None or os.getuid() == 0:
        return None
    for line in (_read("/proc/self/status") or "").splitlines():
        if line.startswith("CapEff:") and int(line.split()[1], 16) & NPROC_EXEMPT_CAPS:
            return None
    return limit


def user_tasks() -> int:
    """Processes and threads whose real user is this process's (what RLIMIT_NPROC counts)."""
    uid, count = str(os.getuid()), 0
    for pid in filter(str.isdigit, os.listdir("/proc") if os.path.isdir("/proc") else ()):
        fields = dict(line.split(":", 1) for line in (_read(f"/proc/{pid}/status") or "").splitlines() if ":" in line)
        if fields.get("Uid", "").split()[:1] == [uid]:
            count += int(fields.get("Threads", "1"))
    return count


def task_room() -> Optional[int]:
    """Tasks the kernel can still create: ``min(pid_max, threads-max)`` less the tasks running (``/proc/loadavg``)."""
    caps = [_read("/proc/sys/kernel/pid_max"), _read("/proc/sys/kernel/threads-max")]
    loadavg = (_read("/proc/loadavg") or "").split()
    if not all(caps) or len(loadavg) < 4 or "/" not in loadavg[3]:
        return None
    return max(0, min(int(c) for c in caps) - int(loadavg[3].split("/")[1]))


def open_files() -> int:
    try:
        return len(os.listdir("/proc/self/fd"))
    except OSError:
        return 0


def stat_fields(pid: int) -> Optional[list[str]]:
    """The fields of ``/proc/<pid>/stat`` after the command name (``[0]`` the state, ``[1]`` the parent,
    ``[3]`` the session, ``[19]`` the start time), None where the process is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()
    except (OSError, TypeError):
        return None
