"""ppo_dict's files as bytes on disk: written atomically, read with weights only.

Files are written atomically (temp file in the same directory, fsync, rename, fsync of the
directory): a crash mid-write leaves the previous file intact. ppo_dict's model files hold only
tensors and plain values, so they load with ``torch.load(weights_only=True)`` (no code is unpickled).
"""
from __future__ import annotations

import os
import tempfile
from typing import TYPE_CHECKING, Any, Callable

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
