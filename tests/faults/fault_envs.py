"""Test-only envs that fail on purpose, registered with gymnasium on import so that workers
can build them (``EnvSpec.gym_packages = ("tests.faults.fault_envs",)``).

An env learns which env index it is from its first reset seed (env i is reset with seed + i),
so a fault can be aimed at one env in one worker while its siblings behave.
"""

from __future__ import annotations

import ctypes
import multiprocessing
import os
import signal
import time
from dataclasses import replace
from typing import Any, Optional

import gymnasium as gym
import numpy as np
import torch
from gymnasium import spaces

from ppo_dict.envs import EnvSpec, resolve_env_name

ENV_ID = "FaultEnv-v0"
PACKAGE = __name__
#: modes: what the aimed env does at its ``at_step``-th step (counted over all its episodes)
MODES = (
    "none",
    "step_raise",
    "reset_raise",
    "autoreset_raise",
    "init_raise",
    "build_raise",
    "build_hang",
    "hang",
    "hang_c",
    "hang_gil",
    "hang_swallow",
    "reset_hang",
    "nan_obs",
    "nan_reward",
    "segfault",
)
#: printed (flushed, on stdout) by the aimed env just before it hangs, so a test knows the hang began
HANG_MARKER = "FAULTENV HANGING"
#: printed (flushed, on stdout) by the aimed env just before it crashes its process
CRASH_MARKER = "FAULTENV CRASHING"


class FaultEnv(gym.Env):
    """obs float32[2] = (episode step, env seed); action float32[1] in [-1, 1]; reward = action.

    Episodes terminate after ``episode_len`` steps. The env whose first reset seed is
    ``bad_seed`` misbehaves as ``mode`` says; ``init_raise`` raises in the constructor of the
    worker process named ``bad_process`` (never in the main process, which builds one env to
    read the spaces); ``build_raise`` and ``build_hang`` raise or sleep in the constructor of the
    ``at_step``-th env built in its process (the main process builds one first, to read the spaces). ``hang`` sleeps in
    ``step`` (``hang_swallow`` too, catching any Exception that interrupts it), ``reset_hang`` in its first reset;
    ``hang_c`` sleeps with the signals blocked, as C code that never returns to Python would (no Python
    signal handler can run in it); ``hang_gil`` too, in libc's ``sleep`` called through
    ``ctypes.PyDLL``, which keeps the GIL: no Python thread of the process can run.
    ``segfault`` crashes its process in native code (``ctypes.string_at(0)``: SIGSEGV) once: it creates
    the file ``crash_marker`` first and never crashes where that file exists (the run resumed after the crash).
    Every step sleeps ``step_s`` seconds (a costly env). ``only_rank`` (>= 0): the fault happens only in that rank of a
    torchrun run (its ``RANK``), as a host that cannot build the env would.
    """

    #: envs built in this process so far
    built = 0

    def __init__(
        self,
        mode: str = "none",
        bad_seed: int = 0,
        at_step: int = 3,
        episode_len: int = 5,
        hang_s: float = 3600.0,
        bad_process: str = "ppo_dict-env-worker-1",
        step_s: float = 0.0,
        crash_marker: str = "",
        only_rank: int = -1,
    ):
        if mode not in MODES:
            raise ValueError(f"mode={mode!r}: one of {MODES}")
        if only_rank >= 0 and os.environ.get("RANK") != str(only_rank):
            mode = "none"
        if mode == "init_raise" and multiprocessing.current_process().name == bad_process:
            raise ValueError(f"bad kwarg for {bad_process}")
        FaultEnv.built += 1
        if mode in ("build_raise", "build_hang") and FaultEnv.built == at_step:
            if mode == "build_raise":
                raise RuntimeError(f"constructor boom (env {at_step} built in this process)")
            print(f"{HANG_MARKER} constructor pid={multiprocessing.current_process().pid}", flush=True)
            time.sleep(hang_s)
        self.observation_space = spaces.Box(-np.inf, np.inf, (2,), np.float32)
        self.action_space = spaces.Box(-1.0, 1.0, (1,), np.float32)
        self.mode, self.bad_seed, self.at_step, self.episode_len, self.hang_s = mode, bad_seed, at_step, episode_len, hang_s
        self.step_s, self.crash_marker = step_s, crash_marker
        self.first_seed: Optional[int] = None
        self.resets = 0
        self.t = 0
        self.total = 0

    def _obs(self) -> np.ndarray:
        return np.array([self.t, -1 if self.first_seed is None else self.first_seed], dtype=np.float32)

    @property
    def aimed(self) -> bool:
        return self.first_seed == self.bad_seed

    def reset(self, *, seed: Optional[int] = None, options: Optional[dict] = None) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        if self.first_seed is None and seed is not None:
            self.first_seed = seed
        self.resets += 1
        if self.aimed and (
            self.mode == "reset_raise" and self.resets == 1 or self.mode == "autoreset_raise" and self.resets == 2
        ):
            raise RuntimeError(f"reset boom (seed={seed})")
        if self.aimed and self.mode == "reset_hang" and self.resets == 1:
            self._hang()
        self.t = 0
        return self._obs(), {"resets": self.resets}

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        self.t += 1
        self.total += 1
        obs, reward = self._obs(), float(action[0])
        if self.aimed and self.total == self.at_step:
            if self.mode == "step_raise":
                raise RuntimeError("boom")
            if self.mode in ("hang", "hang_c", "hang_gil"):
                self._hang()
            if self.mode == "hang_swallow":  # an env that catches every Exception and carries on
                try:
                    self._hang()
                except Exception:  # noqa: BLE001
                    pass
            if self.mode == "segfault" and not os.path.exists(self.crash_marker):
                open(self.crash_marker, "x").close()
                print(f"{CRASH_MARKER} seed={self.first_seed} pid={os.getpid()}", flush=True)
                ctypes.string_at(0)  # reads address 0: SIGSEGV, as a bug in an env's C code would
            if self.mode == "nan_obs":
                obs[0] = np.nan
            if self.mode == "nan_reward":
                reward = float("nan")
        if self.step_s:
            time.sleep(self.step_s)
        return obs, reward, self.t >= self.episode_len, False, {"t": self.t}

    def _hang(self) -> None:
        blocked = {signal.SIGALRM, signal.SIGINT, signal.SIGTERM, signal.SIGHUP}
        if self.mode == "hang_gil":  # every signal: C code in a loop does not return to Python for any
            blocked = signal.valid_signals() - {signal.SIGKILL, signal.SIGSTOP}
        if self.mode in ("hang_c", "hang_gil"):
            signal.pthread_sigmask(signal.SIG_BLOCK, blocked)
        # once they are blocked: a test's signal sent on the marker must find the hang begun (printed before, the main
        # thread's handler could run on a busy host before the mask took, and the env never hung)
        print(f"{HANG_MARKER} seed={self.first_seed} pid={multiprocessing.current_process().pid}", flush=True)
        if self.mode == "hang_gil":
            ctypes.PyDLL(None).sleep(int(self.hang_s))  # PyDLL: the GIL is held during the call
        else:
            time.sleep(self.hang_s)
        if self.mode in ("hang_c", "hang_gil"):
            signal.pthread_sigmask(signal.SIG_UNBLOCK, blocked)


