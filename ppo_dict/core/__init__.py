"""The bottom layer of the trainer: the config and its value parsers, the errors, the run's files
(atomic writes, model-file reading), what fixes the bits (RNG streams, thread counts) and sb3's
console logger. Imports nothing of ppo_dict but ``ppo_dict.envs``.
"""
