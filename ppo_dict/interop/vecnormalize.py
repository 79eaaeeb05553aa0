"""Normalisation statistics in files: rl-zoo's ``vecnormalize.pkl`` read without running its code, and
ppo_dict's own ``vecnormalize.npz``, which needs no pickle at all.

sb3's ``VecNormalize.save`` pickles the whole ``VecNormalize`` less its venv: its settings, its
``RunningMeanStd`` objects (or a dict of them), its spaces, and numpy arrays. A pickle runs whatever code
it names, so it is read through :class:`StatisticsUnpickler`, which builds only plain data (numeric
arrays checked against their bytes, bounded containers: ``ppo_dict.interop.plain_pickle``) and records for
sb3's ``VecNormalize``, ``RunningMeanStd`` and gymnasium's spaces (their state as attributes, none of their
code run), and refuses any other name. The statistics must be finite numbers of one shape, the counts
finite. ``trust_pickles`` reads it as sb3 does.
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
from ppo_dict.core.reading import MiB, npz_arrays, one_line, read_capped
from ppo_dict.interop.plain_pickle import Ignored, PlainUnpickler, Record, plain_load
from ppo_dict.interop.sb3_spaces import MAX_BOX_VALUES

#: the statistics file names in a folder, the one ppo_dict writes first
STATISTICS_FILES = ("vecnormalize.npz", "vecnormalize.pkl")
#: the ``format`` entry of ppo_dict's npz
NPZ_FORMAT = "ppo_dict/vecnormalize/1"
#: the settings a VecNormalize pins, as Config fields (``norm_gamma`` is its ``gamma``)
SETTINGS = {
    "norm_obs": "norm_obs",
    "norm_reward": "norm_reward",
    "clip_obs": "clip_obs",
    "clip_reward": "clip_reward",
    "norm_gamma": "gamma",
    "norm_epsilon": "epsilon",
}


class VecNormalizeRecord(Record):
    """sb3's ``VecNormalize`` as its pickle holds it (``obs_rms``, ``ret_rms``, ``norm_obs``, ``gamma``...)."""


class RunningMeanStdRecord(Record):
    """sb3's ``RunningMeanStd`` as its pickle holds it (``mean``, ``var``, ``count``)."""


RECORDS = {
    ("stable_baselines3.common.vec_env.vec_normalize", "VecNormalize"): VecNormalizeRecord,
    ("stable_baselines3.common.running_mean_std", "RunningMeanStd"): RunningMeanStdRecord,
}


class StatisticsUnpickler(PlainUnpickler):
    """Reads a ``VecNormalize`` pickle: plain data (:class:`~ppo_dict.interop.plain_pickle.PlainUnpickler`),
    records for sb3's ``VecNormalize`` and ``RunningMeanStd`` and for gymnasium's spaces, numpy's random
    generators (in a pickled space) read past; any other name is refused (``pickle.UnpicklingError`` naming
    it) before anything is called."""

    def other(self, module: str, name: str) -> Any:
        if (module, name) in RECORDS:
            return RECORDS[(module, name)]
        if module.startswith(("gymnasium.spaces.", "gym.spaces.")):
            return Record
        if module.startswith("numpy.random."):
            return Ignored
        return super().other(module, name)


#: the most bytes a VecNormalize pickle holds: the statistics of the largest Box ppo_dict rebuilds (mean and var
#: as float64) and its space's bounds, twice over (observation and original spaces: float32, bounded flags)
MAX_PICKLE_BYTES = MAX_BOX_VALUES * (2 * 8 + 2 * (2 * 4 + 2)) + MiB


