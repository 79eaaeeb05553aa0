"""RNG streams: saved and restored bit for bit, through a weights-only file, and left untouched by a preserved block."""

import random

import numpy as np
import torch

from ppo_dict.core.seeding import preserved_rng, rng_state, set_random_seed, set_rng_state


def draws() -> tuple:
    return torch.rand(3).tolist(), np.random.permutation(10).tolist(), random.random()


def test_state_round_trips_through_a_weights_only_file(tmp_path) -> None:
    set_random_seed(5)
    torch.save(rng_state(), tmp_path / "rng.pt")
    first = draws()
    set_rng_state(torch.load(tmp_path / "rng.pt", weights_only=True))
    assert draws() == first


def test_preserved_block_leaves_the_streams_as_found() -> None:
    set_random_seed(7)
    with preserved_rng():
        draws()
    after = draws()
    set_random_seed(7)
    assert draws() == after