def fault_spec(**kwargs: Any) -> EnvSpec:
    """The EnvSpec of FaultEnv with these constructor kwargs."""
    return replace(resolve_env_name(f"gym_{ENV_ID}", gym_packages=(PACKAGE,)), kwargs=kwargs)


if ENV_ID not in gym.registry:
    gym.register(ENV_ID, entry_point=f"{__name__}:FaultEnv")


class FaultyExtractor(torch.nn.Module):
    """A features extractor (sb3's ``features_extractor_class`` form: ``cls(observation_space, **kwargs)``) that
    flattens, except in a worker process, where at its ``at_call``-th call it raises (``raise``), sleeps (``hang``)
    or SIGKILLs its own process (``die``): a fault in the middle of a worker's policy step (the policy where the
    envs are). The main process (its start probe, its own envs' rows) never meets it."""

    def __init__(self, observation_space: spaces.Space, mode: str = "raise", at_call: int = 3):
        super().__init__()
        self.features_dim = int(np.prod(observation_space.shape))
        self.mode, self.at_call, self.calls = mode, at_call, 0

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        if multiprocessing.parent_process() is not None:
            self.calls += 1
            if self.calls == self.at_call:
                if self.mode == "raise":
                    raise RuntimeError("boom in the policy's forward")
                if self.mode == "hang":
                    time.sleep(3600)
                if self.mode == "die":
                    os.kill(os.getpid(), signal.SIGKILL)
        return obs.flatten(1)
