"""An sb3 zip read as data: its ``data`` entry without unpickling, its parameters with torch's weights-only loading.

sb3 writes ``data`` as JSON (``stable_baselines3.common.save_util.data_to_json``): a value JSON holds is
written as itself, any other as ``{":type:": str(type(value)), ":serialized:": base64 of its cloudpickle,
and its first-level attributes (a dict's items), each as itself where JSON holds it, else as its str}``.
sb3's ``load`` unpickles every ``:serialized:`` value, and a pickle runs whatever code it names. Here none
is unpickled: each is rebuilt from the JSON beside it,

* a gymnasium space (Box, Discrete, MultiDiscrete, MultiBinary, a Dict of them) from its attributes: a
  Box's bounds as numpy printed them (8 decimals; an array numpy summarised with ``...`` is not rebuilt;
  ``ppo_dict.interop.sb3_spaces``);
* a schedule (sb3's ``FloatSchedule`` of a ``ConstantSchedule`` or of a ``LinearSchedule``, rl-zoo's
  ``SimpleLinearSchedule``) as a float, rl-zoo's ``lin_<initial>`` or sb3's ``LinearSchedule``, values a config holds
  (:data:`ppo_dict.interop.schedules.SCHEDULES`; a function of a script's is named, for its refusal);
* a class (the policy, the rollout buffer, ``policy_kwargs``' activation, optimizer and extractor) by
  module and name, only from :data:`ALLOWED_CLASSES`;
* ``policy_kwargs`` from its items (plain values and allowed classes),

or kept as an :class:`Unrebuilt` marker, which whoever needs that key refuses, naming it
(:func:`refuse_unrebuilt`); a key nobody reads (the last observation) stays a marker. The episode
buffers (deques of dicts of numbers) are read as plain data (``ppo_dict.interop.plain_pickle``: numbers,
strings, bounded containers and numeric arrays, so nothing runs).
``trust_pickles`` reads the zip as sb3 does (its ``load_from_zip_file``), after the caller's one warning line
(:func:`trust_warning`).
"""

from __future__ import annotations

import base64
import collections
import contextlib
import importlib
import io
import json
import os
import re
import sys
from dataclasses import dataclass
from typing import Any, Iterable, Iterator, Optional

import numpy as np

from ppo_dict.algo.networks.policy import ACTIVATION_CLASSES
from ppo_dict.core.errors import CheckpointError
from ppo_dict.core.files import tensor_problems
from ppo_dict.interop.schedules import SCHEDULES
from ppo_dict.interop.sb3_spaces import NotRebuildable, space_from_attrs
from ppo_dict.interop.plain_pickle import plain_load
from ppo_dict.interop.zip_entries import check_entries, counter_problems, open_zip, read_entry, read_params

SERIALIZED, TYPE = ":serialized:", ":type:"


def plain_data(serialized: str) -> Any:
    """sb3's ``:serialized:`` text (base64 of a cloudpickle) of plain data, through
    :class:`~ppo_dict.interop.plain_pickle.PlainUnpickler` (nothing it names runs)."""
    try:
        return plain_load(base64.b64decode(serialized))
    except Exception as exc:  # noqa: BLE001 (the file's bytes, not ours: a refusal naming why)
        raise NotRebuildable(f"not plain data ({exc})") from None


def finite_number(value: Any) -> bool:
    """A bool, an integer of at most 64 bits, or a finite float (Python's or numpy's)."""
    if isinstance(value, (bool, np.bool_)):
        return True
    if isinstance(value, (int, np.integer)):
        return -(2**63) <= int(value) < 2**63
    return isinstance(value, (float, np.floating)) and bool(np.isfinite(value))


def episode_buffer(value: Any) -> Any:
    """An episode buffer (sb3's ``ep_info_buffer``: Monitor's dicts of numbers; ``ep_success_buffer``: booleans)
    whose every value is a finite number, else NotRebuildable."""
    items = list(value) if isinstance(value, collections.deque) else None
    if items is None or not all(
        finite_number(item) or (isinstance(item, dict) and all(finite_number(v) for v in item.values())) for item in items
    ):
        raise NotRebuildable("not a deque of episodes' finite numbers")
    return value


#: the classes a zip may name, by module: sb3's and sb3-contrib's PPO policies and rollout buffers, and
#: what their ``policy_kwargs`` take (torch's activations, Adam, sb3's default features extractors)
ALLOWED_CLASSES: dict[str, tuple[str, ...]] = {
    "stable_baselines3.common.policies": ("ActorCriticPolicy", "ActorCriticCnnPolicy", "MultiInputActorCriticPolicy"),
    "sb3_contrib.common.maskable.policies": (
        "MaskableActorCriticPolicy",
        "MaskableActorCriticCnnPolicy",
        "MaskableMultiInputActorCriticPolicy",
    ),
    "sb3_contrib.common.recurrent.policies": (
        "RecurrentActorCriticPolicy",
        "RecurrentActorCriticCnnPolicy",
        "RecurrentMultiInputActorCriticPolicy",
    ),
    "stable_baselines3.common.buffers": ("RolloutBuffer", "DictRolloutBuffer"),
    "sb3_contrib.common.maskable.buffers": ("MaskableRolloutBuffer", "MaskableDictRolloutBuffer"),
    "stable_baselines3.common.torch_layers": ("FlattenExtractor", "NatureCNN", "CombinedExtractor"),
    "torch.nn.modules.activation": tuple(cls.__name__ for cls in ACTIVATION_CLASSES.values()),
    "torch.optim.adam": ("Adam",),
    **{
        f"torch.optim.{name.lower()}": (name,)
        for name in ("AdamW", "RMSprop", "SGD", "Adagrad", "Adadelta", "Adamax", "NAdam", "RAdam")
    },
}
#: what ``str(type(cls))`` is for a class
CLASS_TYPES = ("type", "abc.ABCMeta")
SPACE_MODULES = ("gymnasium.spaces.", "gym.spaces.")


