"""The shared-memory side of the worker pool: one buffer for every env-written storage field.

The buffer is a ``multiprocessing`` ``RawArray`` (an unlinked file: nothing can leak into
/dev/shm, even after SIGKILL). Its layout is measured from :class:`RolloutStorage` itself, so the
main process and every worker build identical numpy views of the same bytes.
"""

from __future__ import annotations

import math
import os
import tempfile
import warnings
from dataclasses import dataclass
from typing import Any, Optional

import numpy as np
from gymnasium import spaces

from ppo_dict.core.machine import free_bytes
from ppo_dict.data.storage import ALIGN, Alloc, RolloutStorage


@dataclass(frozen=True)
class SharedLayout:
    """Where each env-written storage field lives in the shared buffer.

    ``fields[k] = (byte offset, shape, dtype string)`` of the k-th ``alloc`` call that
    :class:`RolloutStorage` makes, each a multiple of :data:`~ppo_dict.data.storage.ALIGN` from the
    buffer's first aligned byte; ``nbytes`` is the buffer size, with room to find that byte.
    """

    fields: tuple[tuple[int, tuple[int, ...], str], ...]
    nbytes: int


def plan_layout(
    observation_space: spaces.Space,
    action_space: spaces.Space,
    n_steps: int,
    n_envs: int,
    info_keywords: tuple[str, ...] = (),
    stage_keys: tuple[str, ...] = (),
) -> SharedLayout:
    """Measure the env-written fields by building a storage whose ``alloc`` hands out
    zero-memory placeholders, so the layout can never disagree with :class:`RolloutStorage`."""
    fields: list[tuple[int, tuple[int, ...], str]] = []
    offset = 0

    def measure(shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        nonlocal offset
        dtype = np.dtype(dtype)
        fields.append((offset, tuple(shape), dtype.str))
        offset += -(-math.prod(shape) * dtype.itemsize // ALIGN) * ALIGN
        return np.broadcast_to(np.zeros((), dtype), shape)

    RolloutStorage(
        observation_space, action_space, n_steps, n_envs, alloc=measure, info_keywords=info_keywords, stage_keys=stage_keys
    )
    return SharedLayout(tuple(fields), max(offset, ALIGN) + ALIGN)


def view_alloc(buffer: Any, layout: SharedLayout) -> Alloc:
    """An ``alloc`` that returns the layout's views of ``buffer`` (a RawArray), in order, each starting
    on an :data:`~ppo_dict.data.storage.ALIGN` boundary of this process's address space.

    ``multiprocessing`` places a RawArray at the same offset of a page-aligned mapping in every
    process, so the padding to the first aligned byte, and so every view, is the same in all of them.
    """
    memory = memoryview(buffer).cast("B")
    base = -np.frombuffer(memory, dtype=np.uint8, count=1).ctypes.data % ALIGN
    entries = iter(layout.fields)

    def alloc(shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        offset, planned_shape, planned_dtype = next(entries)
        if (tuple(shape), np.dtype(dtype).str) != (planned_shape, planned_dtype):
            raise RuntimeError(
                f"shared storage layout mismatch: planned {planned_shape} {planned_dtype}, asked "
                f"{tuple(shape)} {np.dtype(dtype)}"
            )
        return np.frombuffer(memory, dtype=dtype, count=math.prod(shape), offset=base + offset).reshape(shape)

    return alloc


def check_shared_memory(nbytes: int, shm_dir: str = "/dev/shm") -> None:
    """Refuse (RuntimeError) or warn about a buffer that does not fit where ``RawArray`` will put it
    (:func:`shared_memory_problem`; the run's config check refuses it before anything starts)."""
    if not os.path.isdir(shm_dir):
        return
    tmp = tempfile.gettempdir()
    refusal, warning = shared_memory_problem(nbytes, free_bytes(shm_dir), free_bytes(tmp), shm_dir, tmp)
    if refusal:
        raise RuntimeError(refusal)
    if warning:
        warnings.warn(warning, RuntimeWarning, stacklevel=3)


def shared_memory_problem(
    nbytes: int, shm_free: Optional[int], tmp_free: Optional[int], shm_dir: str = "/dev/shm", tmp: Optional[str] = None
) -> tuple[str, str]:
    """``(refusal, warning)`` for a shared buffer of ``nbytes`` (``""``: none).

    On Linux ``multiprocessing`` backs a RawArray with an unlinked file in /dev/shm when /dev/shm
    has room for it and otherwise, silently, with one in the temp dir (disk-backed page cache:
    slower, but no SIGBUS). The buffer is zero-filled at allocation, so its pages are committed then.
    """
    if shm_free is None or nbytes <= shm_free:
        return "", ""
    tmp = tmp or tempfile.gettempdir()
    mb = nbytes / 2**20
    advice = f"use docker run --shm-size={max(1, math.ceil(nbytes * 1.25 / 2**30))}g, or fewer n_steps x n_envs"
    if tmp_free is not None and nbytes > tmp_free:
        return (
            f"rollout storage needs {mb:.1f} MB of shared memory, {shm_dir} has {shm_free / 2**20:.1f} MB free "
            f"and {tmp} has {tmp_free / 2**20:.1f} MB; {advice}"
        ), ""
    return "", (
        f"rollout storage needs {mb:.1f} MB of shared memory, {shm_dir} has {shm_free / 2**20:.1f} MB free; "
        f"multiprocessing will back it with a file in {tmp} instead (slower); {advice}"
    )
