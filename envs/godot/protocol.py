"""Godot RL Agents' wire protocol (godot_rl 0.8.2, protocol version 0.7), in ppo_dict's own code.

Read from godot_rl 0.8.2 ``core/godot_env.py`` (the trainer) and the plugin's ``sync.gd`` (the game);
games made with the Godot RL Agents plugin speak it, and so does ``envs/godot/demo/sync.gd``.

Transport: the trainer listens on a TCP port on 127.0.0.1 and the game connects to it (launch flag
``--port=<p>``). Every message is a 4-byte little-endian unsigned length, then that many bytes of
UTF-8 JSON holding one object with a ``"type"``. (Godot's ``StreamPeer.put_utf8_string`` /
``get_utf8_string`` frame exactly so.)

Trainer to game::

    {"type": "handshake", "major_version": "0", "minor_version": "7"}   (no reply)
    {"type": "env_info"}
    {"type": "reset", "seed": 7}         ("seed" is ppo_dict's; agent i reseeds with seed + i)
    {"type": "action", "action": [{"move": [0.1, -1.0]}, ...]}          (one dict per agent)
    {"type": "call", "method": "name"}
    {"type": "close"}                    (no reply; the game quits)

Game to trainer::

    {"type": "env_info", "n_agents": 4,
     "observation_space": [{"obs": {"space": "box", "size": [4]}}, ...],   (a list per agent,
     "action_space": [{"move": {"action_type": "continuous", "size": 2}}, ...],  or one dict)
     "agent_policy_names": ["shared_policy", ...]}
    {"type": "reset", "obs": [{"obs": [0.1, ...]}, ...]}
    {"type": "step", "obs": [...], "reward": [0.5, ...], "done": [false, ...],
     "info": [{}, ...],                  (optional)
     "truncated": [false, ...],          (optional, ppo_dict's: the episode hit a time limit)
     "terminal_obs": [null, {...}, ...]} (optional, ppo_dict's: last obs of an ended episode)
    {"type": "call", "returns": [...]}

Spaces. Observation keys: ``{"space": "box", "size": [...]}`` is float32 in [-1, 1] (the bound
godot_rl declares; games may exceed it), except keys containing ``"2d"``: uint8 images in
[0, 255], sent as hex strings of the row-major bytes. ``{"space": "discrete", "size": n}`` is an
integer. An agent's observation is always a gymnasium ``Dict`` of its keys.

Actions. Each key is ``{"action_type": "continuous", "size": k}`` (k floats in [-1, 1]) or
``{"action_type": "discrete", "size": n}``. ppo_dict's policy takes one Box or one Discrete, so the
keys, in the order the game lists them, map to one space (see :class:`ActionMapping`):

* all continuous: one ``Box(-1, 1, (sum of sizes,))``, split in key order;
* all discrete: one ``Discrete(product of sizes)``, the joint action; action ``a`` is
  ``np.unravel_index(a, sizes)`` (the first key varies slowest). A ``MultiDiscrete`` would
  factorise better, but ppo_dict's storage and policy do not take one yet;
* mixed: one ``Box``; continuous keys as above, each discrete key must have size 2 and is one
  dimension, sent as 1 when the value is > 0 (godot_rl's ``ActionSpaceProcessor`` with
  ``convert_action_space=True`` does the same).

Episode ends. Godot's ``done`` is one flag. With the optional ``"truncated"`` list (or
``info[i]["TimeLimit.truncated"]``, which a plugin game can set in its AIController's
``get_info()``), an ended episode is truncated where that flag is true and terminated otherwise;
without either, every ``done`` is terminated. That is what sb3 sees through godot_rl's own
wrapper (no ``TimeLimit.truncated`` in the infos), so time limits are not bootstrapped there.
"""

from __future__ import annotations

import json
import math
import socket
import struct
from dataclasses import dataclass
from typing import Any, Optional, Sequence

import numpy as np
from gymnasium import spaces

from ..errors import GodotProtocolError

MAJOR_VERSION = "0"
MINOR_VERSION = "7"
#: The largest joint Discrete action made from several discrete keys; beyond it, a softmax over
#: every combination stops being a sensible policy head.
MAX_JOINT_ACTIONS = 4096
#: Keys whose name contains this are uint8 images sent as hex strings (godot_env.py ``_process_obs``).
IMAGE_KEY_MARK = "2d"

_HEADER = struct.Struct("<I")
#: One observation array per key, ``{key: [n_agents, ...]}``.
AgentsObs = dict[str, np.ndarray]


class ConnectionClosed(EOFError):
    """The peer closed the connection (EOF) in the middle of or before a message."""


