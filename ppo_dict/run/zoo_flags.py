"""rl-zoo's ``train.py`` command line read as ppo_dict's settings: its own flags (``--log-folder``, ``--track``,
``--vec-env``, ``--num-threads``...) as the settings that mean the same, and a typed ``--algo`` reading rl-zoo's tuned
entry for the env, as ``train.py`` does. ``ppo_dict.run.cli`` calls these while it reads a command line.
"""

from __future__ import annotations

import argparse
import os
import re
from typing import Any

from ppo_dict.core.config import FIELDS, RECURRENT_MODELS
from ppo_dict.core.parse import parse_bool
from ppo_dict.envs import gym_id_of
from ppo_dict.interop.hyperparams import RL_ZOO, ZOO_ALGOS, read_entry


def rl_zoo_flags(zoo: dict[str, str], flags: dict[str, Any], unreadable: dict[str, str], algo: str) -> None:
    """rl-zoo's ``train.py`` flags (``ppo_dict.run.flag_tables.ZOO_FLAGS``) as the settings that mean the same, into
    ``flags`` (a setting typed as itself wins), or a problem naming ppo_dict's equivalent into ``unreadable``
    (``algo``: ``--algo``, the folder rl-zoo's ``--log-folder`` names)."""
    if "log_folder" in zoo and "run_dir" not in flags:
        env = zoo_env_name(str(flags.get("env", FIELDS["env"].default)))
        folder = os.path.join(zoo["log_folder"], algo)
        flags["run_dir"] = os.path.join(folder, f"{env}_{latest_run_id(folder, env) + 1}")
    if "track" in zoo:
        try:
            if parse_bool(zoo["track"]):
                flags.setdefault("project", "sb3")  # rl-zoo's --wandb-project-name default
        except argparse.ArgumentTypeError as exc:
            unreadable["track"] = f"track={zoo['track']!r}: {exc}"
    if "vec_env" in zoo:
        setting = {"dummy": ("num_workers", 0), "subproc": ("main_steps_envs", False)}.get(zoo["vec_env"])
        if setting is None:
            unreadable["vec_env"] = f"vec_env={zoo['vec_env']!r}: rl-zoo's --vec-env takes dummy or subproc"
        else:
            flags.setdefault(*setting)
    if "num_threads" in zoo:
        zoo_threads(zoo["num_threads"], flags, unreadable)
    if "n_eval_envs" in zoo and zoo["n_eval_envs"] != "1":
        unreadable["n_eval_envs"] = (
            f"n_eval_envs={zoo['n_eval_envs']!r}: ppo_dict evaluates in one env; "
            f"--eval_episodes N (rl-zoo's --eval-episodes) sets how many episodes"
        )


#: what rl-zoo's --device auto means here, said where it differs (a CUDA device present)
DEVICE_NOTE = (
    "--device auto: ppo_dict's auto keeps an MLP policy on the CPU, bit-exact with sb3, where rl-zoo's auto puts "
    "every policy on CUDA when there is one; --device cuda for rl-zoo's choice"
)


def zoo_device_note(flags: dict[str, Any]) -> str:
    """:data:`DEVICE_NOTE` for an rl-zoo-style command (``--algo`` typed) on ``auto`` (rl-zoo's default too) where CUDA
    is present."""
    if flags.get("device", FIELDS["device"].default) != "auto":
        return ""
    import torch

    return DEVICE_NOTE if torch.cuda.is_available() else ""


def zoo_threads(typed: str, flags: dict[str, Any], unreadable: dict[str, str]) -> None:
    """rl-zoo's ``--num-threads``: ``th.set_num_threads(n)`` for n > 0, else torch left as it is (its own count)."""
    try:
        n = int(typed)
    except ValueError:
        unreadable["num_threads"] = f"num_threads={typed!r}: rl-zoo's --num-threads takes an integer (-1: torch's own count)"
        return
    if n <= 0:
        import torch  # the count torch starts with: nothing in this process has set it yet

        n = torch.get_num_threads()
    flags.setdefault("torch_threads", n)


def zoo_env_name(env: str) -> str:
    """The env's name in rl-zoo's log folders (``<folder>/<algo>/<name>_<n>``): its gymnasium id, without a module."""
    return (gym_id_of(env) or env).rpartition(":")[2]


def latest_run_id(folder: str, env: str) -> int:
    """The highest ``n`` of the ``<env>_<n>`` directories in ``folder`` (0: none), as rl-zoo's ``get_latest_run_id``."""
    try:
        names = os.listdir(folder)
    except OSError:  # not there (or not readable: the run directory's own check says why)
        names = []
    found = (re.fullmatch(rf"{re.escape(env)}_(\d+)", name) for name in names)
    return max((int(m.group(1)) for m in found if m and os.path.isdir(os.path.join(folder, m.group(0)))), default=0)


def zoo_entry_by_default(flags: dict[str, Any], algo: str) -> str:
    """rl-zoo's ``train.py --algo ppo --env ID`` reads its tuned entry for the env: so does a typed ``--algo`` here
    without ``--hyperparams`` (``flags`` gains ``hyperparams: ["rl_zoo3"]``, which config.json records, so that a resume
    and a sweep see the same settings). Not for a resume or a trained agent (their configs are the base). Returns the
    line said at start: which entry and how to get sb3's defaults, or why sb3's defaults (no rl_zoo3, no entry)."""
    if {"hyperparams", "resume", "trained_agent"} & set(flags):
        return ""
    env = str(flags.get("env", FIELDS["env"].default))
    recurrent = ZOO_ALGOS[algo] or str(flags.get("model", "")) in RECURRENT_MODELS
    entry = read_entry(RL_ZOO, env, recurrent)
    if entry.name is None:  # rl_zoo3 is not installed, or its file has no entry (nor a default one) for the env
        why = entry.problems[0].removeprefix(f"hyperparams={RL_ZOO!r}: ").removeprefix("cannot read: ")
        return f"--algo {algo}: sb3's defaults, not rl-zoo's tuned entry: {why}"
    flags["hyperparams"] = [RL_ZOO]
    return (
        f"--algo {algo}: rl-zoo's tuned entry {entry.name!r}, as rl-zoo's train.py takes it (leave out --algo for sb3's "
        f"defaults)"
    )
