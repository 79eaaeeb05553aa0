"""The Optuna study a sweep runs on: opening its storage, joining it, recovering crashed trials.

Every sweep, whatever its method, is an Optuna study in a storage, so that any number of
processes on any number of machines can run trials of the same sweep (``--storage URL
--study_name NAME``):

* ``sqlite:///path.db`` (the default, in the sweep's output folder) or a journal file
  (``path.journal`` / ``path.log``, Optuna's ``JournalFileBackend``): processes on one machine;
* ``postgresql://user:password@host/db`` (or any other SQLAlchemy URL): processes on many machines.

A trial whose process dies is never lost: it stays in the study as ``FAIL`` with its
parameters, and a retry with the same parameters is queued (Optuna's ``RetryFailedTrialCallback``,
at most :data:`MAX_RETRY` times), which the next free worker of any process runs. A crash is
noticed two ways: on this machine, the next sweep process that starts sees that the process that
owned a running trial is gone (immediately, for every storage); on other machines, SQL storages
keep a heartbeat per running trial and fail the trials whose heartbeat stopped for
:data:`GRACE_PERIOD` seconds. A trial that failed by itself (its command exited non-zero, or
logged no metric) is failed for good: running it again would fail again.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import socket
import time
import warnings
from typing import Any, Callable, Iterator, Optional

from ppo_dict.core.errors import SweepError
from ppo_dict.core.machine import stat_fields

#: seconds between a running trial's heartbeats in SQL storages, and since the last one before it counts as crashed
HEARTBEAT_INTERVAL, GRACE_PERIOD = 30, 120
#: retries of one crashed trial (the first run included in the count: 3 runs at most)
MAX_RETRY = 2
#: user attribute set by the objective when its trial ends: "ok", "failed", or "interrupted"
OUTCOME = "outcome"
#: user attribute naming the process that runs the trial: {"host", "pid", "started"}
OWNER = "owner"


def redact(url: str) -> str:
    """``url`` with its password hidden, for messages: ``postgresql://me:***@host/db``."""
    return re.sub(r"(://[^:/@]+:)[^@]*@", r"\1***@", url)


def default_storage(out: str) -> str:
    """The embedded default: an SQLite file in the sweep's output folder."""
    return f"sqlite:///{os.path.abspath(os.path.join(out, 'optuna.db'))}"


def open_storage(url: str, on_stale_trial: Callable[[Any, Any], None]) -> Any:
    """An Optuna storage for ``url``; raises :class:`SweepError` naming the URL and the reason.

    ``on_stale_trial(study, trial)`` is called for each trial an SQL storage's heartbeat check fails.
    """
    try:
        if "://" not in url:
            if not url.endswith((".journal", ".log")):
                raise SweepError(
                    f"storage {url!r}: give a URL (sqlite:///sweep.db, postgresql://user:password@host/db) "
                    "or a journal file ending in .journal or .log"
                )
            os.makedirs(os.path.dirname(os.path.abspath(url)), exist_ok=True)
            from optuna.storages.journal import JournalFileBackend, JournalStorage

            return JournalStorage(JournalFileBackend(url))
        engine_kwargs: dict[str, Any] = {"pool_pre_ping": True}
        lock = None
        if url.startswith("sqlite:///"):
            lock = os.path.abspath(url[len("sqlite:///") :]) + ".lock"
            os.makedirs(os.path.dirname(lock), exist_ok=True)
            engine_kwargs["connect_args"] = {"timeout": 60}  # processes take turns writing; wait, don't fail
        elif url.startswith("postgresql"):
            engine_kwargs["connect_args"] = {"connect_timeout": 10}  # an unreachable host fails in seconds
        with one_at_a_time(lock):
            return open_rdb_storage(url, engine_kwargs, on_stale_trial)
    except SweepError:
        raise
    except ModuleNotFoundError as exc:
        raise SweepError(
            f"cannot open the Optuna storage {redact(url)}: {exc} "
            "(PostgreSQL needs psycopg: pip install 'psycopg[binary]', in ppo_dict's sweep extra)"
        ) from exc
    except Exception as exc:  # SQLAlchemy's OperationalError (refused, unknown host, bad password), a bad URL...
        reason = " ".join(str(exc).split("\n")[0].split())
        raise SweepError(f"cannot open the Optuna storage {redact(url)}: {type(exc).__name__}: {reason}") from exc


