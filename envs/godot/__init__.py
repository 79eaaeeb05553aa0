"""Godot games as ppo_dict environments (Godot RL Agents' protocol, headless Godot 3).

* :mod:`.protocol`: the wire protocol, message types and space conversion.
* :mod:`.game`: :class:`~.game.GodotGame`, one Godot process whose agents are env columns.
* :mod:`.spec`: Godot games as :class:`~envs.spec.EnvSpec` (``godot_demo``, ``godot`` + a path).
* ``demo/``: a Godot 3 project (4 reach agents per process) that PPO learns in minutes.

The trainer steps a game's agents into rollout storage with ``ppo_dict.vec.godot``. Nothing
here is imported by ``envs`` itself until a Godot name is resolved, so ``envs`` never needs Godot.
"""