def load_pickle(path: str, trust_pickles: bool) -> Any:
    """The object in ``path``: unpickled as sb3 does with ``trust_pickles``, else through :class:`StatisticsUnpickler`."""
    try:
        data = read_capped(path, MAX_PICKLE_BYTES, "a VecNormalize pickle")
        return pickle.loads(data) if trust_pickles else plain_load(data, StatisticsUnpickler)
    except pickle.UnpicklingError as exc:
        if trust_pickles or not str(exc).startswith("the pickle names "):
            raise CheckpointError(f"{path}: cannot read as an sb3 VecNormalize pickle: {exc}") from None
        raise CheckpointError(
            f"{path}: not unpickled, as pickles run code: {exc}, which a VecNormalize file does not hold "
            f"(numpy arrays, sb3's VecNormalize and RunningMeanStd, gymnasium's spaces, builtins). If you "
            f"trust the file, pass --trust_pickles, which unpickles it as sb3 does"
        ) from None
    except Exception as exc:  # noqa: BLE001 (truncated, not a pickle, not a regular file, too large...)
        raise CheckpointError(f"{path}: cannot read as an sb3 VecNormalize pickle: {one_line(exc)}") from None


def rms_values(rms: Any, where: str) -> dict[str, Any]:
    """``{"mean", "var", "count"}`` of a running mean/std (sb3's, its record, or ``{"mean", "var", "count"}``):
    numbers or numeric arrays (never lists, which a pickle can nest without end) of one shape, finite, the
    variances and the count not negative."""
    values = (
        [rms.get(k) for k in ("mean", "var", "count")]
        if isinstance(rms, dict)
        else [getattr(rms, k, None) for k in ("mean", "var", "count")]
    )
    numeric = (np.ndarray, np.number, np.bool_, int, float)
    if not all(
        isinstance(v, numeric) and (not isinstance(v, np.ndarray) or v.dtype.kind in "biuf") for v in values
    ) or np.ndim(values[2]):
        raise CheckpointError(
            f"{where}: not a RunningMeanStd's statistics (mean and var: numbers or numeric arrays, count: a "
            f"number; got {', '.join(type(v).__name__ for v in values)})"
        )
    try:
        mean, var, count = (np.array(v, np.float64) for v in values)
    except OverflowError:  # an integer past float64's range
        raise CheckpointError(f"{where}: statistics past float64's range") from None
    if mean.shape != var.shape:
        raise CheckpointError(f"{where}: mean {mean.shape} and var {var.shape} differ in shape")
    if not (np.isfinite(mean).all() and np.isfinite(var).all() and np.isfinite(count)) or (var < 0).any() or count < 0:
        raise CheckpointError(
            f"{where}: statistics that are not finite, or a negative variance or count (count {float(count)!r})"
        )
    return {"mean": mean, "var": var, "count": float(count)}


def read_pickle(path: str, trust_pickles: bool) -> tuple[dict[str, Any], dict[str, Any], bool]:
    """``(settings, {"obs_rms": {key: stats}, "ret_rms": stats}, training)`` of an sb3 ``VecNormalize`` pickle."""
    vec_normalize = load_pickle(path, trust_pickles)
    if type(vec_normalize).__name__ not in ("VecNormalize", VecNormalizeRecord.__name__):
        raise CheckpointError(f"{path}: holds a {type(vec_normalize).__name__}, not an sb3 VecNormalize")
    try:
        obs_rms = getattr(vec_normalize, "obs_rms", None)  # sb3 makes none with norm_obs=False
        obs = (
            {}
            if obs_rms is None
            else {str(key): rms_values(r, f"{path}: obs_rms[{key!r}]") for key, r in obs_rms.items()}
            if isinstance(obs_rms, dict)
            else {OBS_KEY: rms_values(obs_rms, f"{path}: obs_rms")}
        )
        settings = {name: getattr(vec_normalize, attribute) for name, attribute in SETTINGS.items()}
        training = bool(vec_normalize.training)
    except AttributeError as exc:
        raise CheckpointError(f"{path}: not a whole sb3 VecNormalize ({exc})") from None
    return settings, {"obs_rms": obs, "ret_rms": rms_values(vec_normalize.ret_rms, f"{path}: ret_rms")}, training


