"""Normalisation statistics in files: rl-zoo's ``vecnormalize.pkl`` read without running its code, and
ppo_dict's own ``vecnormalize.npz``, which needs no pickle at all.

sb3's ``VecNormalize.save`` pickles the whole ``VecNormalize`` less its venv: its settings, its
``RunningMeanStd`` objects (or a dict of them), its spaces, and numpy arrays. A pickle runs whatever code
it names, so it is read through :class:`StatisticsUnpickler`, which builds only numpy arrays, builtins
and plain records for sb3's ``VecNormalize``, ``RunningMeanStd`` and gymnasium's spaces (their state as
attributes, none of their code run), and refuses any other name. ``trust_pickles`` reads it as sb3 does.
``--export_sb3`` writes both files: the pickle for sb3 and rl-zoo, the npz for ppo_dict.
"""
from __future__ import annotations

import json
import os
import pickle
from typing import Any, Callable

import numpy as np

from ppo_dict.core.errors import CheckpointError
from ppo_dict.core.files import atomic_write
from ppo_dict.data.storage import OBS_KEY
from ppo_dict.interop.sb3_zip import DataUnpickler

#: the statistics file names in a folder, the one ppo_dict writes first
STATISTICS_FILES = ("vecnormalize.npz", "vecnormalize.pkl")
#: the ``format`` entry of ppo_dict's npz
NPZ_FORMAT = "ppo_dict/vecnormalize/1"
#: the settings a VecNormalize pins, as Config fields (``norm_gamma`` is its ``gamma``)
SETTINGS = {"norm_obs": "norm_obs", "norm_reward": "norm_reward", "clip_obs": "clip_obs", "clip_reward": "clip_reward",
            "norm_gamma": "gamma", "norm_epsilon": "epsilon"}


class Record:
    """A pickled object's state as attributes; none of its class's code runs."""

    def __setstate__(self, state: Any) -> None:
        parts = state if isinstance(state, tuple) else (state,)  # (dict, slots), as pickle writes an object with __slots__
        for part in parts:
            if isinstance(part, dict):
                self.__dict__.update({k: v for k, v in part.items() if isinstance(k, str)})


class VecNormalizeRecord(Record):
    """sb3's ``VecNormalize`` as its pickle holds it (``obs_rms``, ``ret_rms``, ``norm_obs``, ``gamma``...)."""


class RunningMeanStdRecord(Record):
    """sb3's ``RunningMeanStd`` as its pickle holds it (``mean``, ``var``, ``count``)."""


