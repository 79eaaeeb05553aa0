"""PPO itself: the policy networks, the policy step, collecting a rollout from an env pool, GAE
and the update, the normaliser, the trained ``Model`` and the ``PPO`` loop. Imports ``core``,
``data`` and ``vec``; nothing of ``interop``, ``run`` or the command lines.
"""