@dataclass(frozen=True)
class Unrebuilt:
    """A ``:serialized:`` value of key ``key`` that is not unpickled and that its JSON does not describe
    (``type``: the type sb3 wrote; ``name``: the class it is, for a class; ``why``: what was missing)."""

    key: str
    type: str
    why: str
    name: str = ""

    def __repr__(self) -> str:
        return f"<{self.key}: a pickled {self.name or self.type}, not unpickled>"


@contextlib.contextmanager
def gymnasium_unpatched() -> Iterator[None]:
    """Undo, on leaving, what importing rl_zoo3 does to gymnasium: ``rl_zoo3.gym_patches`` replaces
    ``TimeLimit`` process-wide. A zip written by rl-zoo holds its schedules by reference
    (``rl_zoo3.utils.SimpleLinearSchedule``), so unpickling one (``trust_pickles``) imports rl_zoo3."""
    import gymnasium

    modules = [
        m
        for m in (gymnasium.wrappers, getattr(gymnasium.wrappers, "common", None), gymnasium.envs.registration)
        if m is not None
    ]
    saved = [vars(m).get("TimeLimit") for m in modules]  # None: the module had no such name
    try:
        yield
    finally:
        for module, value in zip(modules, saved):
            if value is not None:
                module.TimeLimit = value
            elif "TimeLimit" in vars(module):
                del module.TimeLimit


def trust_warning(paths: Iterable[str]) -> None:
    """The one line ``--trust_pickles`` prints before the files are unpickled."""
    print(
        f"warning: --trust_pickles: unpickling {', '.join(map(str, paths))} as sb3 does, which runs any code a pickle "
        f"names: only for files you trust",
        file=sys.stderr,
        flush=True,
    )


def read_zip(
    path: Any,
    trust_pickles: bool = False,
    device: Any = "cpu",
    custom_objects: Optional[dict[str, Any]] = None,
    print_system_info: bool = False,
) -> tuple[Optional[dict[str, Any]], dict[str, Any]]:
    """``(data, params)`` of an sb3 zip (a path or a binary file): ``data`` as :func:`data_from_json` reads it
    (None without a ``data`` entry); ``params`` (state dicts) with torch's weights-only loading, as sb3 does.
    Every entry is read with a cap and the counters are checked (``ppo_dict.interop.zip_entries``): a
    :class:`CheckpointError` names what is refused. ``custom_objects`` replace the values of their keys,
    unread, as in sb3's ``load``."""
    from stable_baselines3.common.save_util import load_from_zip_file

    if not isinstance(path, (str, os.PathLike)):
        path = io.BytesIO(path.read())  # read twice: the entries, then (trust_pickles) sb3's reading
    with open_zip(path) as archive:
        check_entries(archive, path)
        if not trust_pickles:
            if print_system_info and "system_info.txt" in archive.namelist():  # as sb3's load_from_zip_file prints it
                print(
                    "== SAVED MODEL SYSTEM INFO ==\n" + read_entry(archive, "system_info.txt", path).decode(errors="replace")
                )
            try:
                text = read_entry(archive, "data", path).decode() if "data" in archive.namelist() else None
            except UnicodeDecodeError as exc:
                raise CheckpointError(f"{path}: its data entry is not text: {exc}") from None
            params = read_params(archive, path, device)
    if trust_pickles:  # the caller has said so (trust_warning); the entries' sizes are checked above
        if not isinstance(path, (str, os.PathLike)):
            path.seek(0)
        with gymnasium_unpatched():
            data, params, _ = load_from_zip_file(
                path, device=device, custom_objects=custom_objects, print_system_info=print_system_info
            )
    else:
        data = None if text is None else data_from_json(text, path, custom_objects)
    tensors = tensor_problems(params, "parameters")  # NaN weights or Adam moments, a view larger than its bytes
    if tensors:
        raise CheckpointError(f"{path}: its parameters are not an sb3 model's: {'; '.join(tensors)}")
    problems = [] if data is None else counter_problems(data)
    if problems:
        raise CheckpointError(f"{path}: its data entry's counters are not counts: {'; '.join(problems)}")
    return data, params