@contextlib.contextmanager
def one_at_a_time(lock_file: Optional[str]) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``lock_file`` (nothing when None): processes on one machine
    opening one new SQLite file take turns creating its tables."""
    if lock_file is None:
        yield
        return
    with open(lock_file, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def open_rdb_storage(url: str, engine_kwargs: dict[str, Any], on_stale_trial: Callable[[Any, Any], None]) -> Any:
    """Optuna's ``RDBStorage``, with the heartbeat on. Processes on several machines opening a new
    database at once race to create its tables and version row ("already exists", a duplicate
    key): the loser opens it again, now that they are there."""
    import optuna

    def rdb_storage() -> Any:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)  # heartbeat_interval
            return optuna.storages.RDBStorage(
                url,
                engine_kwargs=engine_kwargs,
                heartbeat_interval=HEARTBEAT_INTERVAL,
                grace_period=GRACE_PERIOD,
                heartbeat_stale_trial_callback=on_stale_trial,
            )

    for attempt in range(4):
        try:
            return rdb_storage()
        except Exception as exc:
            if not any(s in str(exc).lower() for s in ("already exists", "unique constraint", "duplicate key")):
                raise
            time.sleep(0.2 * (attempt + 1))
    return rdb_storage()


def definition(sweep: dict[str, Any], method: str) -> dict[str, Any]:
    """What every process joining a study must agree on: method, metric, parameters, command."""
    return json.loads(
        json.dumps(
            {
                "method": method,
                "metric": sweep["metric"],
                "parameters": sweep.get("parameters") or {},
                "command": sweep["command"],
            },
            sort_keys=True,
        )
    )


def join_study(storage: Any, name: str, sweep: dict[str, Any], method: str, sampler: Any) -> Any:
    """Create the study, or join it if another process did; refuse one made from another sweep."""
    import optuna

    goal = sweep["metric"].get("goal", "minimize")
    try:
        study = optuna.create_study(
            storage=storage,
            study_name=name,
            sampler=sampler,
            load_if_exists=True,
            direction="maximize" if goal == "maximize" else "minimize",
        )
    except ValueError as exc:  # e.g. the stored direction differs
        raise SweepError(f"study {name!r}: {exc}") from exc
    mine = definition(sweep, method)
    theirs = study.user_attrs.get("sweep")
    if theirs is None:
        study.set_user_attr("sweep", mine)
    elif theirs != mine:
        differ = sorted(k for k in mine if mine[k] != theirs.get(k))
        raise SweepError(
            f"study {name!r} was made from another sweep ({', '.join(differ)} differ): "
            "use another --study_name, or the same sweep file and --method"
        )
    return study


def process_start_time(pid: int) -> Optional[str]:
    """The kernel's start time of process ``pid`` (``/proc/<pid>/stat`` field 22), None if it is gone.

    With the pid it names one process for good: a pid reused by a later process has another start time.
    """
    fields = stat_fields(pid)
    return fields[19] if fields is not None and len(fields) > 19 else None


def this_process() -> dict[str, Any]:
    return {"host": socket.gethostname(), "pid": os.getpid(), "started": process_start_time(os.getpid())}


def owner_gone(owner: Optional[dict[str, Any]]) -> bool:
    """Whether the process that owns a trial is known to be gone (only decidable on its own host)."""
    if not owner or owner.get("host") != socket.gethostname():
        return False
    return process_start_time(int(owner["pid"])) != owner.get("started")


def retry(study: Any, trial: Any) -> None:
    """Queue a run of a crashed ``trial`` with its parameters, unless it was retried already or too often.

    As Optuna's ``RetryFailedTrialCallback`` (the same ``failed_trial`` / ``retry_history``
    attributes, and GridSampler's ``grid_id`` carried over), but without the crashed trial's user
    attributes: its owner, a dead process, must not be mistaken for the retry's.
    """
    import optuna

    retried = {n for t in study.get_trials(deepcopy=False) for n in t.system_attrs.get("retry_history", [])}
    if trial.number in retried or trial.user_attrs.get(OUTCOME) not in (None, "interrupted"):
        return
    system_attrs = {"failed_trial": trial.number, "retry_history": [], **trial.system_attrs}
    system_attrs["retry_history"] = [*system_attrs["retry_history"], trial.number]
    if len(system_attrs["retry_history"]) > MAX_RETRY:
        return
    study.add_trial(
        optuna.create_trial(
            state=optuna.trial.TrialState.WAITING,
            params=trial.params,
            distributions=trial.distributions,
            system_attrs=system_attrs,
        )
    )


def recover(study: Any, log: Callable[[str], None]) -> None:
    """Fail the running trials whose process on this host is gone; queue retries of crashed trials.

    Called when a sweep process starts, before its first trial: a killed sweep resumes here.
    """
    from optuna.exceptions import UpdateFinishedTrialError
    from optuna.trial import TrialState

    for trial in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        if owner_gone(trial.user_attrs.get(OWNER)):
            try:
                # what Optuna's fail_stale_trials does
                study._storage.set_trial_state_values(trial._trial_id, state=TrialState.FAIL)
            except UpdateFinishedTrialError:
                continue  # another process got there first
            log(f"trial {trial.number}: its process ({trial.user_attrs[OWNER]['pid']}) is gone: failed, and queued again")
    for trial in study.get_trials(deepcopy=False, states=(TrialState.FAIL,)):
        retry(study, trial)
