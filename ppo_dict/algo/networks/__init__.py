"""The networks: sb3's ActorCriticPolicy and its recurrent kin as torch modules, their sb3-facing surface, a user's own
policy class, and the LSTM's inference kernels."""
