"""Where a run of the command line starts from: the checkpoint ``--resume`` names (``--resume auto``:
the run directory's, when it holds one), else the sb3 zip ``--trained_agent`` names, read before
the config is judged (a file that cannot be read is a problem of its setting)."""

from __future__ import annotations

import glob
import os
import sys
from typing import Any, Optional

from ppo_dict.core.config import FIELDS, RESUME_AUTO
from ppo_dict.core.errors import CheckpointError
from ppo_dict.interop.trained_agent import TrainedAgent, read_trained_agent
from ppo_dict.run.checkpoint import CHECKPOINT_DIR, Resumed, list_checkpoints, load_for_resume
from ppo_dict.run.run_dir import branch_dir, checkpoint_run_dir, newer_checkpoints


def auto_resume_dir(run_dir: Optional[str]) -> Optional[str]:
    """What ``--resume auto --run_dir DIR`` resumes from: DIR when it holds checkpoints, else None (start fresh).

    For preemptible and requeued jobs, which rerun the same command (sample-factory's
    ``--restart_behavior=resume``). A directory whose checkpoints were all renamed ``*.corrupt``
    is not a fresh start: :class:`CheckpointError` says so, as for a corrupt ``--resume DIR``.
    Without ``--run_dir`` there is nothing to look in (``validate`` reports it).
    """
    if run_dir is None:
        return None
    directory = os.path.join(run_dir, CHECKPOINT_DIR)
    if list_checkpoints(directory):
        return run_dir
    corrupt = sorted(glob.glob(os.path.join(directory, "checkpoint_*.pt.corrupt")))
    if corrupt:
        raise CheckpointError(
            f"--resume auto: {directory} holds only unreadable checkpoints "
            f"({', '.join(map(os.path.basename, corrupt))}); remove them to start this run afresh"
        )
    print(f"--resume auto: no checkpoint in {directory}: starting fresh", flush=True)
    return None


def resume_source(flags: dict[str, Any]) -> Optional[Resumed]:
    """The checkpoint ``--resume`` names (raises :class:`CheckpointError`), or None without it.

    The run directory is the one the checkpoint belongs to, so the resumed run continues its
    CSV log, evaluations and checkpoints in place (unless ``--run_dir`` says otherwise); a checkpoint
    that is in no run directory (``checkpoint_run_dir``) starts a new one, as a fresh run does.
    ``--resume auto`` resumes from ``--run_dir`` when it holds a checkpoint, else starts fresh.
    ``flags``: the command line's flags (:func:`~ppo_dict.run.cli.read_flags`).
    """
    path = flags.get("resume")
    if path == RESUME_AUTO:
        path = auto_resume_dir(flags.get("run_dir"))
    if path is None or not os.path.exists(path):
        return None  # a fresh start, or validate() reports the missing path with the other problems
    file, state = load_for_resume(path)
    steps, home = int(state["num_timesteps"]), checkpoint_run_dir(file)
    if home is None:  # a checkpoint outside a run directory (a download, a copy): its folder is no run's to take
        state["config"]["run_dir"] = None
    else:
        continues = os.path.isdir(path) or not newer_checkpoints(home, steps)  # else: an older checkpoint, whose run went on
        state["config"]["run_dir"] = home if continues else branch_dir(home, steps)
    return Resumed(file, state, steps, home)


def trained_agent_source(flags: dict[str, Any]) -> Optional[TrainedAgent]:
    """The sb3 zip ``--trained_agent`` names, read (raises :class:`CheckpointError`), or None without it."""
    path = flags.get("trained_agent")
    if path is None or not os.path.isfile(path):
        return None  # validate() reports a missing file with the other problems
    # typed only
    agent = read_trained_agent(path, flags.get("env", FIELDS["env"].default), trust_pickles=bool(flags.get("trust_pickles")))
    for note in agent.notes:
        print(note, file=sys.stderr, flush=True)
    return agent


def sources(flags: dict[str, Any], unreadable: dict[str, str]) -> tuple[Optional[Resumed], Optional[TrainedAgent]]:
    """``(resumed, agent)``: the checkpoint ``--resume`` names, else the zip ``--trained_agent`` names
    (a resumed run continues its checkpoint, which already started from the zip). One that cannot be
    read is a problem of its setting, added to ``unreadable``: the config built on it cannot be judged."""
    for name, read in (("resume", resume_source), ("trained_agent", trained_agent_source)):
        try:
            found = read(flags)
        except CheckpointError as exc:
            unreadable[name] = f"{name}={flags.get(name)!r}: {str(exc).removeprefix(f'{flags.get(name)}: ')}"
            return None, None
        if found is not None:
            return (found, None) if name == "resume" else (None, found)
    return None, None
