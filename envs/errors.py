"""The errors of making and running environments, and the root of every ppo_dict error.

``envs`` is the bottom layer (it never imports the trainer), so the root class lives here and
``ppo_dict.core.errors`` re-exports it with the trainer's own errors: ``except PPODictError`` catches
both. Each message names the env (id, game, binary) and says what to do.
"""

from __future__ import annotations


class PPODictError(Exception):
    """Base class of every error ppo_dict raises on purpose."""


class RenderBackendError(PPODictError, RuntimeError):
    """No OpenGL backend can render MuJoCo here."""


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


class AtariUnavailableError(PPODictError, RuntimeError):
    """ale-py is not installed, or an Atari game's ROM cannot be loaded; the message says what to install."""
