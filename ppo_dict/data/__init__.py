"""What the processes share: one ``ActionSpec`` per action space (its distribution, lean sampler,
masks), the rollout storage's layout (``storage``) and the episode book. Below ``vec`` (the envs'
runners write into it) and ``algo`` (the learner reads it); imports ``core`` and ``ppo_dict.envs`` only.
"""
