"""Runners: the one piece of code that steps a block of env columns into rollout storage.

Every env backend hands the pools a runner with the interface :class:`Runner`; the in-process
pool, each worker process and the main process's own block run the same runner code, so every
layout gives the same numbers. :class:`GymRunner` is the gymnasium backend's runner, with sb3's
``DummyVecEnv`` + ``Monitor`` semantics; ``ppo_dict.vec.godot.GodotRunner`` is the Godot one.
"""

from __future__ import annotations

import functools
import multiprocessing
from typing import Any, Callable, Optional, Protocol, Sequence, Union

import gymnasium as gym
import numpy as np

from ppo_dict.data.episodes import EpisodeBook
from ppo_dict.data.masking import ASK_MASKS, MaskWriter
from ppo_dict.data.storage import OBS_KEY, RolloutStorage, obs_parts
from ppo_dict.envs.monitor import is_wrapped
from ppo_dict.envs.state import StateNotRestorable, env_state, load_env_state
from ppo_dict.vec.guard import ACTION_MASKS, ACTIVE, ACTIVE_SCALE, CONSTRUCTOR, RESET, STEP
from ppo_dict.vec.watchdog import WATCHDOG

Seeds = Sequence[Optional[int]]


def env_seeds(seed: Union[None, int, Sequence[Optional[int]]], n_envs: int) -> list[Optional[int]]:
    """sb3 ``VecEnv.seed``: env i is first reset with ``seed + i`` (all ``None`` for no seed); a
    sequence is each env's seed already (a vec env's pending ``_seeds``)."""
    if isinstance(seed, (list, tuple)):
        if len(seed) != n_envs:
            raise ValueError(f"{len(seed)} seeds for {n_envs} envs")
        return list(seed)
    return [None if seed is None else seed + i for i in range(n_envs)]


def columns_index(columns: Sequence[int]) -> Union[slice, list[int]]:
    """Env columns as a numpy index: a slice where they are consecutive (a view, no gather)."""
    consecutive = len(columns) > 0 and list(columns) == list(range(columns[0], columns[0] + len(columns)))
    return slice(columns[0], columns[0] + len(columns)) if consecutive else list(columns)


class Runner(Protocol):
    """Steps env columns ``block`` (global indices) of a storage.

    ``open`` builds the envs (a failure leaves ``active`` naming the env being built); ``reset``
    writes ``env_obs[0]``; ``step(t, columns)`` (all of the runner's columns by default, else
    those in ``columns``: double-buffered rollouts step half of the envs at a time) applies ``env_actions`` and writes
    ``env_obs[t+1]``, ``env_rewards[t]``, ``terminated[t]``, ``truncated[t]``, the terminal
    observations and the episode statistics (through an :class:`~ppo_dict.data.episodes.EpisodeBook`:
    none but the success flag where the episode ended only for training, beneath which the env's
    own goes on: a lost Atari life). Both return what the caller asked the runner to
    record besides the arrays (``record_infos``: sb3's infos, where the runner has them), else None.
    ``active`` is ``(global env index, call)`` of the env call in progress or last made, so that
    a failure can name its env.
    """

    block: Sequence[int]
    active: tuple[int, str]
    record_infos: bool  # set by the pool while someone reads the infos (sb3's VecEnv API, callbacks)

    def open(self) -> None: ...

    def reset(self, seeds: Seeds, options: Optional[Sequence[dict[str, Any]]] = None) -> Any: ...

    def step(self, t: int, columns: Optional[range] = None) -> Any: ...

    def call(self, kind: str, indices: Sequence[int], name: str, args: tuple, kwargs: dict) -> list[Any]: ...

    def close(self) -> None: ...


