"""What fixes a run's bits: the global RNG streams training draws from, seeded, saved and restored
as sb3 uses them; torch's thread count for a block; exact comparison of states.

torch (parameter init, one action sample per rollout step), numpy's global generator (one
permutation per epoch) and python's ``random`` (seeded, unused); each env has its own.
"""

from __future__ import annotations

import contextlib
import math
import random
from typing import Any, Iterator

import numpy as np
import torch


def set_random_seed(seed: int, using_cuda: bool = False) -> None:
    """sb3 ``set_random_seed``: python, numpy and torch (all devices)."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    if using_cuda:
        torch.backends.cudnn.deterministic = True
        torch.backends.cudnn.benchmark = False


def rng_state() -> dict[str, Any]:
    """The global RNG states, as tensors and plain values (loadable with ``torch.load(weights_only=True)``).

    torch (CPU, and every CUDA device if present), numpy's global MT19937 (keys as int64[624])
    and python's ``random`` (int64[625]).
    """
    np_name, np_keys, np_pos, np_has_gauss, np_gauss = np.random.get_state(legacy=True)
    py_version, py_internal, py_gauss = random.getstate()
    state: dict[str, Any] = {
        "torch": torch.get_rng_state(),
        "numpy": {
            "name": np_name,
            "keys": torch.from_numpy(np_keys.astype(np.int64)),
            "pos": int(np_pos),
            "has_gauss": int(np_has_gauss),
            "cached_gaussian": float(np_gauss),
        },
        "python": {"version": py_version, "internal": torch.tensor(py_internal, dtype=torch.int64), "gauss_next": py_gauss},
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def rng_state_problems(state: Any) -> list[str]:
    """What keeps ``state`` from being :func:`rng_state`'s form (each part named), so that :func:`set_rng_state`
    restores it without an error: torch's CPU state (uint8[5056]), numpy's MT19937 (keys int64[624] of 32-bit
    words, a position in [0, 624]) and python's ``random`` (version 3, int64[625] of 32-bit words, the last
    one a position in [0, 624])."""

    def words(t: Any, n: int) -> bool:
        return (
            isinstance(t, torch.Tensor)
            and t.dtype == torch.int64
            and tuple(t.shape) == (n,)
            and bool(((t >= 0) & (t < 2**32)).all())
        )

    if not isinstance(state, dict):
        return ["'rng': not the RNG states"]
    problems = []
    cpu = state.get("torch")
    if not (isinstance(cpu, torch.Tensor) and cpu.dtype == torch.uint8 and cpu.shape == torch.get_rng_state().shape):
        problems.append("'rng' torch: not torch's CPU generator state")
    n = state.get("numpy")
    if not (
        isinstance(n, dict)
        and n.get("name") == "MT19937"
        and words(n.get("keys"), 624)
        and type(n.get("pos")) is int
        and 0 <= n["pos"] <= 624
        and n.get("has_gauss") in (0, 1)
        and type(n.get("cached_gaussian")) is float
        and math.isfinite(n["cached_gaussian"])
    ):
        problems.append("'rng' numpy: not numpy's MT19937 state")
    p = state.get("python")
    if not (
        isinstance(p, dict)
        and p.get("version") == 3
        and words(p.get("internal"), 625)
        and 0 <= int(p["internal"][-1]) <= 624
        and (p.get("gauss_next") is None or (type(p["gauss_next"]) is float and math.isfinite(p["gauss_next"])))
    ):
        problems.append("'rng' python: not python's random state")
    cuda = state.get("cuda", [])
    if not (isinstance(cuda, list) and all(isinstance(t, torch.Tensor) and t.dtype == torch.uint8 for t in cuda)):
        problems.append("'rng' cuda: not CUDA generator states")
    return problems


def set_rng_state(state: dict[str, Any]) -> None:
    """Restore what :func:`rng_state` captured, bit for bit."""
    torch.set_rng_state(state["torch"])
    n = state["numpy"]
    np.random.set_state((n["name"], n["keys"].numpy().astype(np.uint32), n["pos"], n["has_gauss"], n["cached_gaussian"]))
    p = state["python"]
    random.setstate((p["version"], tuple(int(v) for v in p["internal"].tolist()), p["gauss_next"]))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


@contextlib.contextmanager
def preserved_rng() -> Iterator[None]:
    """Run a block without moving the torch, numpy-global and python RNG streams."""
    state = rng_state()
    try:
        yield
    finally:
        set_rng_state(state)


@contextlib.contextmanager
def thread_count(n: int) -> Iterator[None]:
    """torch's intra-op threads set to ``n`` for a block (about a microsecond each way)."""
    previous = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def same_values(a: Any, b: Any) -> bool:
    """Exact equality of nested dicts, lists and tensors (an Adam state, a state dict)."""
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(same_values(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return isinstance(b, (list, tuple)) and len(a) == len(b) and all(same_values(x, y) for x, y in zip(a, b))
    return a == b