def read_npz(path: str) -> tuple[dict[str, Any], dict[str, Any], bool]:
    """:func:`read_pickle`'s values from ppo_dict's ``vecnormalize.npz`` (numpy's own format: no pickle)."""
    try:
        arrays = npz_arrays(path, MAX_PICKLE_BYTES, "ppo_dict's vecnormalize.npz")
        header = json.loads(str(arrays.pop("header")))
        if header.get("format") != NPZ_FORMAT:
            raise ValueError(f"its format is {header.get('format')!r}, not {NPZ_FORMAT!r}")

        def stats(prefix: str) -> dict[str, Any]:
            return rms_values({k: arrays[f"{prefix}.{k}"] for k in ("mean", "var", "count")}, f"{path}: {prefix}")

        obs = {str(key): stats(f"obs_rms.{i}") for i, key in enumerate(header["obs_keys"])}
        return (
            {name: header[name] for name in SETTINGS},
            {"obs_rms": obs, "ret_rms": stats("ret_rms")},
            bool(header["training"]),
        )
    except CheckpointError:
        raise
    except Exception as exc:  # noqa: BLE001 (a truncated, foreign or hand-edited file: whatever numpy or json raises)
        raise CheckpointError(f"{path}: cannot read as ppo_dict's VecNormalize statistics: {one_line(exc)}") from None


def read_statistics(
    path: str, trust_pickles: bool = False
) -> tuple[dict[str, Any], dict[str, Any], tuple[str, ...], list[str]]:
    """``(pinned normalisation settings, Normalizer state, normalised keys, notes)`` from ``vecnormalize.npz`` or
    an sb3 ``vecnormalize.pkl``."""
    settings, state, training = read_npz(path) if path.endswith(".npz") else read_pickle(path, trust_pickles)
    flags = {name: value for name, value in settings.items() if name in ("norm_obs", "norm_reward")}
    numbers = {name: value for name, value in settings.items() if name not in flags}
    wrong = [f"{name}={str(value)[:40]}" for name, value in flags.items() if not isinstance(value, (bool, np.bool_))]
    wrong += [
        f"{name}={str(value)[:40]}"
        for name, value in numbers.items()
        if not (isinstance(value, (int, float, np.number)) and not isinstance(value, (bool, np.bool_)) and abs(value) < 1e300)
    ]
    if wrong:
        raise CheckpointError(f"{path}: a setting that is not a boolean or a finite number: {', '.join(wrong)}")
    pinned = {
        "normalize": True,
        **{name: bool(value) for name, value in flags.items()},
        **{name: float(value) for name, value in numbers.items()},
    }
    notes = (
        []
        if training
        else [
            f"note: {path} was saved with training=False (an evaluation env's): ppo_dict updates the statistics while "
            "training, as a training env's VecNormalize does; sb3 would keep them frozen"
        ]
    )
    return pinned, {**state, "returns": np.zeros(0)}, tuple(state["obs_rms"]), notes


def write_npz(path: str, normalizer: Any, obs_keys: list[str]) -> str:
    """Write ``normalizer``'s statistics (``ppo_dict.algo.rollout.normalize.Normalizer``) as ppo_dict's ``vecnormalize.npz``;
    ``obs_keys``: the keys sb3's VecNormalize normalises (none where it has ``norm_obs=False``)."""
    header = {
        "format": NPZ_FORMAT,
        "training": True,
        "obs_keys": obs_keys,
        "norm_obs": bool(normalizer.norm_obs and obs_keys),
        **{name: getattr(normalizer, attribute) for name, attribute in SETTINGS.items() if name != "norm_obs"},
    }
    arrays: dict[str, Any] = {"header": np.array(json.dumps(header))}
    for prefix, rms in [
        *((f"obs_rms.{i}", normalizer.obs_rms[key]) for i, key in enumerate(obs_keys)),
        ("ret_rms", normalizer.ret_rms),
    ]:
        arrays.update(
            {
                f"{prefix}.mean": np.asarray(rms.mean),
                f"{prefix}.var": np.asarray(rms.var),
                f"{prefix}.count": np.float64(rms.count),
            }
        )
    write: Callable[[Any], None] = lambda f: np.savez(f, **arrays)  # noqa: E731
    atomic_write(path, write)
    return path


def statistics_candidates(folders: list[str]) -> list[str]:
    """The statistics files to look for in ``folders``, in order: ppo_dict's npz before the pickle in each."""
    return [os.path.join(folder, name) for folder in folders for name in STATISTICS_FILES]