# ---------------------------------------------------------------------------------------- framing
def encode_message(message: dict[str, Any]) -> bytes:
    """One framed message: 4-byte little-endian length, then the compact UTF-8 JSON."""
    body = json.dumps(message, separators=(",", ":")).encode("utf-8")
    return _HEADER.pack(len(body)) + body


def send_message(sock: socket.socket, message: dict[str, Any]) -> None:
    sock.sendall(encode_message(message))


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        k = sock.recv_into(view[got:], n - got)
        if k == 0:
            raise ConnectionClosed(f"connection closed after {got} of {n} bytes")
        got += k
    return bytes(buf)


def recv_message(sock: socket.socket) -> dict[str, Any]:
    """Read one framed message; raises :class:`ConnectionClosed` on EOF, ``socket.timeout`` as set."""
    (length,) = _HEADER.unpack(_recv_exact(sock, _HEADER.size))
    body = _recv_exact(sock, length)
    try:
        message = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise GodotProtocolError(f"message of {length} bytes is not UTF-8 JSON ({e}): {body[:200]!r}") from None
    if not isinstance(message, dict) or "type" not in message:
        raise GodotProtocolError(f"message is not a JSON object with a 'type': {body[:200]!r}")
    return message


# ---------------------------------------------------------------------------------------- messages
def handshake_message() -> dict[str, Any]:
    return {"type": "handshake", "major_version": MAJOR_VERSION, "minor_version": MINOR_VERSION}


def env_info_request() -> dict[str, Any]:
    return {"type": "env_info"}


def reset_message(seed: Optional[int] = None) -> dict[str, Any]:
    """A reset; with ``seed``, games that know ppo_dict's field reseed agent i with ``seed + i``."""
    return {"type": "reset"} if seed is None else {"type": "reset", "seed": int(seed)}


def action_message(agent_actions: list[dict[str, Any]]) -> dict[str, Any]:
    return {"type": "action", "action": agent_actions}


def close_message() -> dict[str, Any]:
    return {"type": "close"}


def expect_type(message: dict[str, Any], expected: str, context: str) -> dict[str, Any]:
    if message.get("type") != expected:
        raise GodotProtocolError(f"{context}: expected a {expected!r} message, got {json.dumps(message)[:300]}")
    return message


# ---------------------------------------------------------------------------------------- spaces
def _size(value: Any, where: str) -> tuple[int, ...]:
    sizes = value if isinstance(value, list) else [value]
    if not sizes or not all(isinstance(s, (int, float)) and s == int(s) and s >= 1 for s in sizes):
        raise GodotProtocolError(f"{where}: size must be a positive integer or a list of them, got {value!r}")
    return tuple(int(s) for s in sizes)


def observation_space_from_godot(space: dict[str, Any]) -> spaces.Dict:
    """One agent's observation space, from its env_info dict (``{key: {"space": ..., "size": ...}}``)."""
    if not isinstance(space, dict) or not space:
        raise GodotProtocolError(f"observation_space must be a non-empty dict of keys, got {space!r}")
    subspaces: dict[str, spaces.Space] = {}
    for key, entry in space.items():
        where = f"observation key {key!r}"
        kind = entry.get("space") if isinstance(entry, dict) else None
        if kind == "box":
            shape = _size(entry.get("size"), where)
            if IMAGE_KEY_MARK in key:
                subspaces[key] = spaces.Box(0, 255, shape, np.uint8)
            else:
                subspaces[key] = spaces.Box(-1.0, 1.0, shape, np.float32)
        elif kind == "discrete":
            (n,) = _size(entry.get("size"), where)
            subspaces[key] = spaces.Discrete(n)
        else:
            raise GodotProtocolError(f"{where}: space {entry!r} is not supported: use 'box' or 'discrete'")
    return spaces.Dict(subspaces)


