"""An sb3 policy file (``policy.save(path)``: ``torch.save({"state_dict": ..., "data": constructor arguments})``)
read as data: nothing it names runs.

sb3's ``BasePolicy.load`` reads it with ``torch.load(weights_only=False)``: the file's pickle calls whatever it
names. Here torch's weights-only unpickler reads it (the tensors as torch reads them), each other name bound to
something of ours instead of what it names:

* gymnasium's spaces (Box, Discrete, MultiDiscrete, MultiBinary, Dict) to :class:`SpaceRecord` (their state as
  attributes), rebuilt afterwards from checked values (:func:`space_of`);
* numpy's arrays, dtypes and scalars to ``ppo_dict.interop.plain_pickle``'s checked constructors (plain numeric
  dtypes, sizes checked against the bytes present);
* the classes the arguments name (the activation, the optimizer, sb3's features extractor, sb3's ``BasePolicy``
  for its ``_dummy_schedule``) to :class:`ClassName` markers, resolved against :data:`CLASSES` (a marker
  cannot be called: a pickle that calls one is refused);
* ``getattr`` to :func:`dummy_schedule_of` (``BasePolicy._dummy_schedule`` only).

Any other name is refused, naming it. :func:`read_policy_file` returns ``(state_dict, arguments)`` with the
arguments' spaces rebuilt and their classes resolved.
"""

from __future__ import annotations

import io
import pickle
import re
from typing import Any

import numpy as np
import torch
from gymnasium import spaces

from ppo_dict.algo.networks.policy import ACTIVATION_CLASSES, SB3_EXTRACTORS
from ppo_dict.core.errors import CheckpointError
from ppo_dict.core.reading import one_line, read_capped
from ppo_dict.interop.plain_pickle import (
    MULTIARRAY,
    NDARRAY,
    ArraySpec,
    DtypeSpec,
    Ignored,
    Record,
    latin1_bytes,
    materialize,
    reconstruct,
    scalar,
)

#: the most bytes a policy file may hold (a CNN policy of sb3's defaults is a few MB)
MAX_POLICY_BYTES = 1 << 30
SB3_POLICIES = "stable_baselines3.common.policies"


class SpaceRecord(Record):
    """A gymnasium space as the pickle holds it: its state as attributes (rebuilt by :func:`space_of`)."""


class ClassName:
    """A class the file names, as a name: resolved by :func:`resolve` against :data:`CLASSES`, never called."""

    def __init__(self, module: str, name: str):
        self.module, self.name = module, name

    def __repr__(self) -> str:
        return f"{self.module}.{self.name}"


#: the classes a policy file's arguments may name: activations, optimizers, sb3's features extractors (as ppo_dict's)
CLASSES: dict[str, type] = {
    **{f"{cls.__module__}.{cls.__name__}": cls for cls in ACTIVATION_CLASSES.values()},
    **{
        f"{cls.__module__}.{cls.__name__}": cls
        for cls in (torch.optim.Adam, torch.optim.AdamW, torch.optim.SGD, torch.optim.RMSprop)
    },
    **{f"stable_baselines3.common.torch_layers.{name}": cls for name, cls in SB3_EXTRACTORS.items()},
}
#: what ``BasePolicy._dummy_schedule`` reads as (sb3's: a schedule the policy alone never calls)
DUMMY_SCHEDULE = "sb3's BasePolicy._dummy_schedule"
BASE_POLICY = ClassName(SB3_POLICIES, "BasePolicy")


def dummy_schedule_of(owner: Any, name: Any) -> str:
    """``getattr(BasePolicy, "_dummy_schedule")``, as sb3's file names its dummy schedule; any other getattr is refused."""
    if owner is not BASE_POLICY or name != "_dummy_schedule":
        raise pickle.UnpicklingError(f"the file calls getattr({owner!r}, {str(name)[:40]!r}), which a policy file does not")
    return DUMMY_SCHEDULE


#: numpy's random generators, which a seeded space pickles (read past: a rebuilt space is unseeded)
RANDOM_NAMES = (
    "_pickle.__generator_ctor",
    "_pickle.__bit_generator_ctor",
    "_pickle.__randomstate_ctor",
    "_pcg64.PCG64",
    "_pcg64.PCG64DXSM",
    "_mt19937.MT19937",
    "_philox.Philox",
    "_sfc64.SFC64",
    "_generator.Generator",
    "bit_generator.SeedSequence",
    "bit_generator.__pyx_unpickle_SeedSequence",
)