class GymRunner:
    """Steps gymnasium envs in columns ``block``, writing into ``storage``; ``open`` builds env
    ``block[j]`` as ``factory(block[j])``.

    sb3 semantics: env i is first reset with ``seeds[i]`` (``seed + i``); an episode end
    (terminated or truncated) stores the last obs in ``env_terminal_obs`` and auto-resets
    (without a seed), so ``env_obs[t+1]`` holds the new episode's first obs; rewards are float32;
    the episode statistics are the :class:`~ppo_dict.data.episodes.EpisodeBook`'s, from each step's
    reward and, at an episode end, the terminal step's info (sb3 reads it before the reset).

    With ``record_infos`` the runner also keeps what sb3's ``DummyVecEnv`` returns besides the
    arrays: ``infos[j]`` of the last step (with ``"TimeLimit.truncated"`` and, at an episode end,
    ``"terminal_observation"``, the raw obs) and ``reset_infos[j]``; ``step`` returns
    ``(infos, reset_infos)`` and ``reset`` returns ``reset_infos``.
    """

    def __init__(
        self,
        factory: Callable[[int], gym.Env],
        block: Sequence[int],
        storage: RolloutStorage,
        record_infos: bool = False,
        episodes_from_infos: bool = False,
    ):
        self.factory, self.block, self.storage = factory, list(block), storage
        self.envs: list[gym.Env] = []
        self.single_obs = not isinstance(storage.observation_space, (gym.spaces.Dict, gym.spaces.Tuple))
        self.record_infos = record_infos
        self.infos: list[dict[str, Any]] = [{} for _ in self.block]
        self.reset_infos: list[dict[str, Any]] = [{} for _ in self.block]
        self.active: tuple[int, str] = (-1, "")
        self.book = EpisodeBook.for_storage(storage, self.block)
        self.episodes_from_infos = episodes_from_infos  # GymBackend's: statistics from info["episode"] only
        # which of the runner's envs a step takes, and their columns as an index: all, or a double-buffered half's
        self._subsets: dict[Optional[range], tuple[list[int], Union[slice, list[int]]]] = {}
        # --action_masks: each env's mask is written beside its observation (sb3-contrib asks for it per step)
        self.masks = None if storage.action_masks is None else MaskWriter(storage.action_masks, storage.action_space)
        # In the main process, each env call is named in the watchdog's beacon, for the guard process (C code
        # holding the GIL): env j's step code, precomputed (a worker's hang is the main process's to report)
        self._beacon_codes = (
            [i * ACTIVE_SCALE + STEP for i in self.block] if multiprocessing.parent_process() is None else None
        )
        # each env's state when it began the rollout in progress (step 0), kept where asked (a run's checkpoints: envs.state)
        self.keep_snapshots = False
        self.snapshots: list[Optional[dict[str, Any]]] = [None] * len(self.block)
        # each env's rollouts begun (its steps 0 since keep_snapshots), and the rollout its snapshot is of: a
        # double-buffered half steps its step 0 after the other's, so a stop may come between them
        self.begun = [0] * len(self.block)
        self.snapshot_of = [-1] * len(self.block)
        self._unrestorable: dict[int, str] = {}  # why an env's state cannot be taken, once found (not looked for again)

    def open(self) -> None:
        """Build the envs, in column order."""
        for i in self.block[len(self.envs) :]:
            self.active = (i, "constructor")
            WATCHDOG.beacon.ints[ACTIVE] = i * ACTIVE_SCALE + CONSTRUCTOR  # not hot: one per env built
            self.envs.append(self.factory(i))
            self.book.watch(len(self.envs) - 1, self.envs[-1])
            self.book.monitored[len(self.envs) - 1] |= self.episodes_from_infos
            if self.masks is not None:
                self.masks.bind(self.envs[-1], i)
        self.active = (-1, "")

    def _write_obs(self, target: dict[str, np.ndarray], row: int, obs: Any) -> None:
        """Store one env's obs as DummyVecEnv's ``_save_obs`` does: numpy's assignment casts to the space's dtype."""
        if self.single_obs:
            target[OBS_KEY][row] = obs
        else:
            parts = obs_parts(self.storage.observation_space, obs)
            for key, arr in target.items():
                arr[row] = parts[key]

    def reset(self, seeds: Seeds, options: Optional[Sequence[dict[str, Any]]] = None) -> Optional[list[dict[str, Any]]]:
        """Reset every env (env i with ``seeds[i]``, global index) and write ``env_obs[0]``.

        ``options[i]`` is passed only when non-empty, as sb3's ``DummyVecEnv.reset`` does.
        """
        obs0 = self.storage.env_obs_at(0)
        beacon, codes, slot = WATCHDOG.beacon.ints, self._beacon_codes, ACTIVE
        for j, (env, i) in enumerate(zip(self.envs, self.block)):
            self.active = (i, "reset")
            if codes:
                beacon[slot] = codes[j] + RESET - STEP
            maybe_options = {"options": options[i]} if options is not None and options[i] else {}
            obs, self.reset_infos[j] = env.reset(seed=seeds[i], **maybe_options)
            self._write_obs(obs0, i, obs)
            self.book.start(j)
            if self.masks is not None:
                self.active = (i, "action_masks")
                if codes:
                    beacon[slot] = codes[j] + ACTION_MASKS - STEP
                self.masks.write(j, i, 0, "after the first reset")
        return self.reset_infos if self.record_infos else None

    def step(self, t: int, columns: Optional[range] = None) -> Optional[tuple[list[dict[str, Any]], list[dict[str, Any]]]]:
        """Apply ``env_actions``; write ``env_obs[t+1]``, ``env_rewards[t]``, ``terminated[t]``, ``truncated[t]``
        (of the envs in ``columns`` only, when given). The actions are copied and the rewards and
        episode ends written once for all the envs, not per env (numpy converts each value as an
        element assignment would)."""
        s, book, block = self.storage, self.book, self.block
        returns, lengths = book.returns, book.lengths
        next_obs = s.env_obs_at(t + 1)
        # a single array's row is set directly (no call into _write_obs per env)
        write_obs = next_obs[OBS_KEY].__setitem__ if self.single_obs else functools.partial(self._write_obs, next_obs)
        beacon, codes, slot = WATCHDOG.beacon.ints, self._beacon_codes, ACTIVE
        stepped, envs = self._subsets.get(columns) or self._subset(columns)
        if t == 0 and self.keep_snapshots:
            self._snapshot(stepped)
        actions = s.env_actions_of(envs)
        rewards, terminations, truncations = [], [], []
        for k, j in enumerate(stepped):
            env, i = self.envs[j], block[j]
            self.active = (i, "step")
            if codes:
                beacon[slot] = codes[j]
            obs, reward, terminated, truncated, info = env.step(actions[k])
            returns[j] += float(reward)
            lengths[j] += 1
            rewards.append(reward)
            terminations.append(terminated)
            truncations.append(truncated)
            if self.record_infos:
                # sb3 DummyVecEnv.step_wait: set on every step, not only at episode ends.
                info["TimeLimit.truncated"] = truncated and not terminated
                self.infos[j] = info
            if terminated or truncated:
                self._write_obs(s.env_terminal_obs, i, obs)
                if self.record_infos:
                    info["terminal_observation"] = obs
                book.end(j, info)
                self.active = (i, "reset")
                if codes:
                    beacon[slot] = codes[j] + RESET - STEP
                obs, self.reset_infos[j] = env.reset()
            write_obs(i, obs)
            if self.masks is not None:
                self.active = (i, "action_masks")
                if codes:
                    beacon[slot] = codes[j] + ACTION_MASKS - STEP
                self.masks.write(j, i, t + 1, f"after rollout step {t}")
        s.env_rewards[t, envs] = rewards
        s.terminated[t, envs] = terminations
        s.truncated[t, envs] = truncations
        return (self.infos, self.reset_infos) if self.record_infos else None

    def _subset(self, columns: Optional[range]) -> tuple[list[int], Union[slice, list[int]]]:
        """``(positions j of the envs in columns, their columns as an index)``; all for None. Kept per ``columns``."""
        stepped = [j for j, i in enumerate(self.block) if columns is None or i in columns]
        self._subsets[columns] = stepped, columns_index([self.block[j] for j in stepped])
        return self._subsets[columns]

    # ------------------------------------------------------------------ the envs' states (a checkpoint's)
    def state_of(self, j: int) -> dict[str, Any]:
        """Env ``j``'s state as plain data (``envs.state``) and its running episode (the book's return and
        length); ``{"env": None, "problem": why}`` for an env whose state cannot be taken."""
        book, env = self.book, self.envs[j]
        problem = self._unrestorable.get(j, "")
        state = None
        if not problem:
            try:
                state = env_state(env)
            except StateNotRestorable as exc:
                problem = self._unrestorable[j] = str(exc)
        return {"env": state, "problem": problem, "return": book.returns[j], "length": book.lengths[j]}

    def _snapshot(self, stepped: Sequence[int]) -> None:
        for j in stepped:  # a snapshot left half-taken (an interrupt) must not stand for this rollout's start
            self.snapshots[j], self.begun[j] = None, self.begun[j] + 1
        for j in stepped:
            self.snapshots[j], self.snapshot_of[j] = self.state_of(j), self.begun[j]

    def env_states(self, indices: Sequence[int], rollout: Optional[int]) -> list[dict[str, Any]]:
        """The states of envs ``indices`` (global): as they began rollout ``rollout`` (the pool's count of rollouts
        begun since :meth:`snapshots_from`), the snapshot of its step 0 where the env took one; as they are where it
        did not (not stepped in that rollout yet), or for None."""
        positions = [self.block.index(i) for i in indices]
        return [
            self.snapshots[j]
            if rollout is not None and self.snapshot_of[j] == rollout and self.snapshots[j] is not None
            else self.state_of(j)
            for j in positions
        ]

    def snapshots_from(self, begun: int) -> None:
        """Keep a snapshot of each env at each rollout's step 0 from now on, the pool having begun ``begun`` rollouts."""
        self.keep_snapshots, self.begun = True, [begun] * len(self.block)

    def load_env_states(self, indices: Sequence[int], states: Sequence[dict[str, Any]], trusted: bool) -> None:
        """Put :meth:`env_states`' states back into envs ``indices``, which were reset first; their running episodes too."""
        for i, state in zip(indices, states):
            j = self.block.index(i)
            self.active = (i, "load_env_state")
            load_env_state(self.envs[j], state["env"], trusted)
            self.book.returns[j], self.book.lengths[j] = float(state["return"]), int(state["length"])
        self.active = (-1, "")

    def call(self, kind: str, indices: Sequence[int], name: str, args: tuple, kwargs: dict) -> list[Any]:
        """sb3 ``DummyVecEnv.get_attr/set_attr/env_method/env_is_wrapped`` (and ``has_attr``) on these envs; the
        envs' states (``env_states``, ``load_env_states``, ``keep_snapshots``: a run's checkpoints); ``reset_infos``
        (each env's last reset info); ``ask_masks`` (``ppo_dict.data.masking.ASK_MASKS``: whether the envs'
        ``action_masks()`` are asked)."""
        if kind == "env_states":
            return self.env_states(indices, *args)
        if kind == "load_env_states":
            self.load_env_states(indices, *args)
            return [None] * len(indices)
        if kind == "keep_snapshots":
            self.snapshots_from(int(args[0]))
            return [None] * len(indices)
        if kind == "reset_infos":  # each env's last reset info (kept with or without record_infos): a vec env's reset_infos
            return [self.reset_infos[self.block.index(i)] for i in indices]
        if kind == ASK_MASKS:  # every env of the runner at once: sb3-contrib's use_masking is the whole learn call's
            if self.masks is not None:
                self.masks.asking = bool(args[0])
            return [None] * len(indices)
        local = dict(zip(self.block, self.envs))
        results = []
        for i in indices:
            self.active = (i, kind)
            env = local[i]
            if kind == "get_attr":
                results.append(env.get_wrapper_attr(name))
            elif kind == "set_attr":
                results.append(setattr(env, name, args[0]))
            elif kind == "env_method":
                results.append(env.get_wrapper_attr(name)(*args, **kwargs))
            elif kind == "has_attr":
                results.append(env.has_wrapper_attr(name))
            elif kind == "env_is_wrapped":
                results.append(is_wrapped(env, args[0]))
            else:
                raise ValueError(f"unknown env call {kind!r}")
        return results

    def close(self) -> None:
        """Close every env, ignoring errors (closing after a failure must not hide it)."""
        for env in self.envs:
            try:
                env.close()
            except Exception:  # noqa: BLE001
                pass
