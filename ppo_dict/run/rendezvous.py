"""Meeting the other ranks: the rendezvous store reached within its own timeout, with a line while waiting.

torch's ``init_process_group`` (``env://``) connects to the store at ``MASTER_ADDR:MASTER_PORT`` and waits for
every rank under the one timeout it is given, which must stay long for the collectives after it (rank 0's
evaluations and checkpoints happen inside them: ``GROUP_TIMEOUT``, 1800 s). With a hand-set address where nothing
listens, or a rank that never starts, that was half an hour without a word. Here the store is reached first, within
:data:`RENDEZVOUS_TIMEOUT` seconds (``PPO_DICT_RENDEZVOUS_TIMEOUT``), each rank saying every
:data:`WAIT_LINE` seconds (first at half the timeout, where that is sooner) what it waits for; then the group is
made on that store with the collectives' timeout.

Under torchrun's own rendezvous (``TORCHELASTIC_USE_AGENT_STORE=True``) the store is torchrun's agent's, up before
any rank starts (torchrun bounds the wait for the other hosts with ``--rdzv-conf join_timeout``), so every rank
connects as a client at once; where the address is set by hand, rank 0 hosts the store, as torch's ``env://`` does.
"""

from __future__ import annotations

import socket
import time
from datetime import timedelta
from typing import Any, Mapping, TextIO

from ppo_dict.core.errors import RankError
from ppo_dict.core.logger import STDERR
from ppo_dict.core.ranks import RankInfo

#: the environment variable that sets :data:`RENDEZVOUS_TIMEOUT` (seconds)
TIMEOUT_VARIABLE = "PPO_DICT_RENDEZVOUS_TIMEOUT"
#: seconds a rank waits for the store and the other ranks before it gives up, naming the address
RENDEZVOUS_TIMEOUT = 300.0
#: seconds between the lines a waiting rank prints
WAIT_LINE = 15.0
#: each rank's key in the store once it reached it
JOINED = "ppo_dict/joined/"
#: the prefix of every key one attempt of the group writes (torchrun's restart count after it): torchrun's store
#: outlives a restart (``--max-restarts``), and a restarted group that read the lost group's keys would connect to
#: its dead ranks' addresses (gloo's "Connection refused") and see its faults and roll call as its own
ATTEMPT = "ppo_dict/attempt/"


def rendezvous_timeout(env: Mapping[str, str]) -> float:
    """:data:`RENDEZVOUS_TIMEOUT`, or the seconds ``PPO_DICT_RENDEZVOUS_TIMEOUT`` gives (``ValueError`` for one
    that is not a number of seconds in (0, 86400])."""
    text = env.get(TIMEOUT_VARIABLE)
    if text is None:
        return RENDEZVOUS_TIMEOUT
    try:
        seconds = float(text)
    except ValueError:
        seconds = float("nan")
    if not 0 < seconds <= 86400:
        raise ValueError(f"{TIMEOUT_VARIABLE}={text[:20]!r} is not a number of seconds in (0, 86400]")
    return seconds


def agent_store(env: Mapping[str, str]) -> bool:
    """Whether torchrun's agent hosts the store (every rank a client), as torch's ``_torchelastic_use_agent_store``."""
    return env.get("TORCHELASTIC_USE_AGENT_STORE") == str(True)


class Waiting:
    """Prints ``rank r (host): waiting for ...`` at most every :data:`WAIT_LINE` seconds (the first line at half a
    shorter timeout, so a rank always says what it waits for before it gives up), and says when time is up."""

    def __init__(self, info: RankInfo, where: str, timeout: float, log: TextIO):
        self.info, self.where, self.log = info, where, log
        self.start = time.monotonic()
        self.deadline, self.next_line = self.start + timeout, self.start + min(WAIT_LINE, timeout / 2)

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def tick(self, what: str) -> None:
        """A line now and then; :class:`RankError` naming the address once the time is up."""
        now = time.monotonic()
        waited = now - self.start
        if now >= self.deadline:
            raise RankError(
                f"{self.info.name}: waited {waited:.0f} s for {what} at {self.where}, in vain; check MASTER_ADDR "
                f"and MASTER_PORT (and that every rank started), or set {TIMEOUT_VARIABLE} to wait longer"
            )
        if now >= self.next_line:
            self.next_line = now + WAIT_LINE
            print(
                f"{self.info.name}: waiting for {what} at {self.where} ({waited:.0f} s of {self.deadline - self.start:.0f} s)",
                file=self.log,
                flush=True,
            )


def reach(host: str, port: int, wait: Waiting) -> None:
    """Wait until something listens at ``host:port`` (a TCP connection accepted, then closed)."""
    while True:
        try:
            with socket.create_connection((host, port), timeout=min(2.0, max(wait.left(), 0.1))):
                return
        except OSError:
            wait.tick("a store listening")
            time.sleep(0.5)


def store(info: RankInfo, env: Mapping[str, str], log: TextIO = STDERR) -> Any:
    """The store at ``MASTER_ADDR:MASTER_PORT`` once every rank of the run reached it, within the rendezvous timeout,
    seen under this attempt's prefix (:data:`ATTEMPT`); its timeout then set to ``group_timeout`` by the caller.
    :class:`RankError` names the address when it fails."""
    import torch.distributed as dist

    host, port = env["MASTER_ADDR"].strip(), int(env["MASTER_PORT"])
    wait = Waiting(info, f"{host}:{port} (MASTER_ADDR:MASTER_PORT)", rendezvous_timeout(env), log)
    hosts = not agent_store(env) and info.rank == 0
    if not hosts:
        reach(host, port, wait)
    try:
        found = dist.TCPStore(
            host,
            port,
            info.world,
            is_master=hosts,
            timeout=timedelta(seconds=max(wait.left(), 1.0)),
            wait_for_workers=False,
            multi_tenant=True,
        )
    except Exception as exc:  # noqa: BLE001 (torch's DistNetworkError, RuntimeError: the port taken, the host gone)
        raise RankError(
            f"{info.name}: cannot {'host' if hosts else 'reach'} the store at {host}:{port} "
            f"(MASTER_ADDR:MASTER_PORT): {' '.join(str(exc).split())[:200]}"
        ) from None
    attempt = dist.PrefixStore(f"{ATTEMPT}{env.get('TORCHELASTIC_RESTART_COUNT', '0')}", found)
    attempt.set(f"{JOINED}{info.rank}", info.host)
    keys = [f"{JOINED}{r}" for r in range(info.world)]
    while not attempt.check(keys):
        missing = [str(r) for r, key in enumerate(keys) if not attempt.check([key])]
        wait.tick(f"rank {', '.join(missing[:8])}{' ...' if len(missing) > 8 else ''} to join")
        time.sleep(0.5)
    return attempt
