"""The Optuna study of a sweep: storages and their errors, joining, and crashed trials found and queued again."""

import subprocess
import sys

import optuna
import pytest

from ppo_dict.core.errors import SweepError
from ppo_dict.run.study import OUTCOME, OWNER, join_study, open_storage, owner_gone, recover, redact, retry, this_process

SWEEP = {
    "method": "random",
    "metric": {"name": "score", "goal": "maximize"},
    "command": ["${interpreter}", "${args}"],
    "parameters": {"x": {"min": 0.0, "max": 1.0}},
}


def test_storage_urls_and_what_is_wrong_with_them(tmp_path) -> None:
    assert redact("postgresql://me:s3cret@db.example/optuna") == "postgresql://me:***@db.example/optuna"
    assert redact("sqlite:///a/b.db") == "sqlite:///a/b.db"
    journal = open_storage(str(tmp_path / "deep" / "sweep.journal"), retry)
    assert type(journal).__name__ == "JournalStorage" and (tmp_path / "deep").is_dir()
    sqlite = open_storage(f"sqlite:///{tmp_path}/new/sweep.db", retry)
    assert type(sqlite).__name__ == "RDBStorage" and (tmp_path / "new" / "sweep.db").is_file()
    with pytest.raises(
        SweepError,
        match=r"storage 'sweep\.txt': give a URL \(sqlite:///sweep\.db, "
        r"postgresql://user:password@host/db\) or a journal file ending in \.journal or "
        r"\.log",
    ):
        open_storage("sweep.txt", retry)
    with pytest.raises(SweepError) as info:  # nothing listens on port 1: refused at once, and the password stays hidden
        open_storage("postgresql://me:s3cret@127.0.0.1:1/optuna", retry)
    assert str(info.value).startswith(
        "cannot open the Optuna storage postgresql://me:***@127.0.0.1:1/optuna: OperationalError: "
    )
    assert "refused" in str(info.value) and "s3cret" not in str(info.value)
    with pytest.raises(SweepError, match="cannot open the Optuna storage nosuchdb://x: NoSuchModuleError: "):
        open_storage("nosuchdb://x", retry)


def test_a_study_made_from_another_sweep_is_not_joined(tmp_path) -> None:
    storage = open_storage(f"sqlite:///{tmp_path}/s.db", retry)
    first = join_study(storage, "s", SWEEP, "random", optuna.samplers.RandomSampler())
    again = join_study(storage, "s", SWEEP, "random", optuna.samplers.RandomSampler())
    assert again._study_id == first._study_id and again.user_attrs["sweep"]["parameters"] == SWEEP["parameters"]
    other = {**SWEEP, "parameters": {"x": {"values": [1, 2]}}}
    with pytest.raises(
        SweepError, match=r"study 's' was made from another sweep \(method, parameters differ\): use another --study_name"
    ):
        join_study(storage, "s", other, "grid", optuna.samplers.RandomSampler())


def test_owner_of_a_trial_is_one_process_for_good() -> None:
    me = this_process()
    assert not owner_gone(me) and not owner_gone(None)
    assert owner_gone({**me, "started": "0"})  # the same pid, another process (a reused pid)
    assert not owner_gone({**me, "host": "another-machine", "pid": 1})  # not decidable here: the heartbeat's job
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    assert owner_gone({**me, "pid": child.pid})


# trials made by hand here
@pytest.mark.filterwarnings("ignore:Heartbeat of storage is supposed to be used with Study.optimize")
def test_recover_fails_trials_of_dead_processes_and_queues_each_crashed_one_once(tmp_path) -> None:
    study = join_study(
        open_storage(f"sqlite:///{tmp_path}/s.db", retry), "s", SWEEP, "random", optuna.samplers.RandomSampler(seed=0)
    )
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    running_dead, running_alive, failed_by_itself = study.ask(), study.ask(), study.ask()
    for trial in (running_dead, running_alive, failed_by_itself):
        trial.suggest_float("x", 0.0, 1.0)
    running_dead.set_user_attr(OWNER, {**this_process(), "pid": dead.pid})
    running_alive.set_user_attr(OWNER, this_process())
    failed_by_itself.set_user_attr(OUTCOME, "failed")
    study.tell(failed_by_itself, state=optuna.trial.TrialState.FAIL)
    lines = []
    recover(study, lines.append)
    recover(study, lines.append)  # a second process starting: nothing more to do
    states = {t.number: t.state.name for t in study.get_trials()}
    assert states == {0: "FAIL", 1: "RUNNING", 2: "FAIL", 3: "WAITING"}
    assert lines == [f"trial 0: its process ({dead.pid}) is gone: failed, and queued again"]
    queued = study.get_trials()[3]
    assert queued.params == running_dead.params and queued.system_attrs["failed_trial"] == 0 and queued.user_attrs == {}
    # A retry that crashes too is queued again, up to MAX_RETRY + 1 runs in all.
    for number in (3, 4):
        trial = study.ask()
        assert trial.number == number and trial.params == running_dead.params
        study.tell(trial, state=optuna.trial.TrialState.FAIL)
        recover(study, lines.append)
    assert [t.state.name for t in study.get_trials()][3:] == ["FAIL", "FAIL"]
    assert study.get_trials()[4].system_attrs["retry_history"] == [0, 3]
