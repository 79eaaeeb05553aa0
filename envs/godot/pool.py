"""Godot games stepped into rollout storage: a runner for a block of columns, and an in-process pool.

:class:`GodotRunner` is the Godot counterpart of ``ppo_dict.env_pool.EnvRunner``: it steps the games
behind env columns ``env_ids`` (contiguous, whole games) and writes their results into storage; a
worker process can run one over :func:`launch_games` exactly as it runs an ``EnvRunner``.

:class:`GodotInProcessPool` has the interface of ``ppo_dict.env_pool.InProcessEnvPool`` (and of
``ppo_dict.ppo.EnvPool``), so ``PPO(cfg, GodotInProcessPool(spec, n_envs, n_steps))`` trains a
Godot game. Its ``n_envs`` env columns are ``n_games`` Godot processes x ``n_agents`` agents:
column ``g * n_agents + a`` is agent ``a`` of game ``g``.
"""
from __future__ import annotations

import dataclasses
import os
from typing import TYPE_CHECKING, Any, Optional, Sequence, Union

import numpy as np
from gymnasium import spaces

from envs import GODOT_DEMO, GODOT_PREFIX, EnvSpec
from envs.godot.game import DEMO_PROJECT, GodotGame
from envs.godot.protocol import Obs
from ppo_dict.env_pool import InProcessEnvPool
from ppo_dict.storage import RolloutStorage

if TYPE_CHECKING:
    from ppo_dict.config import Config

#: The name the demo game goes by (``--env godot_demo``).
DEMO_NAME = GODOT_DEMO
#: The ``gym_id`` of Godot specs: they are not gymnasium envs, this marks them (``envs.is_godot``).
GODOT_ID = GODOT_PREFIX
#: In the worker pool a game's own reply timeout is this share of the worker's ``step_timeout``:
#: a hung game then fails in its worker with its own output, before main declares the worker hung.
GAME_TIMEOUT_SHARE = 0.9


def godot_spec(name: str = DEMO_NAME, project: Union[str, os.PathLike, None] = DEMO_PROJECT, **game_kwargs: Any) -> EnvSpec:
    """An :class:`envs.EnvSpec` for a Godot game; ``kwargs`` are :class:`GodotGame`'s arguments.

    ``game_kwargs``: env_path, binary, seed (launch ``--env_seed`` of game 0), speedup,
    action_repeat, framerate, game_args, connect_timeout, step_timeout.
    """
    return EnvSpec(name=name, gym_id=GODOT_ID, kwargs={"project": None if project is None else str(project), **game_kwargs})


@dataclasses.dataclass(frozen=True)
class GameFacts:
    """What the trainer must know of a game before any worker starts: agents per process and one agent's spaces."""

    n_agents: int
    observation_space: spaces.Dict
    action_space: spaces.Space


def probe_game(spec: EnvSpec) -> GameFacts:
    """Launch one short-lived game from ``spec`` (about 0.1 s for the demo) and read its facts."""
    with GodotGame(**spec.kwargs) as game:
        return GameFacts(game.n_agents, game.observation_space, game.action_space)


def describe(spec: EnvSpec) -> str:
    """The game's name for messages: ``godot_demo``, or ``godot (<exported game or project>)``."""
    if spec.name == DEMO_NAME:
        return spec.name
    return f"{spec.name} ({spec.kwargs.get('env_path') or spec.kwargs.get('project')})"


def agents_per_game(spec: EnvSpec, envs_per_block: int) -> int:
    """Agents per Godot process: the demo's ``game_args`` ``n_agents``, by default ``envs_per_block``
    (one game per worker, or one in-process); another game is asked (:func:`probe_game`)."""
    if spec.name == DEMO_NAME:
        return int((spec.kwargs.get("game_args") or {}).get("n_agents", envs_per_block))
    return probe_game(spec).n_agents


def spec_for_pool(spec: EnvSpec, envs_per_block: int, step_timeout: float, in_workers: bool) -> EnvSpec:
    """``spec`` as one pool block launches it: the demo with ``n_agents`` set (:func:`agents_per_game`),
    and the game's ``step_timeout``, unless set, from the pool's (:data:`GAME_TIMEOUT_SHARE` in workers)."""
    kwargs = dict(spec.kwargs)
    if spec.name == DEMO_NAME:
        kwargs["game_args"] = {**(kwargs.get("game_args") or {}), "n_agents": agents_per_game(spec, envs_per_block)}
    kwargs.setdefault("step_timeout", step_timeout * GAME_TIMEOUT_SHARE if in_workers else step_timeout)
    return dataclasses.replace(spec, kwargs=kwargs)


