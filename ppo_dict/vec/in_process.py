"""Every env column stepped in the calling process, in env order (sb3 ``DummyVecEnv``): ``--num_workers 0``."""

from __future__ import annotations

from typing import Any, Optional, Sequence

from ppo_dict.core.layout import split_halves
from ppo_dict.data.storage import RolloutStorage
from ppo_dict.vec.backend import EnvBackend
from ppo_dict.vec.runner import Seeds, env_seeds
from ppo_dict.vec.in_main import call_in_main, open_in_main
from ppo_dict.vec.watchdog import Owner


class InProcessEnvPool:
    """``n_envs`` env columns of ``backend`` in one runner, in this process.

    Attributes: backend, num_envs, observation_space, action_space, storage (ordinary memory), runner;
    infos, reset_infos: each env's last sb3 infos while :meth:`record_infos` is on.
    An env that raises gives :class:`EnvWorkerError` and one that hangs for ``step_timeout`` seconds
    :class:`EnvTimeoutError` (where ``ppo_dict.vec.watchdog`` runs), as the worker pool's envs do.
    """

    waits = False  # no other process to wait for: owed work is done before a step

    def __init__(
        self, backend: EnvBackend, n_envs: int, n_steps: int, step_timeout: float = 60.0, start_timeout: float = 120.0
    ):
        if n_envs < 1:
            raise ValueError(f"n_envs={n_envs} for {backend.label}: must be at least 1")
        self.backend, self.num_envs = backend, n_envs
        self.observation_space, self.action_space = backend.observation_space, backend.action_space
        self.rollouts_begun = 0  # rollouts whose step 0 was stepped (the runner snapshots its envs there)
        self.storage = RolloutStorage(
            self.observation_space, self.action_space, n_steps, n_envs, info_keywords=backend.info_keywords
        )
        self.runner = backend.make_runner(range(n_envs), self.storage)
        self._owner = Owner(backend.label, self.runner)
        try:
            open_in_main(self._owner, start_timeout, lambda error: self.runner.close())
        except BaseException as exc:
            if not isinstance(exc, Exception):  # KeyboardInterrupt: call_in_main cleans up only after errors
                self.runner.close()
            raise
        self.closed = False
        self.halves = split_halves(n_envs, backend.unit)
        self.step_timeout = step_timeout
        self.infos: list[dict[str, Any]] = [{} for _ in range(n_envs)]
        self.reset_infos: list[dict[str, Any]] = [{} for _ in range(n_envs)]

    def reset(self, seed: Seeds, options: Optional[Sequence[dict[str, Any]]] = None) -> None:
        """Reset env i with ``seed + i`` (no seed for ``None``; a list: each env's seed), ``options[i]``
        when given, and write ``env_obs[0]``."""
        seeds = env_seeds(seed, self.num_envs)
        result = call_in_main(
            self._owner, "reset", lambda: self.runner.reset(seeds, options), seeds, self.step_timeout, self._fail
        )
        if result is not None:
            self.reset_infos = list(result)

    def step(self, t: int, rollout: bool = True) -> None:
        """Step every env with ``storage.env_actions``; results land in storage at step t (``rollout``:
        errors name t as the rollout step; False for a vec env's step)."""
        self.rollouts_begun += rollout and t == 0
        result = call_in_main(
            self._owner, "step", lambda: self.runner.step(t), t if rollout else None, self.step_timeout, self._fail
        )
        if result is not None:
            self.infos, self.reset_infos = list(result[0]), list(result[1])

    def adapt(self, busy_elsewhere: bool) -> None:
        """Nothing to adapt: no other process of the run waits for this one."""

    def record_infos(self, on: bool) -> None:
        """Whether steps and resets keep sb3's infos in :attr:`infos` and :attr:`reset_infos` (they cost a dict per env
        step)."""
        self.runner.record_infos = on

    def call(
        self,
        kind: str,
        indices: Sequence[int],
        name: str = "",
        args: tuple = (),
        kwargs: Optional[dict] = None,
        timeout: Optional[float] = None,
        per_env: Optional[Sequence[Any]] = None,
    ) -> list[Any]:
        """sb3's ``get_attr``/``set_attr``/``env_method``/``env_is_wrapped``/``has_attr`` on envs ``indices``, in their order
        (and the runner's own calls: ``Runner.call``); ``timeout``: the worker pool's, nothing to wait for here;
        ``per_env``: a value for each of ``indices``, given as the first of ``args``."""
        return self.runner.call(kind, list(indices), name, args if per_env is None else (list(per_env), *args), kwargs or {})

    @property
    def pids(self) -> list[int]:
        return []

    def step_async(self, t: int, columns: range, rollout: bool = True) -> None:
        """Step the envs in ``columns`` (here, at once: there is no other process to wait for)."""
        self.rollouts_begun += rollout and t == 0 and columns.start == 0
        result = call_in_main(
            self._owner, "step", lambda: self.runner.step(t, columns), t if rollout else None, self.step_timeout, self._fail
        )
        if result is not None:
            self.infos, self.reset_infos = list(result[0]), list(result[1])

    def step_wait(self) -> None:
        """Nothing to wait for: :meth:`step_async` stepped its envs already."""

    def _fail(self, error: BaseException) -> None:
        self.close()

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.runner.close()
