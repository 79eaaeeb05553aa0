"""Godot games as ppo_dict environments (Godot RL Agents' protocol, headless Godot 3).

* :mod:`envs.godot.protocol`: the wire protocol, message types and space conversion.
* :mod:`envs.godot.game`: :class:`~envs.godot.game.GodotGame`, one Godot process whose agents are env columns.
* :mod:`envs.godot.pool`: :class:`~envs.godot.pool.GodotInProcessPool`, games stepped into rollout storage.
* ``envs/godot/demo``: a Godot 3 project (4 reach agents per process) that PPO learns in minutes.

Nothing here is imported by ``envs`` itself, so importing ``envs`` never needs Godot.
"""