def config_problems(spec: EnvSpec, cfg: Config) -> list[str]:
    """What a config asks of a Godot game that cannot work (``config.validate`` lists them with the rest).

    Each worker (or the in-process pool) must own whole games; the game's own reply timeout must
    fire before the worker's; evaluation, video and the sb3 export build gymnasium envs, which a
    Godot game is not.
    """
    n_envs, num_workers, envs_per_worker = cfg.worker_layout
    if num_workers > 0 and n_envs != num_workers * envs_per_worker:
        return []  # validate reports the layout itself
    problems = []
    block = envs_per_worker if num_workers > 0 else n_envs
    agents = agents_per_game(spec, block)
    if block % agents:
        name = "envs_per_worker" if num_workers > 0 else "n_envs"
        owner = "each worker owns" if num_workers > 0 else "the in-process pool (num_workers 0) runs"
        problems.append(
            f"{name}={block}: {describe(spec)} runs {agents} agents (n_agents) per Godot process and {owner} whole "
            f"processes, so {name} must be a multiple of {agents}"
        )
    game_timeout = spec.kwargs.get("step_timeout")
    if num_workers > 0 and game_timeout is not None and not game_timeout < cfg.step_timeout:
        problems.append(
            f"env_kwargs step_timeout={game_timeout!r} (the game's own reply timeout) must be below step_timeout="
            f"{cfg.step_timeout!r} (the worker's), so that a hung game is reported with its output before its worker is declared hung"
        )
    unsupported = {"eval_freq": cfg.eval_freq > 0, "video": cfg.video, "export_sb3": cfg.export_sb3 is not None}
    for flag in (k for k, asked in unsupported.items() if asked):
        problems.append(f"{flag}: not supported for Godot games yet (it builds gymnasium envs); envs.godot.train_demo evaluates the demo")
    return problems


