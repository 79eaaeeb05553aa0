"""Ranks: one run trained by several torchrun processes, their collectives and their share of the rollout."""
