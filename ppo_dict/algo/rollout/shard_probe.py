"""The start probe of the sharded policy step: is each process's window of rows the whole batch's, bit for bit?

Whether a matrix product rounds a row by the batch it is in depends on the CPU, the torch build, the
shapes, the threads and where the rows lie in memory, so it is measured, not assumed: on the run's own
storage rows (or rows laid out as they will be, at ``--dry_run``), with the run's policy and spaces, for
each process's rows, the probe writes random observations (and masks) into a rollout row, runs the
central step on the whole batch with a seeded generator, then draws the sharded step's random numbers
from the same seed and runs each process's :class:`~ppo_dict.algo.rollout.shard.ShardWork` on its window (a
worker's with one thread, as workers run), several times, and compares every output bit for bit:
the actions, the clipped actions the envs get, the values and log-probs, the generator's state after the
draws, and the critic on a batch of one (the bootstrap's) with the shared parameters. The smallest
granule of :data:`~ppo_dict.algo.rollout.shard.GRANULES` whose windows all agree is taken; none: the central step.
The global generator is left as it was (the probe runs on a fork of it).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Optional, Sequence

import numpy as np
import torch
from gymnasium import spaces

from ppo_dict.algo.networks.policy import ActorCritic
from ppo_dict.algo.rollout.rollout_step import PolicyStep
from ppo_dict.algo.rollout.shard import GRANULES, ShardProgram, ShardWork, SharedBlock, bind
from ppo_dict.core.seeding import thread_count
from ppo_dict.data.masking import mask_offsets
from ppo_dict.data.storage import RolloutStorage, obs_to_tensor, storage_keys

#: Random batches each granule is tried on.
DRAWS = 3


def random_rows(
    storage: RolloutStorage, t: int, rng: np.random.Generator, scale: float, mask_sizes: Optional[list[int]]
) -> None:
    """Random observations (the learner's, as the policy reads them) and action masks into rollout row ``t``,
    and random terminal observations; each leaf's values as its space allows."""
    leaves = storage_keys(storage.observation_space)
    for rows in ((storage.obs, t), (storage.terminal_obs, None)):
        for key, arr in rows[0].items():
            target = arr[rows[1]] if rows[1] is not None else arr
            space, shape = leaves[key], target.shape
            if isinstance(space, spaces.Discrete):
                values = rng.integers(space.n, size=shape)
            elif isinstance(space, spaces.MultiDiscrete):
                values = rng.integers(np.broadcast_to(space.nvec, shape))
            elif isinstance(space, spaces.MultiBinary) or arr.dtype.kind in "biu":
                high = 256 if arr.dtype == np.uint8 else 2
                values = rng.integers(high, size=shape)
            else:
                values = rng.normal(scale=scale, size=shape)
            target[...] = values
    if storage.action_masks is not None and mask_sizes:
        masks = rng.random(storage.action_masks[t].shape) < 0.6
        masks[:, mask_offsets(mask_sizes) + rng.integers(np.array(mask_sizes))] = True  # each categorical keeps a valid action
        storage.action_masks[t] = masks


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and a.dtype == b.dtype and np.array_equal(a.view(np.uint8), b.view(np.uint8))


def probe(
    program: ShardProgram,
    block: SharedBlock,
    policy: ActorCritic,
    central: PolicyStep,
    step_obs: Callable[[int], Any],
    storage: RolloutStorage,
    processes: Sequence[tuple[range, bool]],
    sync_matrices: Callable[[int], None],
    seed: int = 12345,
) -> tuple[Optional[int], str]:
    """``(granule, why)``: the smallest granule whose windows agree, else ``(None, what differed)``.

    ``central``: the whole batch's step on ``policy`` (refreshed); ``step_obs(t)``: its input of row ``t``;
    ``processes``: each process's columns and whether it is a worker (one thread); ``sync_matrices(slot)``:
    gSDE's exploration matrices of ``policy`` into the block's slot.
    """
    s = storage
    bound = _bound_copy(program, block)
    if not _same_critic(policy, bound, storage):
        return None, "the critic of one observation differs between the policy and its copy in shared memory"
    rng = np.random.default_rng(seed)
    mask_sizes = policy.action_spec.mask_sizes if policy.masked else None
    outputs = (s.actions, s.values, s.log_probs)
    why = ""
    for granule in GRANULES:
        works = [
            (ShardWork(dataclasses.replace(program, granule=granule), bound, block, storage, own), worker)
            for own, worker in processes
            if len(own)
        ]
        for draw in range(DRAWS):
            t = draw % s.n_steps
            random_rows(storage, t, rng, (1.0, 5.0, 0.1)[draw % 3], mask_sizes)
            expected, why = _central(policy, central, step_obs, storage, t, seed + draw, program, block, sync_matrices)
            if expected is None:
                return None, why
            for arr in (*outputs, s.env_actions):
                arr[t if arr is not s.env_actions else slice(None)] = 0
            for work, worker in works:
                with thread_count(1 if worker else torch.get_num_threads()):
                    work.before((2, t, 0, 0, 0, 0, work.version if work.version >= 0 else 0))
            got = [arr[t].copy() for arr in outputs] + [s.env_actions.copy()]
            if not all(same_bits(a, b) for a, b in zip(expected, got)):
                names = [
                    name
                    for name, a, b in zip(("actions", "values", "log-probs", "env actions"), expected, got)
                    if not same_bits(a, b)
                ]
                why = f"windows of {granule} row{'s' * (granule > 1)} gave other {', '.join(names)} than the whole batch"
                break
        else:
            return (
                granule,
                f"each process's rows equal the whole batch's (windows of {granule} row{'s' * (granule > 1)}, "
                f"{DRAWS} random batches)",
            )
    return None, why


def _bound_copy(program: ShardProgram, block: SharedBlock) -> ActorCritic:
    import pickle

    copy = pickle.loads(program.policy)
    bind(copy, block)
    return copy


def _same_critic(policy: ActorCritic, bound: ActorCritic, storage: RolloutStorage) -> bool:
    """The bootstrap's critic on a batch of one gives the same value with the shared parameters as with the policy's."""
    a, b = PolicyStep(policy, 1), PolicyStep(bound, 1)
    rng = np.random.default_rng(0)
    random_rows(storage, 0, rng, 1.0, None)
    for env in range(min(storage.n_envs, 4)):
        obs = obs_to_tensor(storage.terminal_input(env), torch.device("cpu"))
        with torch.inference_mode():
            if not torch.equal(a.critic(obs), b.critic(obs)):
                return False
    return True


def _central(
    policy: ActorCritic,
    central: PolicyStep,
    step_obs: Callable[[int], Any],
    storage: RolloutStorage,
    t: int,
    seed: int,
    program: ShardProgram,
    block: SharedBlock,
    sync_matrices: Callable[[int], None],
) -> tuple[Optional[list[np.ndarray]], str]:
    """The central step of row ``t`` from ``seed`` (its outputs), and the sharded draws from the same seed into
    the block's slot 0 (the generator must end where the central step left it); the global generator is restored."""
    s, gsde = storage, policy.action_spec.gsde
    saved = None if gsde is None else (gsde.exploration_mat, gsde.exploration_matrices)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        if gsde is not None:
            policy.reset_noise(program.n_envs)
            sync_matrices(0)
        start = torch.get_rng_state()
        masks = None if s.action_masks is None else torch.from_numpy(s.action_masks)[t]
        central(step_obs(t), out=tuple(torch.from_numpy(a)[t] for a in (s.actions, s.values, s.log_probs)), masks=masks)
        after = torch.get_rng_state()
        policy.action_spec.to_env(s.actions[t], out=s.env_actions.reshape(program.n_envs, s.action_dim))
        torch.set_rng_state(start)
        if central.sampler is not None:
            central.sampler.draw([block.tensors[f"draw/0/{i}"] for i in range(len(program.draws))])
        same_draws = torch.equal(after, torch.get_rng_state())
    if saved is not None:
        gsde.exploration_mat, gsde.exploration_matrices = saved
    if not same_draws:
        return None, "the sharded step's random draws leave the generator elsewhere than the central step's"
    return [arr[t].copy() for arr in (s.actions, s.values, s.log_probs)] + [s.env_actions.copy()], ""