class Ignored(Record):
    """Stands for numpy's random generators (and their constructors) in a pickled space: the statistics do not need them."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __setstate__(self, state: Any) -> None:
        pass


RECORDS = {("stable_baselines3.common.vec_env.vec_normalize", "VecNormalize"): VecNormalizeRecord,
           ("stable_baselines3.common.running_mean_std", "RunningMeanStd"): RunningMeanStdRecord}


class StatisticsUnpickler(DataUnpickler):
    """Reads a ``VecNormalize`` pickle: plain data (:class:`~ppo_dict.interop.sb3_zip.DataUnpickler`),
    records for sb3's ``VecNormalize`` and ``RunningMeanStd`` and for gymnasium's spaces; any other
    name is refused (``pickle.UnpicklingError`` naming it) before anything is called."""

    def other(self, module: str, name: str) -> Any:
        if (module, name) in RECORDS:
            return RECORDS[(module, name)]
        if module.startswith(("gymnasium.spaces.", "gym.spaces.")):
            return Record
        if module.startswith("numpy.random."):
            return Ignored
        return super().other(module, name)


def load_pickle(path: str, trust_pickles: bool) -> Any:
    """The object in ``path``: unpickled as sb3 does with ``trust_pickles``, else through :class:`StatisticsUnpickler`."""
    try:
        with open(path, "rb") as f:
            return pickle.load(f) if trust_pickles else StatisticsUnpickler(f).load()
    except pickle.UnpicklingError as exc:
        if trust_pickles or not str(exc).startswith("the pickle names "):
            raise CheckpointError(f"{path}: cannot read as an sb3 VecNormalize pickle: {exc}") from exc
        raise CheckpointError(f"{path}: not unpickled, as pickles run code: {exc}, which a VecNormalize file does not hold (numpy "
                              "arrays, sb3's VecNormalize and RunningMeanStd, gymnasium's spaces, builtins). If you trust the file, "
                              "pass --trust_pickles, which unpickles it as sb3 does") from None
    except Exception as exc:  # truncated, not a pickle...
        raise CheckpointError(f"{path}: cannot read as an sb3 VecNormalize pickle: {type(exc).__name__}: {exc}") from exc


def rms_values(rms: Any, where: str) -> dict[str, Any]:
    """``{"mean", "var", "count"}`` of a running mean/std (sb3's, or its record), checked to be numbers."""
    try:
        mean, var, count = np.asarray(rms.mean, np.float64).copy(), np.asarray(rms.var, np.float64).copy(), float(rms.count)
    except (AttributeError, TypeError, ValueError) as exc:
        raise CheckpointError(f"{where}: not a RunningMeanStd's statistics ({type(exc).__name__}: {exc})") from None
    if mean.shape != var.shape:
        raise CheckpointError(f"{where}: mean {mean.shape} and var {var.shape} differ in shape")
    return {"mean": mean, "var": var, "count": count}


def read_pickle(path: str, trust_pickles: bool) -> tuple[dict[str, Any], dict[str, Any], bool]:
    """``(settings, {"obs_rms": {key: stats}, "ret_rms": stats}, training)`` of an sb3 ``VecNormalize`` pickle."""
    vec_normalize = load_pickle(path, trust_pickles)
    if type(vec_normalize).__name__ not in ("VecNormalize", VecNormalizeRecord.__name__):
        raise CheckpointError(f"{path}: holds a {type(vec_normalize).__name__}, not an sb3 VecNormalize")
    try:
        obs_rms = getattr(vec_normalize, "obs_rms", None)  # sb3 makes none with norm_obs=False
        obs = {} if obs_rms is None else ({str(key): rms_values(r, f"{path}: obs_rms[{key!r}]") for key, r in obs_rms.items()} if isinstance(obs_rms, dict)
               else {OBS_KEY: rms_values(obs_rms, f"{path}: obs_rms")})
        settings = {name: getattr(vec_normalize, attribute) for name, attribute in SETTINGS.items()}
        training = bool(vec_normalize.training)
    except AttributeError as exc:
        raise CheckpointError(f"{path}: not a whole sb3 VecNormalize ({exc})") from None
    return settings, {"obs_rms": obs, "ret_rms": rms_values(vec_normalize.ret_rms, f"{path}: ret_rms")}, training


def read_npz(path: str) -> tuple[dict[str, Any], dict[str, Any], bool]:
    """:func:`read_pickle`'s values from ppo_dict's ``vecnormalize.npz`` (numpy's own format: no pickle)."""
    try:
        with np.load(path, allow_pickle=False) as npz:
            arrays = {name: npz[name] for name in npz.files}
        header = json.loads(str(arrays.pop("header")))
        if header.get("format") != NPZ_FORMAT:
            raise ValueError(f"its format is {header.get('format')!r}, not {NPZ_FORMAT!r}")
        stats = lambda prefix: {"mean": arrays[f"{prefix}.mean"].astype(np.float64), "var": arrays[f"{prefix}.var"].astype(np.float64),  # noqa: E731
                                "count": float(arrays[f"{prefix}.count"])}
        obs = {str(key): stats(f"obs_rms.{i}") for i, key in enumerate(header["obs_keys"])}
        return {name: header[name] for name in SETTINGS}, {"obs_rms": obs, "ret_rms": stats("ret_rms")}, bool(header["training"])
    except Exception as exc:  # noqa: BLE001 (a truncated, foreign or hand-edited file: whatever numpy or json raises)
        raise CheckpointError(f"{path}: cannot read as ppo_dict's VecNormalize statistics: {type(exc).__name__}: {exc}") from None


def read_statistics(path: str, trust_pickles: bool = False) -> tuple[dict[str, Any], dict[str, Any], tuple[str, ...], list[str]]:
    """``(pinned normalisation settings, Normalizer state, normalised keys, notes)`` from ``vecnormalize.npz`` or
    an sb3 ``vecnormalize.pkl``."""
    settings, state, training = read_npz(path) if path.endswith(".npz") else read_pickle(path, trust_pickles)
    try:
        pinned = {"normalize": True, **{name: (bool if name in ("norm_obs", "norm_reward") else float)(value) for name, value in settings.items()}}
    except (TypeError, ValueError) as exc:
        raise CheckpointError(f"{path}: a setting is not a number ({exc})") from None
    notes = [] if training else [
        f"note: {path} was saved with training=False (an evaluation env's): ppo_dict updates the statistics while "
        "training, as a training env's VecNormalize does; sb3 would keep them frozen"]
    return pinned, {**state, "returns": np.zeros(0)}, tuple(state["obs_rms"]), notes


def write_npz(path: str, normalizer: Any, obs_keys: list[str]) -> str:
    """Write ``normalizer``'s statistics (``ppo_dict.algo.normalize.Normalizer``) as ppo_dict's ``vecnormalize.npz``;
    ``obs_keys``: the keys sb3's VecNormalize normalises (none where it has ``norm_obs=False``)."""
    header = {"format": NPZ_FORMAT, "training": True, "obs_keys": obs_keys, "norm_obs": bool(normalizer.norm_obs and obs_keys),
              **{name: getattr(normalizer, attribute) for name, attribute in SETTINGS.items() if name != "norm_obs"}}
    arrays: dict[str, Any] = {"header": np.array(json.dumps(header))}
    for prefix, rms in [*((f"obs_rms.{i}", normalizer.obs_rms[key]) for i, key in enumerate(obs_keys)), ("ret_rms", normalizer.ret_rms)]:
        arrays.update({f"{prefix}.mean": np.asarray(rms.mean), f"{prefix}.var": np.asarray(rms.var), f"{prefix}.count": np.float64(rms.count)})
    write: Callable[[Any], None] = lambda f: np.savez(f, **arrays)  # noqa: E731
    atomic_write(path, write)
    return path


def statistics_candidates(folders: list[str]) -> list[str]:
    """The statistics files to look for in ``folders``, in order: ppo_dict's npz before the pickle in each."""
    return [os.path.join(folder, name) for folder in folders for name in STATISTICS_FILES]
