"""PPO itself, by concept, each a folder (or a module) and a layer (bottom first): ``networks`` (the policies as torch
modules), ``rollout`` (the policy step, the books each step keeps, the schedules that run them), ``training`` (GAE, the
loss, the update), ``ranks`` (torchrun's processes); on top, the trained ``Model`` and the ``PPO`` loop.
Imports ``core``, ``data`` and ``vec``; nothing of ``interop``, ``run`` or the command lines.
"""
