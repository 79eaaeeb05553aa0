"""The env backends' table: a spec names its backend, ``probe_env`` finds it there, and a new kind
of env is a backend class and its line in ``ppo_dict.vec.BACKENDS``."""

import dataclasses

import numpy as np
import pytest

from ppo_dict.envs import make_env, resolve_env_name
from ppo_dict.envs.godot.spec import godot_spec
from ppo_dict.vec import BACKENDS, probe_env
from ppo_dict.vec.backend import GymBackend
from ppo_dict.vec.in_process import InProcessEnvPool


class LoggedGym(GymBackend):
    """A backend of its own name that builds gymnasium envs and records each probe."""

    probes: list = []

    @classmethod
    def probe(cls, spec):
        cls.probes.append(spec.backend)
        return super().probe(dataclasses.replace(spec, backend="gym"))


def test_a_spec_names_its_backend_and_the_table_finds_it(monkeypatch) -> None:
    spec = resolve_env_name("gym_CartPole-v1")
    assert spec.backend == "gym" and type(probe_env(spec)) is GymBackend
    assert godot_spec().backend == "godot" and godot_spec().is_godot and not spec.is_godot
    monkeypatch.setitem(BACKENDS, "logged", LoggedGym.probe)  # one line of the table
    monkeypatch.setattr(LoggedGym, "probes", [])
    logged = dataclasses.replace(spec, backend="logged")
    pool = InProcessEnvPool(probe_env(logged), 2, n_steps=1)
    try:
        pool.reset(0)
        assert LoggedGym.probes == ["logged"] and pool.storage.env_obs["obs"][0].shape == (2, 4)
        assert np.array_equal(pool.storage.env_obs["obs"][0, 1], make_env(spec).reset(seed=1)[0])
    finally:
        pool.close()
    with pytest.raises(ValueError, match=r"gym_CartPole-v1 is stepped by the trainer's 'logged' env backend"):
        make_env(logged)
    with pytest.raises(ValueError, match=r"no env backend named 'nope' \(ppo_dict.vec.BACKENDS has gym, godot, logged\)"):
        probe_env(dataclasses.replace(spec, backend="nope"))
