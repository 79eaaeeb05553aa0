"""An env's whole state as plain data, wrappers included: taken (:func:`env_state`) and put back
(:func:`load_env_state`), so that a run resumed from a checkpoint steps on as the run that was never stopped.

Plain data: numbers, strings, bytes, numpy arrays and scalars, and tuples, lists and dicts of them; a
checkpoint stores it as ``torch.load(weights_only=True)`` reads it (``ppo_dict.run.env_states``), so nothing
is pickled and nothing runs on load. The state is one entry per layer of the wrapper stack, top first, each
``{"class": "module.Qualname", "attrs": {name: value}, ...}``:

* every attribute of the layer that is state (``vars(layer)``), minus what is configuration (:data:`CONFIG`:
  spaces, specs, the wrapped env, constructor arguments); numpy and ``random`` generators as their states;
  ``collections.deque`` as its items and ``maxlen``;
* gymnasium's MuJoCo envs (``MujocoEnv``) also ``"mujoco"``: the integration state (``mj_getState`` with
  ``mjSTATE_INTEGRATION``: time, positions, velocities, actuators, warm start, ...) **and every MjData array of a
  model-fixed size**: after ``mj_step`` the derived arrays (``xpos``, ``cfrc_ext``, ``cinert``...) belong to the
  pose before the integration, which neither ``mj_setState`` nor ``mj_forward`` rebuilds, and Ant-v5 reads
  ``data.body(...).xpos`` before it steps (its first reward after a restore is 3.7 off without them). The arrays
  sized by the constraints of the moment (``efc_*``, islands) are rebuilt by the next ``mj_step`` before use;
* ALE's ``AtariEnv`` also ``"ale"``: ``cloneState(include_rng=True).serialize()`` (ale-py 0.9+ restores it
  exactly). ALE parses those bytes in C++: :func:`load_env_state` puts them back only when ``trusted`` (the run
  directory's own checkpoints); elsewhere :class:`StateNotRestorable` says the env restarts;
* a layer whose class defines ``state_dict()`` and ``load_state_dict(state)`` (plain data in and out, as
  ``torch.nn.Module``'s pair) is taken through them instead: the pair for envs of a user's own.

An env holding anything else (a Box2D world, a socket, an object of a class not listed here) is not
restorable: :func:`restore_problem` names the attribute, and a resumed run restarts that env as before.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import math
import random
import types
import weakref
from typing import Any, Optional

import gymnasium as gym
import numpy as np

from .plain import StateNotRestorable, plain, qualname

#: the user's pair of methods for an env (or wrapper) of their own
STATE_METHODS = ("state_dict", "load_state_dict")
#: attributes that are configuration, not state: built by the constructor and never changed by reset or step
CONFIG = frozenset(
    {
        "env",
        "_env",
        "spec",
        "_cached_spec",
        "metadata",
        "_metadata",
        "render_mode",
        "action_space",
        "observation_space",
        "_action_space",
        "_observation_space",
        "single_action_space",
        "single_observation_space",
        "_saved_kwargs",
        "_ezpickle_args",
        "_ezpickle_kwargs",
        "model",
        "data",
        "mujoco_renderer",
        "fullpath",
        "observation_structure",
        "ale",
        "_action_set",
        "viewer",
        "renderer",
        "screen",
        "clock",
        "surf",
        "window",
        "_renderer",
        "_context",
    }
)
#: the MjData arrays whose sizes follow the constraints of the moment: rebuilt by the next ``mj_step`` before use
MUJOCO_TRANSIENT = ("efc_", "iefc_", "efm_", "island_", "map_efc", "map_iefc", "iacc", "ifrc", "contact")
#: attribute values that are code, not state (an ActionMasker's function, a callback): set by a constructor
CODE = (types.FunctionType, types.MethodType, types.BuiltinFunctionType, functools.partial, type)


#: values that are never configuration (looked up first: a snapshot is taken at every rollout's start)
_DATA_TYPES = frozenset({int, float, bool, str, type(None), np.ndarray, list, tuple, dict, np.float64, np.float32, np.int64})


def _is_config(name: str, value: Any) -> bool:
    """Configuration, not state: a name of :data:`CONFIG`, code, or a frozen dataclass (an options record)."""
    if name in CONFIG:
        return True
    if type(value) in _DATA_TYPES:
        return False
    return isinstance(value, CODE) or (
        dataclasses.is_dataclass(value) and not isinstance(value, type) and value.__dataclass_params__.frozen
    )


def _attrs(layer: Any, label: str) -> dict[str, Any]:
    return {name: plain(value, f"{label}.{name}") for name, value in vars(layer).items() if not _is_config(name, value)}


#: each MjData's fixed arrays, found once (``dir`` and ``getattr`` of every field cost more than the copies)
_FIXED_ARRAYS: "weakref.WeakKeyDictionary[Any, dict[str, np.ndarray]]" = weakref.WeakKeyDictionary()


def _mujoco_fixed_arrays(data: Any) -> dict[str, np.ndarray]:
    """MjData's numpy arrays by name (views of its memory, which a model-fixed array keeps), less the constraints' of
    the moment."""
    arrays = _FIXED_ARRAYS.get(data)
    if arrays is None:
        arrays = _FIXED_ARRAYS[data] = {
            name: value
            for name in dir(data)
            if not name.startswith(("_", *MUJOCO_TRANSIENT)) and isinstance(value := getattr(data, name, None), np.ndarray)
        }
    return arrays


def _mujoco_state(env: Any) -> dict[str, Any]:
    import mujoco

    spec = mujoco.mjtState.mjSTATE_INTEGRATION
    integration = np.empty(mujoco.mj_stateSize(env.model, spec))
    mujoco.mj_getState(env.model, env.data, integration, spec)
    return {
        "integration": integration,
        "arrays": {name: view.copy() for name, view in _mujoco_fixed_arrays(env.data).items()},
        "cameras": _cameras(env),
    }


#: the fields of a viewer's ``MjvCamera``: set at its first render from the state of the moment, then kept
CAMERA = ("type", "fixedcamid", "trackbodyid", "lookat", "distance", "azimuth", "elevation", "orthographic")


def _cameras(env: Any) -> dict[str, dict[str, Any]]:
    """The free cameras of the env's renderer, by render mode: a pixel env's frames depend on where its camera was
    first pointed (gymnasium's ``MujocoRenderer`` sets its ``lookat`` at its first render)."""
    viewers = getattr(getattr(env, "mujoco_renderer", None), "_viewers", None) or {}
    return {
        str(mode): {name: plain(getattr(viewer.cam, name), f"camera.{name}") for name in CAMERA if hasattr(viewer.cam, name)}
        for mode, viewer in viewers.items()
        if hasattr(viewer, "cam")
    }


def _load_cameras(env: Any, cameras: Any, label: str) -> None:
    renderer = getattr(env, "mujoco_renderer", None)
    if not isinstance(cameras, dict) or (cameras and renderer is None):
        raise StateNotRestorable(f"{label}: saved cameras that this env's renderer cannot take")
    for mode, fields in cameras.items():
        if not isinstance(fields, dict) or set(fields) - set(CAMERA):
            raise StateNotRestorable(f"{label}: the saved camera of {mode!r} is not an MjvCamera's fields")
        cam = renderer._get_viewer(mode).cam
        for name, value in fields.items():
            if name == "lookat":
                cam.lookat[...] = value
            else:
                setattr(cam, name, value)


def _load_mujoco_state(env: Any, state: dict[str, Any], label: str) -> None:
    import mujoco

    spec = mujoco.mjtState.mjSTATE_INTEGRATION
    integration = state["integration"]
    if not (isinstance(integration, np.ndarray) and integration.shape == (mujoco.mj_stateSize(env.model, spec),)):
        raise StateNotRestorable(f"{label}: MuJoCo's integration state does not fit this model")
    arrays, views = state["arrays"], _mujoco_fixed_arrays(env.data)
    if not isinstance(arrays, dict) or set(arrays) != set(views):
        raise StateNotRestorable(
            f"{label}: MjData's arrays differ from this MuJoCo's ({sorted(set(arrays) ^ set(views))[:3]}...)"
        )
    for name, saved in arrays.items():
        target = views[name]
        if not isinstance(saved, np.ndarray) or saved.shape != target.shape or saved.dtype != target.dtype:
            raise StateNotRestorable(
                f"{label}: MjData.{name} is "
                f"{getattr(saved, 'dtype', type(saved))}{getattr(saved, 'shape', '')}, this model's "
                f"{target.dtype}{target.shape}"
            )
    for name, saved in arrays.items():
        views[name][...] = saved
    mujoco.mj_setState(env.model, env.data, np.ascontiguousarray(integration, dtype=np.float64), spec)
    _load_cameras(env, state.get("cameras", {}), label)


def _is_mujoco(layer: Any) -> bool:
    try:
        from gymnasium.envs.mujoco.mujoco_env import MujocoEnv
    except ImportError:  # gymnasium without its MuJoCo extra
        return False
    return isinstance(layer, MujocoEnv)


def _is_ale(layer: Any) -> bool:
    return type(layer).__module__.startswith("ale_py") and hasattr(layer, "ale")


def _own_pair(layer: Any) -> bool:
    return all(callable(getattr(type(layer), name, None)) for name in STATE_METHODS)


def layers(env: gym.Env) -> list[Any]:
    """The wrapper stack, top first, down to the env itself."""
    found = [env]
    while isinstance(found[-1], gym.Wrapper):
        found.append(found[-1].env)
    return found


def env_state(env: gym.Env) -> list[dict[str, Any]]:
    """``env``'s state as plain data, a dict per layer, top first (see the module's text); raises
    :class:`StateNotRestorable` naming what is not plain data."""
    state = []
    for layer in layers(env):
        label = type(layer).__name__
        entry: dict[str, Any] = {"class": qualname(layer)}
        if _own_pair(layer):
            entry["own"] = plain(layer.state_dict(), f"{label}.state_dict()")
        else:
            entry["attrs"] = _attrs(layer, label)
            if _is_mujoco(layer):
                entry["mujoco"] = _mujoco_state(layer)
            elif _is_ale(layer):
                entry["ale"] = bytes(layer.ale.cloneState(include_rng=True).serialize())
        state.append(entry)
    return state


def restore_problem(env: gym.Env) -> str:
    """Why ``env``'s state cannot be taken as plain data; ``""`` when it can."""
    try:
        env_state(env)
    except StateNotRestorable as exc:
        return str(exc)
    return ""


def _revive(saved: Any, current: Any, where: str) -> Any:
    """The value to set for an attribute saved as ``saved`` (plain data), given its ``current`` value: a
    generator's state goes into the generator itself, an array of the same shape and dtype is written in place."""
    if isinstance(saved, dict) and "__generator__" in saved:
        if not isinstance(current, np.random.Generator):
            raise StateNotRestorable(f"{where}: saved as a numpy Generator, now a {qualname(current)}")
        current.bit_generator.state = saved["__generator__"]
        return current
    if isinstance(saved, dict) and "__random_state__" in saved:
        if not isinstance(current, np.random.RandomState):
            raise StateNotRestorable(f"{where}: saved as a numpy RandomState, now a {qualname(current)}")
        current.set_state(saved["__random_state__"])
        return current
    if isinstance(saved, dict) and "__random__" in saved:
        if not isinstance(current, random.Random):
            raise StateNotRestorable(f"{where}: saved as a random.Random, now a {qualname(current)}")
        current.setstate(_as_tuples(saved["__random__"]))
        return current
    if isinstance(saved, dict) and "__deque__" in saved:
        maxlen = saved.get("maxlen")
        if not (maxlen is None or (isinstance(maxlen, int) and 0 <= maxlen >= len(saved["__deque__"]))):
            raise StateNotRestorable(f"{where}: a deque of {len(saved['__deque__'])} items with maxlen {maxlen!r}")
        olds = list(current) if isinstance(current, collections.deque) else []
        items = [_revive(v, olds[i] if i < len(olds) else None, f"{where}[{i}]") for i, v in enumerate(saved["__deque__"])]
        return collections.deque(items, maxlen=maxlen)
    if isinstance(saved, np.ndarray) and isinstance(current, np.ndarray):
        # the dtype may change with the step (Acrobot's state: float64 at reset, float32 after)
        if saved.shape != current.shape:
            raise StateNotRestorable(f"{where}: saved with the shape {saved.shape}, this env has {current.shape}")
        if current.flags.writeable and saved.dtype == current.dtype:
            current[...] = saved
            return current
        return saved.copy()
    if isinstance(saved, (list, tuple)):
        items = [_revive(v, None, f"{where}[{i}]") for i, v in enumerate(saved)]
        return tuple(items) if isinstance(saved, tuple) else items
    if isinstance(saved, dict):
        return {
            k: _revive(v, current.get(k) if isinstance(current, dict) else None, f"{where}[{k!r}]") for k, v in saved.items()
        }
    return saved.copy() if isinstance(saved, (np.ndarray, np.generic)) else saved


def _as_tuples(value: Any) -> Any:
    """``random.Random.setstate`` wants the tuples it gave (a state that went through a list comes back as one)."""
    return tuple(_as_tuples(v) for v in value) if isinstance(value, (list, tuple)) else value


def load_env_state(env: gym.Env, state: Any, trusted: bool = True) -> None:
    """Put ``state`` (:func:`env_state`'s, of an env built the same way) into ``env``, which was reset first (a
    reset draws from the env's generator; its state is overwritten here). Raises :class:`StateNotRestorable` for a
    state that does not fit this env (another wrapper stack, another shape or type), before changing anything where
    it can tell (the stack, the MuJoCo arrays); ``trusted``: whether bytes that a C++ library parses (ALE's) may be
    given to it (only from the run directory's own checkpoints)."""
    stack = layers(env)
    if not (isinstance(state, list) and len(state) == len(stack) and all(isinstance(e, dict) for e in state)):
        raise StateNotRestorable(
            f"the saved wrapper stack has {len(state) if isinstance(state, list) else '?'} layers, "
            f"this env {len(stack)} ({' > '.join(type(layer).__name__ for layer in stack)})"
        )
    for layer, entry in zip(stack, state):
        if entry.get("class") != qualname(layer):
            raise StateNotRestorable(f"the saved layer {entry.get('class')!r} is a {qualname(layer)} in this env")
        if _is_ale(layer) and not trusted:
            raise StateNotRestorable(
                f"{type(layer).__name__}: ALE's saved bytes are read only from the run directory's own checkpoints"
            )
    for layer, entry in zip(stack, state):
        _load_layer(layer, entry, trusted)


def _load_layer(layer: Any, entry: dict[str, Any], trusted: bool) -> None:
    label = type(layer).__name__
    if _own_pair(layer):
        if "own" not in entry:
            raise StateNotRestorable(f"{label}: no state_dict() saved")
        try:
            layer.load_state_dict(entry["own"])
        except Exception as exc:  # noqa: BLE001 (the env's own check of what it was given: one message)
            raise StateNotRestorable(f"{label}.load_state_dict: {type(exc).__name__}: {exc}") from exc
        return
    attrs = entry.get("attrs")
    if not isinstance(attrs, dict):
        raise StateNotRestorable(f"{label}: no attributes saved")
    # a saved name may be an attribute the instance has, or a new one; never one of the class's (a method, a property)
    foreign = sorted(
        name
        for name in attrs
        if not isinstance(name, str)
        or name.startswith("__")
        or name in CONFIG
        or (name not in vars(layer) and hasattr(type(layer), name))
    )
    if foreign:
        raise StateNotRestorable(f"{label}: the saved attributes {foreign[:3]} are not state of this env")
    if _is_mujoco(layer):
        _load_mujoco_state(layer, entry.get("mujoco"), label)
    elif _is_ale(layer):
        import ale_py

        if not isinstance(entry.get("ale"), bytes):
            raise StateNotRestorable(f"{label}: no ALE state saved")
        layer.ale.restoreState(ale_py.ALEState(entry["ale"]))
    for name, saved in attrs.items():
        try:
            setattr(layer, name, _revive(saved, getattr(layer, name, None), f"{label}.{name}"))
        except (ValueError, TypeError, KeyError, OverflowError) as exc:  # a generator's or a deque's state that does not fit
            raise StateNotRestorable(f"{label}.{name}: {type(exc).__name__}: {exc}") from exc


def nan_free(value: Any) -> bool:
    """Whether plain data holds no NaN (a float array or number): a hostile checkpoint's, refused before use."""
    if isinstance(value, float):
        return not math.isnan(value)
    if isinstance(value, (np.ndarray, np.generic)):
        return (
            not (np.issubdtype(value.dtype, np.floating) or np.issubdtype(value.dtype, np.complexfloating))
            or not np.isnan(value).any()
        )
    if isinstance(value, (list, tuple)):
        return all(nan_free(v) for v in value)
    if isinstance(value, dict):
        return all(nan_free(v) for v in value.values())
    return True


def first_problem(state: Any) -> Optional[str]:
    """A structural problem of a saved env state that no env would take (not a list of layer dicts, NaN), else None."""
    if not (isinstance(state, list) and state and all(isinstance(e, dict) and isinstance(e.get("class"), str) for e in state)):
        return "not a list of layers, each a dict with its class"
    if not nan_free(state):
        return "holds NaN"
    return None
