"""The errors a Godot game raises, each a :class:`ppo_dict.errors.PPODictError`.

Every message names the game (binary, project, port) and says what to do.
"""
from __future__ import annotations

from ppo_dict.errors import PPODictError


class GodotError(PPODictError):
    """Base class: something went wrong with a Godot game process or its connection."""


class GodotNotFoundError(GodotError, FileNotFoundError):
    """The Godot binary, the exported game or the project directory does not exist."""


class GodotCrashedError(GodotError, RuntimeError):
    """The Godot process exited (or closed the connection) while the trainer needed it."""


class GodotTimeoutError(GodotError, TimeoutError):
    """The game did not connect, or did not answer a message, in time."""


class GodotProtocolError(GodotError, ValueError):
    """The game sent a message the protocol does not allow (bad type, space, size or value)."""
