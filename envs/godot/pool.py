"""Godot games stepped from the training process into rollout storage (before the worker pool runs them).

:class:`GodotInProcessPool` has the interface of ``ppo_dict.env_pool.InProcessEnvPool`` (and of
``ppo_dict.ppo.EnvPool``), so ``PPO(cfg, GodotInProcessPool(spec, n_envs, n_steps))`` trains a
Godot game. Its ``n_envs`` env columns are ``n_games`` Godot processes x ``n_agents`` agents:
column ``g * n_agents + a`` is agent ``a`` of game ``g``. Each step sends every game its actions
before reading any reply, so the games step in parallel while this process waits.
"""
from __future__ import annotations

import os
from typing import Any, Optional, Union

import numpy as np

from envs import EnvSpec
from envs.godot.game import DEMO_PROJECT, GodotGame
from envs.godot.protocol import Obs
from ppo_dict.storage import RolloutStorage

#: The name the demo game goes by (``--env godot_demo`` once ppo_dict's env names know Godot).
DEMO_NAME = "godot_demo"
#: The ``gym_id`` of Godot specs: they are not gymnasium envs, this marks them for readers.
GODOT_ID = "godot"


def godot_spec(name: str = DEMO_NAME, project: Union[str, os.PathLike, None] = DEMO_PROJECT, **game_kwargs: Any) -> EnvSpec:
    """An :class:`envs.EnvSpec` for a Godot game; ``kwargs`` are :class:`GodotGame`'s arguments.

    ``game_kwargs``: env_path, binary, seed (launch ``--env_seed`` of game 0), speedup,
    action_repeat, framerate, game_args, connect_timeout, step_timeout.
    """
    return EnvSpec(name=name, gym_id=GODOT_ID, kwargs={"project": None if project is None else str(project), **game_kwargs})


class GodotInProcessPool:
    """``n_envs`` env columns from ``n_envs / n_agents`` Godot games, written into ``storage``.

    Semantics are ``EnvRunner``'s (sb3 ``DummyVecEnv`` + ``Monitor``): column i is first reset with
    ``seed + i`` (game g gets the reset seed ``seed + g * n_agents``; the demo reseeds agent a with
    that + a); an ended episode stores its last obs in ``terminal_obs`` and ``obs[t+1]`` holds the
    next episode's first; rewards float32; episode return summed in float64, rounded to 6 decimals.

    Args:
        spec: from :func:`godot_spec`; ``spec.kwargs`` go to every :class:`GodotGame`.
        n_envs: env columns, a multiple of the game's agents per process.
        n_steps: steps per rollout (the storage's T).

    Attributes:
        spec, num_envs, observation_space (Dict), action_space, storage: as InProcessEnvPool.
        games: the GodotGame of each process; n_agents: agents per game.
    """

    def __init__(self, spec: EnvSpec, n_envs: int, n_steps: int):
        self.spec, self.num_envs = spec, n_envs
        self.closed = False
        self.games: list[GodotGame] = []
        kwargs = dict(spec.kwargs)
        launch_seed = int(kwargs.pop("seed", 0))
        try:
            self.games.append(GodotGame(seed=launch_seed, **kwargs))
            self.n_agents = self.games[0].n_agents
            if n_envs < 1 or n_envs % self.n_agents:
                raise ValueError(
                    f"n_envs={n_envs} for {spec.name}: each Godot process runs {self.n_agents} agents, so n_envs must be "
                    f"a positive multiple of {self.n_agents} (one process per {self.n_agents} envs)"
                )
            for g in range(1, n_envs // self.n_agents):
                game = GodotGame(seed=launch_seed + g * self.n_agents, **kwargs)
                self.games.append(game)
                if (game.n_agents, game.observation_space, game.action_space) != (
                    self.n_agents, self.games[0].observation_space, self.games[0].action_space
                ):
                    raise ValueError(f"{game.describe()} has other agents or spaces than {self.games[0].describe()}")
        except BaseException:
            self.close()
            raise
        self.observation_space = self.games[0].observation_space
        self.action_space = self.games[0].action_space
        self.storage = RolloutStorage(self.observation_space, self.action_space, n_steps, n_envs)
        self._returns = np.zeros(n_envs, dtype=np.float64)
        self._lengths = np.zeros(n_envs, dtype=np.int64)

    def _columns(self, g: int) -> slice:
        return slice(g * self.n_agents, (g + 1) * self.n_agents)

    @staticmethod
    def _write(target: dict[str, np.ndarray], cols: Union[slice, np.ndarray], obs: Obs, rows: Union[slice, np.ndarray] = slice(None)) -> None:
        for key, arr in target.items():
            arr[cols] = obs[key][rows]

    def reset(self, seed: Optional[int]) -> None:
        """Reset every game and write ``obs[0]``; column i's episode starts from ``seed + i``."""
        obs0 = self.storage.obs_at(0)
        for g, game in enumerate(self.games):
            self._write(obs0, self._columns(g), game.reset(None if seed is None else seed + g * self.n_agents))
        self._returns[:], self._lengths[:] = 0.0, 0

    def step(self, t: int) -> None:
        """Apply ``storage.env_actions``; write ``obs[t+1]``, ``rewards[t]``, ``terminated[t]``, ``truncated[t]``."""
        s = self.storage
        for g, game in enumerate(self.games):
            game.send_actions(s.env_actions[self._columns(g)])
        next_obs = s.obs_at(t + 1)
        for g, game in enumerate(self.games):
            reply = game.receive_step()
            cols = self._columns(g)
            s.rewards[t, cols] = reply.rewards
            s.terminated[t, cols] = reply.terminated
            s.truncated[t, cols] = reply.truncated
            self._write(next_obs, cols, reply.obs)
            # Monitor: float(reward) summed in python floats (float64), rounded when reported.
            self._returns[cols] += reply.rewards.astype(np.float64)
            self._lengths[cols] += 1
            ended = np.flatnonzero(reply.terminated | reply.truncated)
            if ended.size:
                env_ids = cols.start + ended
                self._write(s.terminal_obs, env_ids, reply.terminal_obs, ended)
                for i in env_ids:
                    # python's round, as Monitor (np.round can differ in the last bit)
                    s.episode_return[i] = round(float(self._returns[i]), 6)
                    s.episode_length[i] = self._lengths[i]
                self._returns[env_ids], self._lengths[env_ids] = 0.0, 0

    def close(self) -> None:
        """Close every game (each kills and reaps its process). Idempotent."""
        if self.closed:
            return
        self.closed = True
        for game in self.games:
            game.close()
