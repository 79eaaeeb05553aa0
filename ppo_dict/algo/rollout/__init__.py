"""The rollout: the policy step, the books each step keeps (finite checks, the normaliser, rewards, the time-limit
bootstrap, episode starts), and the schedules that run them: central, double-buffered, sharded over the processes that
step envs, on a device or as CUDA graphs."""
