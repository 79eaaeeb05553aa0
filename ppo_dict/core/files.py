"""ppo_dict's files as bytes on disk: written atomically, read with weights only.

Files are written atomically (temp file in the same directory, fsync, rename, fsync of the
directory): a crash mid-write leaves the previous file intact. ppo_dict's model files hold only
tensors and plain values, so they load with ``torch.load(weights_only=True)`` (no code is unpickled).
"""

from __future__ import annotations

import os
import tempfile
from typing import Any, Callable, Optional

import numpy as np
import torch

from ppo_dict.core.config import FIELDS, Config, read_values
from ppo_dict.core.errors import CheckpointError
from ppo_dict.core.reading import one_line, open_regular

#: a run's (or ``--save_path``'s) model file
MODEL_FILE = "model.pt"
#: the ``format`` entry of every model file and checkpoint
FORMAT = "ppo_dict/1"


def _umask() -> int:
    mask = os.umask(0)  # the only way to read it; set straight back
    os.umask(mask)
    return mask


def atomic_write(path: str, write: Callable[[Any], None], mode: str = "wb") -> None:
    """Write ``path`` through ``write(file)`` so that readers see the old file or the whole new one."""
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, mode) as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp creates 0600; give the file the permissions open() would
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    dir_fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def append_text(path: str, text: str) -> None:
    """Append ``text`` to ``path``, a run directory's own file (made by :func:`atomic_write`): never through a link
    put in its place since, never waiting on a FIFO."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    with os.fdopen(fd, "a", newline="") as f:
        f.write(text)


def to_tensors(value: Any) -> Any:
    """numpy arrays -> tensors, recursively, so the file loads with ``weights_only=True``."""
    if isinstance(value, (np.ndarray, np.generic)):  # 0-d statistics are numpy scalars
        return torch.from_numpy(np.array(value))
    if isinstance(value, dict):
        return {k: to_tensors(v) for k, v in value.items()}
    return value


def to_numpy(value: Any) -> Any:
    """Tensors -> numpy arrays, recursively (the inverse of :func:`to_tensors`; dtypes kept)."""
    if isinstance(value, torch.Tensor):
        return value.numpy()
    if isinstance(value, dict):
        return {k: to_numpy(v) for k, v in value.items()}
    return value


def config_values(cfg: Config) -> dict[str, Any]:
    """The config as plain values (tuples as lists): what JSON, YAML and ``weights_only`` files hold."""
    return {k: (list(v) if isinstance(v, tuple) else v) for k, v in cfg.to_dict().items()}


def load_model_state(path: str) -> dict[str, Any]:
    """Read a model file or checkpoint (``ppo_dict.algo.model.Model.save``, ``ppo_dict.run.checkpoint.save_model``, a
    checkpoint), or a directory's ``model.pt``: a regular file (a FIFO is not waited on), weights only (no code is
    unpickled), its form checked whole (:func:`model_file_problems`). Raises :class:`CheckpointError`."""
    if os.path.isdir(path):
        path = os.path.join(path, MODEL_FILE)
    try:
        with open_regular(path) as f:
            state = torch.load(f, map_location="cpu", weights_only=True)
    except Exception as exc:
        raise CheckpointError(f"cannot load {path}: {one_line(exc)}") from exc
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        raise CheckpointError(f"{path} is not a ppo_dict model file (no 'format': {FORMAT!r})")
    oversized = tensor_problems(state, "state", finite=False)
    if oversized:  # before anything computes on a tensor: a view larger than its bytes would be allocated whole
        raise CheckpointError(f"{path}: not a model file ppo_dict wrote: {'; '.join(oversized)}")
    problems = model_file_problems(state)
    if problems:
        raise CheckpointError(f"{path}: not a model file ppo_dict wrote: {'; '.join(problems)}")
    return state


def whole_number(value: Any, low: int = 0) -> bool:
    """An int (not a bool) in [low, 2**63): a counter a run can hold."""
    return type(value) is int and low <= value < 2**63


def finite_tensor(value: Any, dims: Optional[int] = None) -> bool:
    """A tensor (of ``dims`` dimensions, when given) within its storage (:func:`within_storage`) whose floats and
    complex numbers are all finite."""
    return (
        isinstance(value, torch.Tensor)
        and (dims is None or value.dim() == dims)
        and within_storage(value)
        and (not (value.is_floating_point() or value.is_complex()) or bool(torch.isfinite(value).all()))
    )


def within_storage(tensor: torch.Tensor) -> bool:
    """Whether ``tensor`` has no more elements than its storage holds from its offset: a file may hold a view of
    a few bytes with a stride of 0 and 10**12 elements, which any computation on it (``isfinite``, a copy) would
    allocate whole. Sizes come from the storage, not the view."""
    if tensor.layout != torch.strided:
        return False
    held = tensor.untyped_storage().nbytes() - tensor.storage_offset() * tensor.element_size()
    return tensor.numel() * tensor.element_size() <= max(held, 0)


def tensor_problems(value: Any, where: str, finite: bool = True, limit: int = 4) -> list[str]:
    """Every tensor in ``value`` (dicts, lists and tuples of them, walked without recursion) that is not within
    its storage or (``finite``) not finite, named by its path under ``where`` (at most ``limit``)."""
    problems, stack = [], [(where, value)]
    while stack and len(problems) < limit:
        path, item = stack.pop()
        if isinstance(item, torch.Tensor):
            if not within_storage(item):
                problems.append(
                    f"{path}: a tensor of {item.numel():,} elements on {item.untyped_storage().nbytes():,} bytes of storage"
                )
            elif finite and not finite_tensor(item):
                problems.append(f"{path}: not finite")
        elif isinstance(item, dict):
            stack += [(f"{path}[{k!r}]", v) for k, v in reversed(list(item.items()))]
        elif isinstance(item, (list, tuple)):
            stack += [(f"{path}[{i}]", v) for i, v in reversed(list(enumerate(item)))]
    return problems


def statistics_problem(rms: Any, where: str) -> str:
    """Why ``rms`` is not a running mean/std's ``{"mean", "var", "count"}`` (finite, one shape, var and count >= 0);
    ``""``: it is."""
    if not (isinstance(rms, dict) and {"mean", "var", "count"} <= set(rms)):
        return f"{where}: not {{mean, var, count}}"
    mean, var, count = (
        torch.as_tensor(rms[k]) if isinstance(rms[k], (int, float, torch.Tensor)) else None for k in ("mean", "var", "count")
    )
    if mean is None or var is None or count is None or not all(finite_tensor(t) for t in (mean, var, count)):
        return f"{where}: statistics that are not finite numbers"
    if mean.shape != var.shape or count.dim() or bool((var < 0).any()) or float(count) < 0:
        return f"{where}: mean {tuple(mean.shape)} and var {tuple(var.shape)} of other shapes, or a negative variance or count"
    return ""


def model_file_problems(state: dict[str, Any]) -> list[str]:
    """What keeps ``state`` from being a model file ppo_dict wrote (each key named): the policy's tensors, the
    normaliser's statistics, the step count, the spaces' texts, and a config that reads as one."""
    problems = [
        f"no {key!r}"
        for key in ("policy", "normalizer", "num_timesteps", "observation_space", "action_space", "config")
        if key not in state
    ]
    policy = state.get("policy", {})
    if not (isinstance(policy, dict) and all(isinstance(k, str) and finite_tensor(v) for k, v in policy.items())):
        problems.append("'policy': not a dict of finite tensors")
    normalizer = state.get("normalizer")
    if normalizer is not None:
        if not (
            isinstance(normalizer, dict)
            and isinstance(normalizer.get("obs_rms"), dict)
            and finite_tensor(normalizer.get("returns"), 1)
        ):
            problems.append("'normalizer': not {obs_rms: {key: statistics}, ret_rms, returns}")
        else:
            problems += [
                p
                for key, rms in [*normalizer["obs_rms"].items(), ("ret_rms", normalizer.get("ret_rms"))]
                for p in [statistics_problem(rms, f"'normalizer' {key}")]
                if p
            ]
    if "num_timesteps" in state and not whole_number(state["num_timesteps"]):
        problems.append(f"'num_timesteps'={str(state['num_timesteps'])[:40]}: not a whole number in [0, 2**63)")
    problems += [
        f"{key!r}: not a space's text"
        for key in ("observation_space", "action_space")
        if not isinstance(state.get(key, ""), str)
    ]
    config = state.get("config", {})
    if not (isinstance(config, dict) and all(isinstance(k, str) for k in config)):
        problems.append(f"'config': a {type(config).__name__}, not a dict of settings")
    else:
        unreadable = read_values({k: v for k, v in config.items() if k in FIELDS})[1]  # each value no parser reads, named
        problems += [f"'config' {problem}" for problem in unreadable.values()]
        try:
            if not unreadable:
                Config.from_dict(config)
        except Exception as exc:  # noqa: BLE001 (what building the config of values that each read raises)
            problems.append(f"'config': {' '.join(str(exc).split())}")
    return problems


def space_mismatch(state: dict[str, Any], observation_space: Any, action_space: Any) -> str:
    """How a model file's spaces (``state``'s texts) differ from an env's, in sb3's ``check_for_correct_spaces``
    wording (``"Observation spaces do not match: ... != ..."``); ``""`` when both match."""
    for what, saved, current in (
        ("Observation", state["observation_space"], str(observation_space)),
        ("Action", state["action_space"], str(action_space)),
    ):
        if saved != current:
            return f"{what} spaces do not match: {saved} != {current}"
    return ""


# ----------------------------------------------------------------------------------------------
# Where outputs go: judged before anything is written


#: room kept in a path for what a run writes below its directory (``checkpoints/.checkpoint_<steps>.pt.<random>.tmp``)
INNER_PATH = 64


def existing_part(path: str) -> str:
    """The deepest directory of ``path`` (absolute) that exists: where a file or folder under it would be created."""
    part = os.path.abspath(path)
    while not os.path.exists(part):
        part = os.path.dirname(part)
    return part


def output_problem(setting: str, path: str, directory: bool, need_bytes: int = 0) -> str:
    """Why ``path`` cannot be written (``""``: it can), one line naming ``setting``.

    ``directory``: ``path`` is a folder to write into (``--run_dir``, ``--save_path``), else a file
    (``--export_sb3``, an export's ``--out``). Judged on the deepest existing part of the path,
    without writing anything: a file where a folder goes, a name longer than the file system takes,
    no write permission or a read-only file system, and less free space than ``need_bytes``.
    """
    if not path:
        return f"{setting}={path!r}: an empty path"
    full = os.path.abspath(path)
    found = existing_part(full if directory else os.path.dirname(full))  # a file is judged by the folder it goes into
    if os.path.exists(full) and os.path.isdir(full) != directory:
        return (
            f"{setting}={path!r}: is a {'file' if directory else 'directory'}, must be a "
            f"{'directory' if directory else 'file'}"
        )
    if not os.path.isdir(found):
        return f"{setting}={path!r}: {found} is a file, so nothing can be created under it"
    name_max, path_max = os.pathconf(found, "PC_NAME_MAX"), os.pathconf(found, "PC_PATH_MAX")
    long_names = [part for part in full[len(found) :].split(os.sep) if len(part.encode()) > name_max]
    if long_names:
        return (
            f"{setting}={path!r}: the name {long_names[0][:40]}... is {len(long_names[0].encode())} bytes long; the file "
            f"system takes at most {name_max}"
        )
    if len(full.encode()) + (INNER_PATH if directory else 0) > path_max:
        return (
            f"{setting}={path!r}: the path is {len(full.encode())} bytes long; the file system takes paths of at most "
            f"{path_max} (and a run needs {INNER_PATH} more below its directory)"
        )
    stats = os.statvfs(found)
    if stats.f_flag & os.ST_RDONLY:
        return f"{setting}={path!r}: {found} is on a read-only file system"
    if not os.access(found, os.W_OK | os.X_OK):
        return f"{setting}={path!r}: {found} is not writable (no write permission for this user)"
    free = stats.f_bavail * stats.f_frsize
    if free < need_bytes:
        return (
            f"{setting}={path!r}: {found} has {free / 2**20:.2f} MiB free; writing a checkpoint there needs about "
            f"{need_bytes / 2**20:.2f} MiB"
        )
    return ""


def checkpoint_bytes(parameters: Optional[int]) -> int:
    """About how large a checkpoint of a policy with ``parameters`` float32 parameters is: the weights
    and Adam's two moments (4 bytes each), and 64 KiB for the rest (normaliser, episode buffers, RNG
    states, config, the zip container). 0 when the policy was not measured."""
    return 0 if parameters is None else 3 * 4 * parameters + 64 * 1024