def launch_games(spec: EnvSpec, env_ids: Sequence[int]) -> list[GodotGame]:
    """Start ``len(env_ids) / n_agents`` games from ``spec`` for columns ``env_ids`` (a pool's or a worker's block).

    Game g's launch ``--env_seed`` is ``spec.kwargs["seed"]`` (default 0) plus its first column.
    Raises ``ValueError`` if the columns do not split into whole games or the games differ.
    """
    kwargs = dict(spec.kwargs)
    launch_seed = int(kwargs.pop("seed", 0))
    games: list[GodotGame] = []
    try:
        games.append(GodotGame(seed=launch_seed + env_ids[0], **kwargs))
        n_agents = games[0].n_agents
        if len(env_ids) % n_agents:
            raise ValueError(
                f"{len(env_ids)} envs for {spec.name}: each Godot process runs {n_agents} agents, so the envs of a "
                f"pool (or of one worker) must be a positive multiple of {n_agents} (one process per {n_agents} envs)"
            )
        for g in range(1, len(env_ids) // n_agents):
            game = GodotGame(seed=launch_seed + env_ids[0] + g * n_agents, **kwargs)
            games.append(game)
            if (game.n_agents, game.observation_space, game.action_space) != (n_agents, games[0].observation_space, games[0].action_space):
                raise ValueError(f"{game.describe()} has other agents or spaces than {games[0].describe()}")
        return games
    except BaseException:
        for game in games:
            game.close()
        raise


class GodotRunner:
    """Steps the games behind env columns ``env_ids`` and writes into ``storage`` (``EnvRunner``'s interface).

    Column ``env_ids[0] + g * n_agents + a`` is agent ``a`` of ``games[g]``. Semantics are
    ``EnvRunner``'s (sb3 ``DummyVecEnv`` + ``Monitor``): column i is first reset with ``seeds[i]``
    (a game gets the seed of its first column; the demo reseeds agent a with that + a); an ended
    episode stores its last obs in ``terminal_obs`` and ``obs[t+1]`` holds the next episode's
    first; rewards float32; episode return summed in float64, rounded to 6 decimals.

    Attributes:
        games, env_ids, storage; n_agents: agents per game; active: ``(global env index, call)``
            of the call in progress or last made, as ``EnvRunner.active`` (the game's first column).
    """

    def __init__(self, games: Sequence[GodotGame], env_ids: Sequence[int], storage: RolloutStorage):
        self.games, self.env_ids, self.storage = list(games), list(env_ids), storage
        self.n_agents = self.games[0].n_agents
        if list(env_ids) != list(range(env_ids[0], env_ids[0] + len(self.games) * self.n_agents)):
            raise ValueError(f"env_ids {list(env_ids)} must be {len(self.games)} games x {self.n_agents} agents of contiguous columns")
        self.first = env_ids[0]
        self.active: tuple[int, str] = (-1, "")
        self._returns = np.zeros(len(self.env_ids), dtype=np.float64)
        self._lengths = np.zeros(len(self.env_ids), dtype=np.int64)

    def _columns(self, g: int) -> slice:
        """Global storage columns of game g."""
        return slice(self.first + g * self.n_agents, self.first + (g + 1) * self.n_agents)

    @staticmethod
    def _write(target: dict[str, np.ndarray], cols: Union[slice, np.ndarray], obs: Obs, rows: Union[slice, np.ndarray] = slice(None)) -> None:
        for key, arr in target.items():
            arr[cols] = obs[key][rows]

    def reset(self, seeds: Sequence[Optional[int]], options: Optional[Sequence[dict[str, Any]]] = None) -> None:
        """Reset every game (with the seed of its first column, global index) and write ``obs[0]``.

        ``options`` are not supported (the protocol's reset has none) and must be empty.
        """
        if options is not None and any(options[i] for i in self.env_ids):
            raise ValueError("Godot games take no reset options")
        obs0 = self.storage.obs_at(0)
        for g, game in enumerate(self.games):
            cols = self._columns(g)
            self.active = (cols.start, "reset")
            self._write(obs0, cols, game.reset(seeds[cols.start]))
        self._returns[:], self._lengths[:] = 0.0, 0

    def step(self, t: int) -> None:
        """Apply ``storage.env_actions``; write ``obs[t+1]``, ``rewards[t]``, ``terminated[t]``, ``truncated[t]``.

        Every game gets its actions before any reply is read, so the Godot processes step in parallel.
        """
        s = self.storage
        for g, game in enumerate(self.games):
            self.active = (self._columns(g).start, "step")
            game.send_actions(s.env_actions[self._columns(g)])
        next_obs = s.obs_at(t + 1)
        for g, game in enumerate(self.games):
            cols = self._columns(g)
            self.active = (cols.start, "step")
            reply = game.receive_step()
            s.rewards[t, cols] = reply.rewards
            s.terminated[t, cols] = reply.terminated
            s.truncated[t, cols] = reply.truncated
            self._write(next_obs, cols, reply.obs)
            local = slice(cols.start - self.first, cols.stop - self.first)
            # Monitor: float(reward) summed in python floats (float64), rounded when reported.
            self._returns[local] += reply.rewards.astype(np.float64)
            self._lengths[local] += 1
            for a in np.flatnonzero(reply.terminated | reply.truncated):
                i, j = cols.start + a, local.start + a
                for key, arr in s.terminal_obs.items():
                    arr[i] = reply.terminal_obs[key][a]
                s.episode_return[i] = round(float(self._returns[j]), 6)  # python's round, as Monitor
                s.episode_length[i] = self._lengths[j]
                self._returns[j], self._lengths[j] = 0.0, 0

    def close(self) -> None:
        """Close every game (each kills and reaps its process). Idempotent."""
        for game in self.games:
            game.close()


class GodotInProcessPool(InProcessEnvPool):
    """``n_envs`` env columns from ``n_envs / n_agents`` Godot games stepped in this process.

    ``InProcessEnvPool`` with a :class:`GodotRunner` over every column in place of its
    ``EnvRunner`` (the runner's docstring gives the semantics); reset, step and close are inherited.

    Args:
        spec: from :func:`godot_spec`; ``spec.kwargs`` go to every :class:`GodotGame`.
        n_envs: env columns, a multiple of the game's agents per process.
        n_steps: steps per rollout (the storage's T).

    Attributes:
        spec, num_envs, observation_space (Dict), action_space, storage: as InProcessEnvPool.
        games: the GodotGame of each process; n_agents: agents per game.
    """

    def __init__(self, spec: EnvSpec, n_envs: int, n_steps: int):
        if n_envs < 1:
            raise ValueError(f"n_envs={n_envs} for {spec.name}: must be at least 1")
        self.spec, self.num_envs = spec, n_envs
        self.closed = False
        self.games = launch_games(spec, range(n_envs))
        self.n_agents = self.games[0].n_agents
        self.observation_space = self.games[0].observation_space
        self.action_space = self.games[0].action_space
        self.storage = RolloutStorage(self.observation_space, self.action_space, n_steps, n_envs)
        self._runner = GodotRunner(self.games, range(n_envs), self.storage)