@dataclass(frozen=True)
class ActionMapping:
    """How one gymnasium action of ``space`` becomes the ``{key: value}`` dict a Godot agent takes.

    Attributes:
        keys, kinds, sizes: the game's action keys in its order, ``"continuous"``/``"discrete"``, sizes.
        space: the single space the policy acts in (module docstring: Box, Discrete or joint Discrete).
    """

    keys: tuple[str, ...]
    kinds: tuple[str, ...]
    sizes: tuple[int, ...]
    space: spaces.Space

    @classmethod
    def from_godot(cls, action_space: dict[str, Any]) -> "ActionMapping":
        if not isinstance(action_space, dict) or not action_space:
            raise GodotProtocolError(f"action_space must be a non-empty dict of keys, got {action_space!r}")
        keys, kinds, sizes = [], [], []
        for key, entry in action_space.items():
            kind = entry.get("action_type") if isinstance(entry, dict) else None
            if kind not in ("continuous", "discrete"):
                raise GodotProtocolError(
                    f"action key {key!r}: action_type {entry!r} is not supported: use 'continuous' or 'discrete'"
                )
            (size,) = _size(entry.get("size"), f"action key {key!r}")
            keys.append(key), kinds.append(kind), sizes.append(size)
        if all(k == "continuous" for k in kinds):
            space: spaces.Space = spaces.Box(-1.0, 1.0, (sum(sizes),), np.float32)
        elif all(k == "discrete" for k in kinds):
            n = math.prod(sizes)
            if n > MAX_JOINT_ACTIONS:
                raise GodotProtocolError(
                    f"discrete action keys {dict(zip(keys, sizes))} make {n} joint actions, more than "
                    f"{MAX_JOINT_ACTIONS}: ppo_dict maps several discrete keys to one Discrete of every combination"
                )
            space = spaces.Discrete(n)
        else:
            wide = {k: s for k, kind, s in zip(keys, kinds, sizes) if kind == "discrete" and s != 2}
            if wide:
                raise GodotProtocolError(
                    f"discrete action keys {wide} mixed with continuous ones: only size-2 discrete keys can be "
                    "mixed (each one Box dimension, 1 where > 0); make them continuous or split the action"
                )
            dims = sum(s if kind == "continuous" else 1 for kind, s in zip(kinds, sizes))
            space = spaces.Box(-1.0, 1.0, (dims,), np.float32)
        return cls(tuple(keys), tuple(kinds), tuple(sizes), space)

    def to_godot(self, actions: np.ndarray) -> list[dict[str, Any]]:
        """``actions``: [n_agents, dims] float (Box) or int[n_agents] (Discrete) -> one dict per agent."""
        if isinstance(self.space, spaces.Discrete):
            flat = np.asarray(actions).reshape(-1).astype(np.int64)
            if flat.size and (flat.min() < 0 or flat.max() >= self.space.n):
                raise GodotProtocolError(f"discrete actions must be in [0, {self.space.n}), got {flat.tolist()}")
            parts = np.unravel_index(flat, self.sizes)
            return [{k: int(p[i]) for k, p in zip(self.keys, parts)} for i in range(flat.size)]
        rows = np.asarray(actions, dtype=np.float64).reshape(-1, self.space.shape[0])
        result = []
        for row in rows:
            agent, start = {}, 0
            for key, kind, size in zip(self.keys, self.kinds, self.sizes):
                if kind == "continuous":
                    agent[key] = row[start : start + size].tolist()
                    start += size
                else:
                    agent[key] = int(row[start] > 0.0)
                    start += 1
            result.append(agent)
        return result


@dataclass(frozen=True)
class EnvInfo:
    """A game's env_info reply: its agents share one observation space and one action mapping."""

    n_agents: int
    observation_space: spaces.Dict
    actions: ActionMapping
    policy_names: tuple[str, ...]

    @classmethod
    def from_message(cls, message: dict[str, Any]) -> "EnvInfo":
        expect_type(message, "env_info", "after the env_info request")
        n = message.get("n_agents")
        if not isinstance(n, (int, float)) or n != int(n) or n < 1:
            raise GodotProtocolError(f"env_info: n_agents must be a positive integer, got {n!r}")
        n = int(n)
        obs_spaces, act_spaces = message.get("observation_space"), message.get("action_space")
        # Older plugins send one dict for every agent; newer ones a list with one per agent.
        obs_spaces = [obs_spaces] * n if isinstance(obs_spaces, dict) else obs_spaces
        act_spaces = [act_spaces] * n if isinstance(act_spaces, dict) else act_spaces
        for what, given in (("observation_space", obs_spaces), ("action_space", act_spaces)):
            if not isinstance(given, list) or len(given) != n:
                raise GodotProtocolError(f"env_info: {what} must be a dict or a list of {n} dicts, got {str(given)[:300]}")
        for i in range(1, n):
            if obs_spaces[i] != obs_spaces[0] or act_spaces[i] != act_spaces[0]:
                raise GodotProtocolError(
                    f"env_info: agent {i}'s spaces differ from agent 0's ({obs_spaces[i]} {act_spaces[i]} vs "
                    f"{obs_spaces[0]} {act_spaces[0]}): ppo_dict trains one policy, so every agent needs the same spaces"
                )
        names = tuple(message.get("agent_policy_names") or ["shared_policy"] * n)
        return cls(n, observation_space_from_godot(obs_spaces[0]), ActionMapping.from_godot(act_spaces[0]), names)