def bound_names() -> list[tuple[Any, str]]:
    """torch's safe globals for the file: ``(what a name stands for, the name)``."""
    names: list[tuple[Any, str]] = [
        (SpaceRecord, f"gymnasium.spaces.{module}.{cls}")
        for module, cls in (
            ("box", "Box"),
            ("discrete", "Discrete"),
            ("multi_discrete", "MultiDiscrete"),
            ("multi_binary", "MultiBinary"),
            ("dict", "Dict"),
        )
    ]
    names += [(reconstruct, f"{module}._reconstruct") for module in MULTIARRAY] + [
        (scalar, f"{module}.scalar") for module in MULTIARRAY
    ]
    names += [
        (NDARRAY, "numpy.ndarray"),
        (DtypeSpec, "numpy.dtype"),
        (latin1_bytes, "_codecs.encode"),
        (ArraySpec, "ppo_dict.ArraySpec"),
        *((Ignored, f"numpy.random.{name}") for name in RANDOM_NAMES),
    ]
    names += [(ClassName(*name.rsplit(".", 1)), name) for name in CLASSES] + [(BASE_POLICY, f"{SB3_POLICIES}.BasePolicy")]
    names += [(dummy_schedule_of, "builtins.getattr"), (dummy_schedule_of, "__builtin__.getattr")]
    return names


def space_of(value: Any) -> spaces.Space:
    """A gymnasium space from its record (the attributes its pickle gave it), its values checked as the constructors
    check them."""
    if not isinstance(value, SpaceRecord):
        raise CheckpointError(f"a {type(value).__name__} where a space was expected")
    attrs = value.__dict__
    if "low" in attrs:
        low, high, dtype = np.asarray(attrs["low"]), np.asarray(attrs["high"]), np.dtype(attrs["dtype"])
        if dtype.kind not in "biuf" or low.shape != high.shape:
            raise CheckpointError(f"a Box of dtype {dtype} and bounds of shapes {low.shape}, {high.shape}")
        return spaces.Box(low, high, low.shape, dtype)
    if "nvec" in attrs:
        return spaces.MultiDiscrete(np.asarray(attrs["nvec"], np.int64), start=np.asarray(attrs.get("start", 0), np.int64))
    if "n" in attrs and isinstance(attrs.get("n"), (int, np.integer)) and "start" in attrs:
        return spaces.Discrete(int(attrs["n"]), start=int(attrs["start"]))
    if "n" in attrs:
        n = np.asarray(attrs["n"]).tolist()
        return spaces.MultiBinary(n)
    if "spaces" in attrs and isinstance(attrs["spaces"], dict):
        return spaces.Dict({str(key): space_of(sub) for key, sub in attrs["spaces"].items()})
    raise CheckpointError(
        f"a space with attributes {sorted(attrs)[:8]}: not a Box, Discrete, MultiDiscrete, MultiBinary or Dict"
    )


def resolve(value: Any) -> Any:
    """A file's argument with its class names as the classes of :data:`CLASSES` and its spaces rebuilt."""
    if isinstance(value, ClassName):
        return CLASSES[repr(value)]
    if isinstance(value, SpaceRecord):
        return space_of(value)
    if isinstance(value, dict):
        return {key: resolve(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(resolve(item) for item in value)
    return value


def read_policy_file(path: str) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """``(state_dict, constructor arguments)`` of the sb3 policy file ``path`` (module doc); CheckpointError naming why not."""
    data = read_capped(path, MAX_POLICY_BYTES, "an sb3 policy file")
    try:
        with torch.serialization.safe_globals(bound_names()):
            saved = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
        if not (isinstance(saved, dict) and set(saved) == {"state_dict", "data"} and isinstance(saved["data"], dict)):
            raise CheckpointError("not sb3's {'state_dict', 'data'} of a policy's save()")
        state = saved["state_dict"]
        if not (isinstance(state, dict) and all(isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in state.items())):
            raise CheckpointError("its state_dict is not names and tensors")
        arguments = resolve(materialize(saved["data"], {}, set()))
    except CheckpointError as exc:
        raise CheckpointError(f"{path}: {exc}") from None
    except Exception as exc:  # noqa: BLE001 (the file's bytes: whatever torch's weights-only reader refuses)
        # torch's words for a name refused
        named = re.search(r"(?:Unsupported global: GLOBAL|unsupported GLOBAL) (\S+)", str(exc))
        why = f"it names {named.group(1)}, which a policy file's data do not" if named else one_line(exc)
        raise CheckpointError(f"{path}: not read as an sb3 policy file (nothing it names is run): {why}") from None
    if not all(torch.isfinite(t).all() for t in state.values() if t.is_floating_point()):
        raise CheckpointError(f"{path}: its parameters are not all finite")
    return dict(state), arguments
