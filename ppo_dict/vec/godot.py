"""The Godot backend: games whose agents are env columns, stepped into rollout storage.

A Godot process runs ``n_agents`` agents, so a block of columns (a worker's, the main process's,
or the in-process pool's) owns whole games: each game's agents are ``n_agents`` consecutive
columns, agent ``a`` of the game starting at column ``c`` is column ``c + a``. :class:`GodotBackend` is probed once (one
short-lived game) and hands the pools a :class:`GodotRunner` per block, like the gymnasium backend's runner.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Optional, Sequence, Union

import numpy as np
from gymnasium import spaces

from ppo_dict.data.episodes import EpisodeBook
from ppo_dict.data.storage import RolloutStorage
from ppo_dict.envs import GODOT_DEMO, EnvSpec
from ppo_dict.envs.godot.game import GodotGame
from ppo_dict.envs.godot.protocol import AgentsObs
from ppo_dict.vec.runner import Seeds

#: A game's own reply timeout is this share of ``step_timeout``: a hung game then fails with its
#: own output, before the main process declares its worker hung (or, for a game the main process
#: runs itself, before ``ppo_dict.vec.watchdog`` interrupts the call).
GAME_TIMEOUT_SHARE = 0.9


class GodotRunner:
    """Steps the games behind env columns ``block`` and writes into ``storage`` (a :class:`Runner`).

    ``open`` launches ``len(block) / n_agents`` games from ``spec``; game g's launch
    ``--env_seed`` is ``spec.kwargs["seed"]`` (default 0) plus its first column. Semantics are
    the gymnasium runner's (sb3 ``DummyVecEnv`` + ``Monitor``): column i is first reset with
    ``seeds[i]`` (a game gets the seed of its first column; the demo reseeds agent a with that
    + a); an ended episode stores its last obs in ``env_terminal_obs`` and ``env_obs[t+1]`` holds
    the next episode's first; rewards float32; the episode statistics are the
    :class:`~ppo_dict.data.episodes.EpisodeBook`'s (return summed in float64, rounded to 6 decimals).
    Godot's protocol has no reset options and no infos: no success flag (``rollout/success_rate``)
    and no ``info_keywords`` come from a game.

    Attributes:
        games, block, storage; n_agents: agents per game; active: ``(global env index, call)``
            of the call in progress or last made (the game's first column); record_infos: ignored
            (there are no infos to record).
    """

    record_infos = False

    def __init__(self, spec: EnvSpec, block: Sequence[int], storage: RolloutStorage):
        self.spec, self.block, self.storage = spec, list(block), storage
        self.first = self.block[0]
        self._starts: list[int] = []  # game g's first column
        self._spans: list[slice] = []  # game g's storage columns
        self.games: list[GodotGame] = []
        self.n_agents = 0
        self.active: tuple[int, str] = (-1, "")
        self.book = EpisodeBook.for_storage(storage, self.block)

    def open(self) -> None:
        """Launch the games; raises ``ValueError`` if the columns do not split into whole games or the games differ."""
        kwargs = dict(self.spec.kwargs)
        launch_seed = int(kwargs.pop("seed", 0)) + self.first
        self.active = (self.first, "constructor")
        first = GodotGame(seed=launch_seed, **kwargs)
        self.games.append(first)
        self.n_agents = first.n_agents
        if len(self.block) % self.n_agents:
            raise ValueError(
                f"{len(self.block)} envs for {self.spec.name}: each Godot process runs {self.n_agents} agents, so the envs of "
                f"a pool (or of one worker) must be a positive multiple of {self.n_agents} (one process per {self.n_agents} "
                f"envs)"
            )
        self._starts = self.block[:: self.n_agents]
        self._spans = [slice(start, start + self.n_agents) for start in self._starts]
        if any(
            self.block[g * self.n_agents : (g + 1) * self.n_agents] != list(range(a, a + self.n_agents))
            for g, a in enumerate(self._starts)
        ):
            raise ValueError(f"block {self.block} must be runs of {self.n_agents} contiguous columns, one per game")
        for g in range(1, len(self.block) // self.n_agents):
            self.active = (self._starts[g], "constructor")
            game = GodotGame(seed=launch_seed + self._starts[g] - self.first, **kwargs)
            self.games.append(game)
            if (game.n_agents, game.observation_space, game.action_space) != (
                self.n_agents,
                first.observation_space,
                first.action_space,
            ):
                raise ValueError(f"{game.describe()} has other agents or spaces than {first.describe()}")
        self.active = (-1, "")

    def _in(self, g: int, columns: Optional[range]) -> bool:
        """Whether game g steps for ``columns`` (contiguous); a game with only some of its agents there is an error."""
        if columns is None:
            return True
        span = self._spans[g]
        inside = max(0, min(span.stop, columns.stop) - max(span.start, columns.start))
        if 0 < inside < self.n_agents:
            raise ValueError(
                f"columns {columns} split game {g} (columns {span.start}..{span.stop - 1}): a game steps all its "
                f"agents at once"
            )
        return inside == self.n_agents

    @staticmethod
    def _write(target: dict[str, np.ndarray], span: Union[slice, np.ndarray], obs: AgentsObs) -> None:
        for key, arr in target.items():
            arr[span] = obs[key]

    def reset(self, seeds: Seeds, options: Optional[Sequence[dict[str, Any]]] = None) -> None:
        """Reset every game (with the seed of its first column, global index) and write ``env_obs[0]``."""
        obs0 = self.storage.env_obs_at(0)
        for g, game in enumerate(self.games):
            span = self._spans[g]
            self.active = (span.start, "reset")
            self._write(obs0, span, game.reset(seeds[span.start]))
        for j in range(len(self.block)):
            self.book.start(j)

    def step(self, t: int, columns: Optional[range] = None) -> None:
        """Apply ``env_actions``; write ``env_obs[t+1]``, ``env_rewards[t]``, ``terminated[t]``, ``truncated[t]``
        (of the games whose agents are all in ``columns``, when given: a game steps all its agents at once).

        Every game gets its actions before any reply is read, so the Godot processes step in parallel.
        """
        s, book, spans = self.storage, self.book, self._spans
        stepping = [g for g in range(len(self.games)) if self._in(g, columns)]
        for g in stepping:
            self.active = (spans[g].start, "step")
            self.games[g].send_actions(s.env_actions[spans[g]])
        next_obs = s.env_obs_at(t + 1)
        for g in stepping:
            game, span = self.games[g], spans[g]
            self.active = (span.start, "step")
            reply = game.receive_step()
            s.env_rewards[t, span] = reply.rewards
            s.terminated[t, span] = reply.terminated
            s.truncated[t, span] = reply.truncated
            self._write(next_obs, span, reply.obs)
            first = g * self.n_agents
            for j, reward in enumerate(reply.rewards.tolist(), first):  # Monitor: float(reward) summed in float64
                book.returns[j] += reward
                book.lengths[j] += 1
            for a in np.flatnonzero(reply.terminated | reply.truncated):
                for key, arr in s.env_terminal_obs.items():
                    arr[span.start + a] = reply.terminal_obs[key][a]
                book.end(first + a, None)

    def call(self, kind: str, indices: Sequence[int], name: str, args: tuple, kwargs: dict) -> list[Any]:
        raise NotImplementedError(
            f"{kind}({name!r}): a Godot game's agents are not gymnasium envs; they have no attributes or methods"
        )

    def close(self) -> None:
        """Close every game (each kills and reaps its process). Idempotent."""
        for game in self.games:
            game.close()


@dataclasses.dataclass(frozen=True)
class GodotBackend:
    """A Godot game, probed once: agents per process and one agent's spaces.

    ``spec.kwargs`` go to every :class:`GodotGame`; :meth:`for_blocks` sets what depends on the
    pool (the demo's ``n_agents``, the game's own reply timeout).
    """

    spec: EnvSpec
    n_agents: int
    observation_space: spaces.Dict
    action_space: spaces.Space
    makes_gym_envs: bool = False
    info_keywords: tuple[str, ...] = ()  # always empty: the protocol carries no infos (checks.env_problems refuses them)
    block_games: bool = False  # the demo without n_agents: each block is one game of its size (:meth:`for_blocks`)

    @classmethod
    def probe(cls, spec: EnvSpec) -> "GodotBackend":
        """Launch one short-lived game from ``spec`` (about 0.1 s for the demo) and read its facts."""
        with GodotGame(**spec.kwargs) as game:
            return cls(spec, game.n_agents, game.observation_space, game.action_space)

    @property
    def label(self) -> str:
        return self.spec.label

    #: a game's state lives in its own process, which the protocol cannot read or write: its agents restart on a resume
    state_problem = "a Godot game's state lives in the game's own process, which its protocol cannot read or write"

    @property
    def unit(self) -> int:
        """Agents per game: a block of columns holds whole games. The demo in a pool, without ``n_agents``
        in its ``game_args``, runs each block as one game of any size (1)."""
        agents = (self.spec.kwargs.get("game_args") or {}).get("n_agents")
        if agents is None and self.block_games:
            return 1
        return int(self.n_agents if agents is None else agents)

    def agents_per_game(self, envs_per_block: int) -> int:
        """Agents per Godot process for a block of ``envs_per_block`` columns: the demo's ``game_args``
        ``n_agents``, by default ``envs_per_block`` (one game per worker, or one in-process); another game's own count."""
        if self.spec.name == GODOT_DEMO:
            return int((self.spec.kwargs.get("game_args") or {}).get("n_agents", envs_per_block))
        return self.n_agents

    def for_blocks(self, envs_per_block: Optional[int], step_timeout: float, in_workers: bool) -> "GodotBackend":
        """The game's ``step_timeout``, unless set, from the pool's (:data:`GAME_TIMEOUT_SHARE` of it, in
        workers or not); ``envs_per_block`` given: the demo's ``n_agents`` set to it (:meth:`agents_per_game`),
        else each block's runner gives the demo as many agents as the block has columns (blocks may differ)."""
        kwargs = dict(self.spec.kwargs)
        if self.spec.name == GODOT_DEMO and envs_per_block is not None:
            kwargs["game_args"] = {**(kwargs.get("game_args") or {}), "n_agents": self.agents_per_game(envs_per_block)}
        kwargs.setdefault("step_timeout", step_timeout * GAME_TIMEOUT_SHARE)
        return dataclasses.replace(
            self,
            spec=dataclasses.replace(self.spec, kwargs=kwargs),
            block_games=self.spec.name == GODOT_DEMO and envs_per_block is None,
        )

    def layout_problems(
        self, n_envs: int, num_workers: Optional[int], envs_per_worker: Optional[int], step_timeout: float
    ) -> list[str]:
        """Every process (each worker, this process, or the in-process pool) must own whole games; the
        game's own reply timeout must fire before the worker's."""
        problems = []
        agents = self.unit
        for name, count in (("n_envs", n_envs), ("envs_per_worker", envs_per_worker)):
            if count is not None and count % agents:
                problems.append(
                    f"{name}={count}: {self.label} runs {agents} agents (n_agents) per Godot process and each "
                    f"process owns whole games, so {name} must be a multiple of {agents}"
                )
        game_timeout = self.spec.kwargs.get("step_timeout")
        if game_timeout is not None and not game_timeout < step_timeout:
            problems.append(
                f"env_kwargs step_timeout={game_timeout!r} (the game's own reply timeout) must be below step_timeout="
                f"{step_timeout!r} (the worker's, or the main process's for its own games), so that a hung game is reported "
                "with its output before its worker is declared hung"
            )
        return problems

    def make_runner(self, block: Sequence[int], storage: RolloutStorage) -> GodotRunner:
        """The runner of ``block``: the demo in a pool, without ``n_agents``, runs it as one game of ``len(block)`` agents."""
        spec = self.spec
        if self.block_games and "n_agents" not in (spec.kwargs.get("game_args") or {}):
            game_args = {**(spec.kwargs.get("game_args") or {}), "n_agents": len(block)}
            spec = dataclasses.replace(spec, kwargs={**spec.kwargs, "game_args": game_args})
        return GodotRunner(spec, block, storage)
