"""Arrays laid out as torch lays out a fresh tensor: :data:`ALIGN`-aligned, every row of a ``[steps, ...]`` array
too, so that what a kernel reads (and how it rounds) never depends on where a view happened to start. The rollout
storage (``ppo_dict.data.storage``) is allocated with these, in ordinary memory or shared memory (``alloc``).
"""

from __future__ import annotations

import math
from typing import Callable

import numpy as np

#: ``alloc(shape, dtype)``: a C-contiguous array of zeros, in ordinary memory or shared memory
Alloc = Callable[[tuple[int, ...], np.dtype], np.ndarray]
#: The alignment, in bytes, of every array a kernel reads: what torch's CPU allocator gives a fresh
#: tensor (c10's ``gAlignment``), and a multiple of the 16 bytes numpy's allocations give sb3's
#: arrays. On AVX-512 CPUs a matmul rounds a row that starts 8 bytes off differently (docs/sb3_parity.md).
ALIGN = 64


def aligned_zeros(shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """C-contiguous zeros whose first byte is :data:`ALIGN`-aligned (numpy only promises 16 bytes)."""
    dtype = np.dtype(dtype)
    nbytes = math.prod(shape) * dtype.itemsize
    raw = np.zeros(nbytes + ALIGN, dtype=np.uint8)
    start = -raw.ctypes.data % ALIGN
    return raw[start : start + nbytes].view(dtype).reshape(shape)


#: The default ``alloc``: ordinary memory, aligned as a fresh torch tensor.
zeros = aligned_zeros


def is_aligned(arr: np.ndarray) -> bool:
    """C-contiguous and starting on an :data:`ALIGN` boundary: laid out as a fresh allocation."""
    return arr.flags.c_contiguous and arr.ctypes.data % ALIGN == 0


def aligned(batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """``batch`` with every array laid out as a fresh allocation (:func:`is_aligned`): copied where
    it is not, so that what a kernel reads never depends on where a view happened to start."""
    out = {}
    for key, arr in batch.items():
        if not is_aligned(arr):
            arr, src = aligned_zeros(arr.shape, arr.dtype), arr
            arr[...] = src
        out[key] = arr
    return out


def step_major(alloc: Alloc, steps: int, row_shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """A ``[steps, *row_shape]`` array whose every row ``arr[t]`` is C-contiguous and starts on an
    :data:`ALIGN` boundary, as a fresh allocation of ``[*row_shape]`` would: ``alloc`` gives
    ``[steps, padded]`` (rows padded to a multiple of ALIGN bytes), viewed without the padding.

    Without the padding, row t of a ``[T, 3, 6]`` float32 array starts ``72 t`` bytes in: 8-byte
    aligned at every other step, and the policy's first matmul rounded those rows differently.
    """
    dtype = np.dtype(dtype)
    row_bytes = math.prod(row_shape) * dtype.itemsize
    padded = -(-row_bytes // ALIGN) * ALIGN // dtype.itemsize
    flat = alloc((steps, padded), dtype)
    strides, stride = [], dtype.itemsize
    for dim in reversed(row_shape):
        strides.insert(0, stride)
        stride *= dim
    return np.lib.stride_tricks.as_strided(flat, (steps, *row_shape), (flat.strides[0], *strides))