def data_from_json(text: str, path: Any = "the zip", custom_objects: Optional[dict[str, Any]] = None) -> dict[str, Any]:
    """sb3's ``json_to_data`` without unpickling: plain values as they are, each pickled one rebuilt or an
    :class:`Unrebuilt`."""
    try:
        raw = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise CheckpointError(f"{path}: its data entry is not JSON ({type(exc).__name__}: {exc})") from None
    if not isinstance(raw, dict):
        raise CheckpointError(f"{path}: its data entry is not a JSON object")
    data = {}
    for key, value in raw.items():
        if custom_objects is not None and key in custom_objects:
            data[key] = custom_objects[key]
        elif isinstance(value, dict) and SERIALIZED in value:
            data[key] = rebuild(key, value)
        else:
            data[key] = value
    return data


def refuse_unrebuilt(path: Any, data: dict[str, Any], keys: Iterable[str], what: str = "") -> None:
    """Raise :class:`CheckpointError` naming every one of ``keys`` whose value was not rebuilt."""
    missing = [data[k] for k in keys if isinstance(data.get(k), Unrebuilt)]
    if missing:
        listed = "; ".join(f"{m.key!r} (a pickled {m.name or m.type}: {m.why})" for m in missing)
        raise CheckpointError(
            f"{path}: not unpickled, as pickles run code: {listed}. {what}If you trust the file, "
            "pass --trust_pickles (trust_pickles=True to load), which unpickles it as sb3 does"
        )


def type_name(text: Any) -> str:
    """``"gymnasium.spaces.box.Box"`` from sb3's ``":type:"`` text ``"<class 'gymnasium.spaces.box.Box'>"``."""
    match = re.fullmatch(r"<class '([\w.]+)'>", str(text))
    return match.group(1) if match else str(text)


def class_name(value: Any) -> tuple[str, str]:
    """``(module, name)`` of a class, or of the class an :class:`Unrebuilt` marker stands for."""
    if isinstance(value, Unrebuilt):
        module, _, name = value.name.rpartition(".")
        return module or "?", name or repr(value)
    return getattr(value, "__module__", "?"), getattr(value, "__name__", repr(value))


def rebuild(key: str, value: dict[str, Any]) -> Any:
    """The value ``value`` (sb3's JSON of a pickled one) stands for, or an :class:`Unrebuilt` marker."""
    kind = type_name(value.get(TYPE))
    attrs = {k: v for k, v in value.items() if k not in (TYPE, SERIALIZED)}
    name = ""
    try:
        if kind in CLASS_TYPES:
            name = described_class(attrs)
            return allowed_class(name)
        if kind.startswith(SPACE_MODULES):
            return space_from_attrs(kind.rpartition(".")[2], attrs)
        if kind in SCHEDULES:
            return SCHEDULES[kind](attrs)
        if kind == "dict":
            return {k: item_value(k, v) for k, v in attrs.items()}
        if kind == "collections.deque":  # the episode buffers: dicts of numbers, read as data
            return episode_buffer(plain_data(value.get(SERIALIZED, "")))
        raise NotRebuildable("its JSON does not describe it")
    except (NotRebuildable, ValueError, TypeError, KeyError, OverflowError, MemoryError, RecursionError) as exc:
        # the file's JSON, not ours
        return Unrebuilt(key, kind, str(exc) or type(exc).__name__, name or getattr(exc, "function", ""))


def described_class(attrs: dict[str, Any]) -> str:
    """``module.Name`` of a class from its JSON: ``__module__``, and the name its methods' texts give
    (``"<function ActorCriticPolicy.forward at 0x...>"``)."""
    names = {
        m.group(1) for v in attrs.values() if isinstance(v, str) for m in [re.search(r"<function (\w+)\.\w+ at 0x", v)] if m
    }
    if len(names) != 1 or not isinstance(attrs.get("__module__"), str):
        raise NotRebuildable("its JSON does not name one class")
    return f"{attrs['__module__']}.{names.pop()}"


def allowed_class(name: str) -> type:
    """The class ``module.Name`` from :data:`ALLOWED_CLASSES` (imported from its installed package), else NotRebuildable."""
    module, _, attr = name.rpartition(".")
    if attr not in ALLOWED_CLASSES.get(module, ()):
        raise NotRebuildable(
            f"{name} is not a class ppo_dict rebuilds (sb3's and sb3-contrib's PPO policies and buffers, "
            "torch's activations, Adam, sb3's default features extractors)"
        )
    try:
        return getattr(importlib.import_module(module), attr)
    except ImportError as exc:
        raise NotRebuildable(f"{name} needs {module.split('.')[0]}, not installed here ({exc})") from exc


def item_value(key: str, value: Any) -> Any:
    """One item of a pickled dict (``policy_kwargs``): a plain value, or an allowed class from its ``<class '...'>`` text."""
    if isinstance(value, str) and value.startswith("<") and value.endswith(">"):
        match = re.fullmatch(r"<class '([\w.]+)'>", value)
        if match is None:
            raise NotRebuildable(f"{key}: {value} is not a value ppo_dict rebuilds")
        try:
            return allowed_class(match.group(1))
        except NotRebuildable as exc:
            raise NotRebuildable(f"{key}: {exc}") from None
    return value
