"""An sb3 zip's entries read bounded, and its counters checked, before anything is built from them.

sb3's ``save`` writes (uncompressed) a ``data`` entry (JSON), the parameters as torch files (``policy.pth``,
``policy.optimizer.pth``, ``pytorch_variables.pth``) and two small texts. A zip may declare entries far
larger than its own bytes (deflate inflates a few hundred KiB of zeros to gigabytes), so each entry is read
with a cap derived from what a real model's holds (:func:`entry_cap`), refused above it, naming the entry
and both sizes; the parameters are read as sb3's ``load_from_zip_file`` reads them, with torch's
weights-only loading, each from its capped bytes. A counter (``num_timesteps``...) that is not a whole
number a run can count to, or a progress that is not a finite number, is refused by name.
"""

from __future__ import annotations

import io
import math
import os
import zipfile
from typing import Any

from ppo_dict.core.errors import CheckpointError
from ppo_dict.core.reading import MiB, UnreadableFile, one_line, open_regular, zip_entry

#: the ``data`` entry: JSON of the hyperparameters and spaces (a few KiB) plus the pickled last observations,
#: base64'd, twice over (``_last_obs``, ``_last_original_obs``): 64 envs of raw 210x160x3 Atari frames make
#: 17 MiB; 64 MiB leaves room for more, and is what json.loads may turn into a few hundred MiB at worst
MAX_DATA_BYTES = 64 * MiB
#: the parameters (float tensors, which deflate barely shrinks: sb3 stores them uncompressed) may inflate to at
#: most this many times the bytes they take in the zip, and to at least :data:`SMALL_ENTRY` bytes
PARAMETER_INFLATION = 16
#: any other entry read (``_stable_baselines3_version``, ``system_info.txt``: a few hundred bytes)
SMALL_ENTRY = 1 * MiB
#: the counters a zip holds, each a whole number in [0, 2**63) (``n_envs`` at least 1)
COUNTERS = ("num_timesteps", "_total_timesteps", "_num_timesteps_at_start", "_n_updates", "_episode_num", "n_envs")
#: the torch files of a zip that hold no parameters of the policy (sb3's ``load_from_zip_file``)
VARIABLES = ("pytorch_variables.pth", "tensors.pth")


def entry_cap(info: zipfile.ZipInfo) -> int:
    """The most bytes ppo_dict reads for the entry ``info`` (the module doc says why)."""
    if info.filename == "data":
        return MAX_DATA_BYTES
    if info.filename.endswith(".pth"):
        return max(SMALL_ENTRY, PARAMETER_INFLATION * info.compress_size)
    return SMALL_ENTRY


def open_zip(path: Any) -> zipfile.ZipFile:
    """The zip at ``path`` (a regular file: a FIFO is not waited on) or in the binary file ``path``."""
    try:
        return zipfile.ZipFile(open_regular(os.fspath(path)) if isinstance(path, (str, os.PathLike)) else path)
    except (zipfile.BadZipFile, OSError, EOFError, ValueError) as exc:
        raise CheckpointError(f"{path}: cannot read as an sb3 model zip: {one_line(exc)}") from None


def check_entries(archive: zipfile.ZipFile, where: Any) -> None:
    """Refuse the zip (:class:`CheckpointError`) when an entry sb3 reads declares more than its cap."""
    for info in archive.infolist():
        if info.filename == "data" or info.filename.endswith(".pth") or info.filename == "_stable_baselines3_version":
            if info.file_size > entry_cap(info):
                raise CheckpointError(
                    f"{where}: its entry {info.filename!r} holds {info.file_size:,} bytes; ppo_dict reads "
                    f"at most {entry_cap(info):,} for it (an sb3 model's is smaller)"
                )


def read_entry(archive: zipfile.ZipFile, name: str, where: Any) -> bytes:
    try:
        return zip_entry(archive, name, entry_cap(archive.getinfo(name)), where)
    except UnreadableFile as exc:
        raise CheckpointError(str(exc)) from None
    except (zipfile.BadZipFile, OSError, EOFError, ValueError) as exc:  # a bad CRC, a truncated or unknown compression
        raise CheckpointError(f"{where}: its entry {name!r} cannot be read: {one_line(exc)}") from None


def read_params(archive: zipfile.ZipFile, where: Any, device: Any = "cpu") -> dict[str, Any]:
    """``{name: state dict}`` of the zip's torch files, as sb3's ``load_from_zip_file`` gives them (weights only)."""
    import torch
    from stable_baselines3.common.utils import get_device  # "auto" as sb3 reads it

    params, device = {}, get_device(device)
    for name in archive.namelist():
        if os.path.splitext(name)[1] != ".pth":
            continue
        content = read_entry(archive, name, where)
        try:
            value = torch.load(io.BytesIO(content), map_location=device, weights_only=True)
        except Exception as exc:  # noqa: BLE001 (the file's bytes: whatever torch's reader raises)
            raise CheckpointError(f"{where}: its entry {name!r} is not a torch file of tensors: {one_line(exc)}") from None
        if name not in VARIABLES:
            params[os.path.splitext(name)[0]] = value
    return params


def zip_params(path: Any, device: Any = "auto") -> dict[str, Any]:
    """The parameters of the sb3 zip ``path`` (a binary file, a path, or a path without its ``.zip``, as sb3's
    ``set_parameters`` opens it), each entry capped, with torch's weights-only loading."""
    if isinstance(path, (str, os.PathLike)) and not os.path.exists(path) and os.path.exists(f"{os.fspath(path)}.zip"):
        path = f"{os.fspath(path)}.zip"
    with open_zip(path) as archive:
        check_entries(archive, path)
        return read_params(archive, path, device)


def counter_problems(data: dict[str, Any]) -> list[str]:
    """The counters of a zip's ``data`` that are not whole numbers in range, and a progress that is not finite."""
    problems = []
    for name in COUNTERS:
        value = data.get(name, 1)
        if type(value) is not int or not (name != "n_envs" or value >= 1) or not 0 <= value < 2**63:
            problems.append(
                f"{name}={str(value)[:40]}{'...' if len(str(value)) > 40 else ''}: not a whole number in "
                f"[{1 if name == 'n_envs' else 0}, 2**63)"
            )
    progress = data.get("_current_progress_remaining", 1.0)
    if type(progress) not in (int, float) or not math.isfinite(progress):
        problems.append(f"_current_progress_remaining={str(progress)[:40]}: not a finite number")
    return problems