# ---------------------------------------------------------------------------------------- observations
def decode_obs(agent_obs: Sequence[Any], space: spaces.Dict, context: str) -> AgentsObs:
    """Per-agent observation dicts -> ``{key: [n_agents, *shape]}`` arrays in the space's dtypes.

    Box keys: float32 [n, *shape]; "2d" keys: uint8 [n, *shape] from hex; Discrete keys: int64
    [n, 1] (ppo_dict's storage layout for a Discrete observation).
    """
    n = len(agent_obs)
    out: AgentsObs = {}
    for key, sub in space.spaces.items():
        if isinstance(sub, spaces.Discrete):
            arr = np.empty((n, 1), dtype=sub.dtype)
        else:
            arr = np.empty((n, *sub.shape), dtype=sub.dtype)
        for i, obs in enumerate(agent_obs):
            if not isinstance(obs, dict) or key not in obs:
                raise GodotProtocolError(f"{context}: agent {i}'s observation has no key {key!r}: {str(obs)[:200]}")
            value = obs[key]
            try:
                if sub.dtype == np.uint8 and isinstance(value, str):
                    arr[i] = np.frombuffer(bytes.fromhex(value), dtype=np.uint8).reshape(sub.shape)
                else:
                    arr[i] = np.asarray(value, dtype=sub.dtype).reshape(arr.shape[1:])
            except (ValueError, TypeError) as e:
                raise GodotProtocolError(
                    f"{context}: agent {i}'s observation {key!r} does not fit {sub} ({e}): {str(value)[:200]}"
                ) from None
        out[key] = arr
    return out


@dataclass
class StepReply:
    """One step reply for ``n`` agents.

    Attributes:
        obs: {key: [n, ...]}, after the step (the next episode's first obs where the game auto-reset).
        rewards: float32[n]; terminated, truncated: bool[n] (module docstring: episode ends).
        terminal_obs: {key: [n, ...]}, valid where an episode ended; ``None`` if the game sent none
            (plugin games: then ``obs`` itself is the episode's last observation).
    """

    obs: AgentsObs
    rewards: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    terminal_obs: Optional[AgentsObs]


def _flags(values: Any, n: int, what: str, context: str) -> np.ndarray:
    if not isinstance(values, list) or len(values) != n:
        raise GodotProtocolError(f"{context}: {what!r} must be a list of {n} values, got {str(values)[:200]}")
    return np.array([bool(v) for v in values], dtype=bool)


def parse_step_reply(message: dict[str, Any], n_agents: int, space: spaces.Dict, context: str) -> StepReply:
    expect_type(message, "step", context)
    obs = message.get("obs")
    if not isinstance(obs, list) or len(obs) != n_agents:
        raise GodotProtocolError(f"{context}: 'obs' must be a list of {n_agents} observations, got {str(obs)[:200]}")
    rewards = message.get("reward")
    if not isinstance(rewards, list) or len(rewards) != n_agents:
        raise GodotProtocolError(f"{context}: 'reward' must be a list of {n_agents} numbers, got {str(rewards)[:200]}")
    try:
        reward_array = np.asarray(rewards, dtype=np.float32)
    except (ValueError, TypeError):
        raise GodotProtocolError(f"{context}: 'reward' must be numbers, got {str(rewards)[:200]}") from None
    done = _flags(message.get("done"), n_agents, "done", context)
    if "truncated" in message:
        time_limit = _flags(message["truncated"], n_agents, "truncated", context)
    else:
        infos = message.get("info") or [{}] * n_agents
        time_limit = np.array(
            [isinstance(info, dict) and bool(info.get("TimeLimit.truncated", False)) for info in infos], dtype=bool
        )
    ended = done | time_limit
    truncated = time_limit & ended
    terminated = ended & ~truncated
    terminal_obs = None
    if message.get("terminal_obs") is not None:
        terminal = message["terminal_obs"]
        if not isinstance(terminal, list) or len(terminal) != n_agents:
            raise GodotProtocolError(
                f"{context}: 'terminal_obs' must be a list of {n_agents} entries, got {str(terminal)[:200]}"
            )
        missing = [int(i) for i in np.flatnonzero(ended) if terminal[i] is None]
        if missing:
            raise GodotProtocolError(f"{context}: agents {missing} ended an episode but their 'terminal_obs' is null")
        # Agents still running have null; give them their current obs so that the batch decodes.
        terminal_obs = decode_obs(
            [t if t is not None else o for t, o in zip(terminal, obs)], space, context + " (terminal_obs)"
        )
    return StepReply(
        obs=decode_obs(obs, space, context),
        rewards=reward_array,
        terminated=terminated,
        truncated=truncated,
        terminal_obs=terminal_obs,
    )
