"""The update: GAE, PPO's loss and its minibatches (flat, per rank, or padded sequences), on the CPU as sb3 or on a
device, and the optimizer's step."""
