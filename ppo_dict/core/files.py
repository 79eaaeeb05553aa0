"""ppo_dict's files as bytes on disk: written atomically, read with weights only.

Files are written atomically (temp file in the same directory, fsync, rename, fsync of the
directory): a crash mid-write leaves the previous file intact. ppo_dict's model files hold only
tensors and plain values, so they load with ``torch.load(weights_only=True)`` (no code is unpickled).
"""
from __future__ import annotations

import os
import tempfile
from typing import TYPE_CHECKING, Any, Callable, Optional

import numpy as np
import torch

from ppo_dict.core.errors import CheckpointError

if TYPE_CHECKING:
    from ppo_dict.core.config import Config

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


def config_values(cfg: "Config") -> dict[str, Any]:
    """The config as plain values (tuples as lists): what JSON, YAML and ``weights_only`` files hold."""
    return {k: (list(v) if isinstance(v, tuple) else v) for k, v in cfg.to_dict().items()}


def load_model_state(path: str) -> dict[str, Any]:
    """Read a model file or checkpoint (``ppo_dict.algo.model.Model.save``, ``ppo_dict.run.checkpoint.save_model``, a checkpoint), or a
    directory's ``model.pt``: weights only, no code is unpickled. Raises :class:`CheckpointError`."""
    if os.path.isdir(path):
        path = os.path.join(path, MODEL_FILE)
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:
        raise CheckpointError(f"cannot load {path}: {type(exc).__name__}: {exc}") from exc
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        raise CheckpointError(f"{path} is not a ppo_dict model file (no 'format': {FORMAT!r})")
    return state


def space_mismatch(state: dict[str, Any], observation_space: Any, action_space: Any) -> str:
    """How a model file's spaces (``state``'s texts) differ from an env's, in sb3's ``check_for_correct_spaces``
    wording (``"Observation spaces do not match: ... != ..."``); ``""`` when both match."""
    for what, saved, current in (("Observation", state["observation_space"], str(observation_space)),
                                 ("Action", state["action_space"], str(action_space))):
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
        return f"{setting}={path!r}: is a {'file' if directory else 'directory'}, must be a {'directory' if directory else 'file'}"
    if not os.path.isdir(found):
        return f"{setting}={path!r}: {found} is a file, so nothing can be created under it"
    name_max, path_max = os.pathconf(found, "PC_NAME_MAX"), os.pathconf(found, "PC_PATH_MAX")
    long_names = [part for part in full[len(found):].split(os.sep) if len(part.encode()) > name_max]
    if long_names:
        return f"{setting}={path!r}: the name {long_names[0][:40]}... is {len(long_names[0].encode())} bytes long; the file system takes at most {name_max}"
    if len(full.encode()) + (INNER_PATH if directory else 0) > path_max:
        return f"{setting}={path!r}: the path is {len(full.encode())} bytes long; the file system takes paths of at most {path_max} (and a run needs {INNER_PATH} more below its directory)"
    stats = os.statvfs(found)
    if stats.f_flag & os.ST_RDONLY:
        return f"{setting}={path!r}: {found} is on a read-only file system"
    if not os.access(found, os.W_OK | os.X_OK):
        return f"{setting}={path!r}: {found} is not writable (no write permission for this user)"
    free = stats.f_bavail * stats.f_frsize
    if free < need_bytes:
        return f"{setting}={path!r}: {found} has {free / 2**20:.2f} MiB free; writing a checkpoint there needs about {need_bytes / 2**20:.2f} MiB"
    return ""


def checkpoint_bytes(parameters: Optional[int]) -> int:
    """About how large a checkpoint of a policy with ``parameters`` float32 parameters is: the weights
    and Adam's two moments (4 bytes each), and 64 KiB for the rest (normaliser, episode buffers, RNG
    states, config, the zip container). 0 when the policy was not measured."""
    return 0 if parameters is None else 3 * 4 * parameters + 64 * 1024
