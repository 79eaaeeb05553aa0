"""``ShmVecEnv``: an sb3 ``VecEnv`` on ppo_dict's shared-memory workers.

A drop-in for ``DummyVecEnv`` / ``SubprocVecEnv`` (``make_vec_env(..., vec_env_cls=ShmVecEnv)``)
that gives sb3 the same numbers as ``DummyVecEnv`` (what it returns: ``ppo_dict.vec.pool_vec_env``).
Like both sb3 vec envs it adds no ``Monitor``: ``make_vec_env`` wraps each env in one (that is
where ``info["episode"]`` comes from), a bare ``env_fn`` gets none.

Spaces: what sb3's vec envs take, Box, Discrete, MultiDiscrete, MultiBinary and one level of Dict
or Tuple of them, for observations and actions alike (a Dict or Tuple action batch is one dict or
tuple per env, as sb3's classes take it).

Observations, rewards and dones travel through a one-step shared storage; only the info dicts are
pickled back. Given to ``ppo_dict.PPO``, its envs are built again in the trainer's worker pool
(the vec env then steps through that pool: :meth:`~ppo_dict.vec.pool_vec_env.PoolVecEnv.attach`).
"""

from __future__ import annotations

import multiprocessing
from typing import Callable, Optional, Sequence, Union

import gymnasium as gym
from stable_baselines3.common.vec_env.base_vec_env import CloudpickleWrapper
from stable_baselines3.common.vec_env.patch_gym import _patch_env

from ppo_dict.core.layout import plan_layout
from ppo_dict.envs import vec_space_problem
from ppo_dict.vec.backend import GymBackend, probe
from ppo_dict.vec.in_process import InProcessEnvPool
from ppo_dict.vec.pool_vec_env import PoolVecEnv
from ppo_dict.vec.shm_pool import ShmEnvPool


class EnvFns:
    """Picklable ``env index -> env`` from arbitrary callables.

    The callables are cloudpickled (sb3's ``CloudpickleWrapper``): forkserver and spawn workers
    cannot receive lambdas or closures through plain pickle.
    """

    def __init__(self, env_fns: Sequence[Callable[[], gym.Env]]):
        self.fns = [CloudpickleWrapper(fn) for fn in env_fns]

    def __call__(self, env_idx: int) -> gym.Env:
        return _patch_env(self.fns[env_idx].var())  # as DummyVecEnv / SubprocVecEnv do


class ShmVecEnv(PoolVecEnv):
    """``len(env_fns)`` envs in ``num_workers`` worker processes, each stepping its block in turn.

    :param env_fns: callables that each build one env (env i is ``env_fns[i]()``).
    :param start_method: ``forkserver`` (default where available, as SubprocVecEnv), ``spawn`` or ``fork``.
    :param num_workers: worker processes (default: one per usable CPU, ``ppo_dict.core.layout``), the envs
        split over them in contiguous blocks, unevenly where they do not divide (7 envs in 2: 4 + 3).
    :param step_timeout: seconds one step/reset may take before the workers are declared hung.
    :param spin_wait_us: microseconds the workers and this process look for each other's messages
        before sleeping (``ppo_dict.vec.channel.wait_for``; 0: sleep at once; None: 1000 where the
        workers and this process each have a physical core, else 0).
    :param start: start the workers now (``ppo_dict.make_vec_env`` passes False: they start on
        first use, and never where ``ppo_dict.PPO`` trains on the envs in its own pool).
    :param in_place_of_dummy: made by ``ppo_dict.make_vec_env`` where sb3's would make a ``DummyVecEnv``,
        which starts no process: the workers never import the main module (``env_fns`` are cloudpickled,
        by value where the main module defines them), so a script without ``if __name__ == "__main__":``
        is not run again in them; and where the layout would have one worker, not asked for (one env: an
        evaluation env's usual size), the envs step in this process, as ``DummyVecEnv``'s do.

    ``env_fns[0]`` is also called once in this process to read the spaces (the shared storage is
    sized before any worker starts), as gymnasium's ``AsyncVectorEnv`` does. ``backend`` and
    ``layout`` are the recipe of the envs and of their workers, which ``ppo_dict.PPO`` builds its
    pool from.
    """

    def __init__(
        self,
        env_fns: Sequence[Callable[[], gym.Env]],
        start_method: Optional[str] = None,
        num_workers: Optional[int] = None,
        step_timeout: float = 60.0,
        spin_wait_us: Optional[float] = None,
        start: bool = True,
        in_place_of_dummy: bool = False,
    ):
        n_envs = len(env_fns)
        if n_envs == 0:
            raise ValueError("ShmVecEnv needs at least one env_fn")
        if num_workers is not None and not (isinstance(num_workers, int) and 1 <= num_workers <= n_envs):
            raise ValueError(f"num_workers={num_workers!r}: must be a whole number in [1, {n_envs}] (the number of envs)")
        # sb3's process steps none of the envs: a worker on each usable CPU, the envs split over them (unevenly where
        # they do not divide)
        self._planned = plan_layout(n_envs, num_workers, None, main_steps_envs=False)
        start_method = start_method or ("forkserver" if "forkserver" in multiprocessing.get_all_start_methods() else "spawn")
        multiprocessing.get_context(start_method)  # a bad method: multiprocessing's own ValueError, as SubprocVecEnv gives it
        observation_space, action_space, env_id, render_mode = probe(lambda: _patch_env(env_fns[0]()), "env from env_fns[0]")
        for space, what in ((observation_space, "observation"), (action_space, "action")):
            problem = vec_space_problem(space, what)
            if problem:
                raise ValueError(
                    f"ShmVecEnv ({env_id or 'env_fns'}): {problem}; a fixed shared-memory layout holds Box, "
                    f"Discrete, MultiDiscrete, MultiBinary and one level of Dict or Tuple of them, as sb3's vec "
                    f"envs do"
                )
        backend = GymBackend(
            EnvFns(env_fns),
            observation_space,
            action_space,
            label=env_id or "env_fns",
            record_infos=True,
            needs_main=not in_place_of_dummy,
        )
        # the workers as asked (num_workers None: not asked, so ppo_dict.PPO's layout decides)
        layout = dict(num_workers=num_workers, mp_method=start_method, step_timeout=step_timeout, spin_wait_us=spin_wait_us)
        self._in_process = in_place_of_dummy and self._planned.processes == 1 and num_workers is None
        super().__init__(
            n_envs,
            observation_space,
            action_space,
            backend.label,
            start=self._start_workers,
            render_mode=render_mode,
            backend=backend,
            layout={k: v for k, v in layout.items() if v is not None},
        )
        if start:
            self.pool  # noqa: B018 (starts the workers)

    def _start_workers(self) -> Union[InProcessEnvPool, ShmEnvPool]:
        if self._in_process:
            return InProcessEnvPool(self.backend, self.num_envs, 1, step_timeout=self.layout["step_timeout"])
        return ShmEnvPool(
            self.backend,
            n_steps=1,
            mp_method=self.layout["mp_method"],
            step_timeout=self.layout["step_timeout"],
            spin_wait_us=self.layout.get("spin_wait_us"),
            layout=self._planned,
        )
