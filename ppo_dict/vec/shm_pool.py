"""The worker pool PPO trains with: W blocks of E env columns in shared-memory storage.

With ``main_steps_envs`` the main process steps block 0 itself (the same runner code a worker
runs) while W - 1 worker processes step the others: it would only wait otherwise, and one
process fewer competes for the cores (faster on few cores, same numbers).
"""
from __future__ import annotations

import contextlib
from typing import Any, Callable, Optional

from ppo_dict.vec.backend import EnvBackend
from ppo_dict.vec.group import WorkerGroup
from ppo_dict.vec.runner import Runner, env_seeds
from ppo_dict.vec.worker import env_worker_error, error_report


class ShmEnvPool:
    """The env pool of :class:`ppo_dict.ppo.PPO` with ``num_workers`` blocks of ``envs_per_worker`` envs.

    ``storage`` is shared with the workers: PPO writes ``storage.env_actions`` and calls
    ``step(t)``; the workers write ``env_obs[t+1]``, ``env_rewards[t]``, ``terminated[t]``,
    ``truncated[t]``, the terminal observations and the episode statistics. Env i is first
    reset with ``seed + i``.
    """

    def __init__(
        self,
        backend: EnvBackend,
        num_workers: int,
        envs_per_worker: int,
        n_steps: int,
        mp_method: str = "forkserver",
        step_timeout: float = 60.0,
        start_timeout: float = 120.0,
        main_steps_envs: bool = False,
    ):
        self.backend = backend
        self.observation_space, self.action_space = backend.observation_space, backend.action_space
        in_main = envs_per_worker if main_steps_envs and num_workers > 1 else 0
        self._group = WorkerGroup(
            backend, num_workers - (in_main > 0), envs_per_worker, n_steps, mp_method=mp_method, step_timeout=step_timeout,
            start_timeout=start_timeout, first_env=in_main,
        )
        self.num_envs = self._group.num_envs
        self.storage = self._group.storage
        self._main_runner: Optional[Runner] = None
        if in_main:
            runner = backend.make_runner(range(in_main), self.storage)
            try:
                runner.open()
            except BaseException:
                runner.close()
                self._group.close()
                raise
            self._main_runner = runner

    def reset(self, seed: Optional[int]) -> None:
        """Reset env i with ``seed + i`` (no seed for ``None``) and write ``env_obs[0]``."""
        seeds = env_seeds(seed, self.num_envs)
        self._group.send(("reset", seeds, None), detail=seeds)
        self._in_main("reset", lambda runner: runner.reset(seeds, None), detail=seeds)
        self._group.gather()

    def step(self, t: int) -> None:
        """Step every env with ``storage.env_actions``; results land in storage at step t."""
        self._group.send(("step", t), detail=t)
        self._in_main("step", lambda runner: runner.step(t), detail=t)
        self._group.gather()

    def _in_main(self, command: str, call: Callable[[Runner], Any], detail: Any) -> None:
        """Run ``call`` on the envs this process steps, while the workers step theirs.

        An env failure here is reported like a worker's (:class:`EnvWorkerError` naming the env,
        the command and the original exception with its traceback), after the workers answer.
        """
        runner = self._main_runner
        if runner is None:
            return
        try:
            call(runner)
        except Exception as exc:
            report = error_report(-1, runner, command, exc)
            with contextlib.suppress(Exception):
                self._group.gather()  # the workers' answers to this command, so none is left pending
            self.close()
            raise env_worker_error(report, self.backend.label, command, detail) from exc
        finally:
            runner.active = (-1, "")

    @property
    def pids(self) -> list[int]:
        return self._group.pids

    @property
    def closed(self) -> bool:
        return self._group.closed

    def close(self) -> None:
        if self._main_runner is not None:
            runner, self._main_runner = self._main_runner, None
            with contextlib.suppress(Exception):
                runner.close()
        self._group.close()
