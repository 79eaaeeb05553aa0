"""The policy where the envs are (ppo_dict.algo.rollout.shard): windows of rows, the start probe on every kind of space
(in this process, on storage laid out as a run's), and what the probe leaves as it found it."""

import numpy as np
import pytest
import torch
from gymnasium import spaces

from ppo_dict.algo.rollout.normalize import Normalizer
from ppo_dict.algo.networks.policy import ActorCritic
from ppo_dict.algo.rollout.rollout_step import PolicyStep, StepObsToDevice
from ppo_dict.algo.rollout.shard import GRANULES, ShardWork, window
from ppo_dict.algo.rollout.sharded_rollout import ShardedRollout, sharding_problem
from ppo_dict.core.config import Config
from ppo_dict.data.masking import with_action_masks
from ppo_dict.data.storage import RolloutStorage, vector_obs_shapes
from tests.test_rollout_step import CASES, MASKED

#: 7 envs: this process's 3, then two workers of 2 (rows that start off any granule's multiple)
PROCESSES = [(range(0, 3), False), (range(3, 5), True), (range(5, 7), True)]
N_ENVS = 7


def test_a_window_widens_a_process_s_rows_to_multiples_of_the_granule() -> None:
    assert window(range(3, 5), 1, 7) == range(3, 5)
    assert window(range(3, 5), 4, 7) == range(0, 7)  # the last window ends at the batch's end
    assert window(range(5, 9), 4, 16) == range(4, 12)
    assert window(range(8, 16), 8, 256) == range(8, 16)
    assert window(range(0, 2), 64, 2) == range(0, 2)  # a small batch: the whole of it
    assert list(GRANULES) == sorted(GRANULES) and GRANULES[0] == 1


def sharded(
    obs_space: spaces.Space, action_space: spaces.Space, normalize: bool = False, **kwargs
) -> tuple[ShardedRollout, ActorCritic]:
    torch.manual_seed(0)
    masked = kwargs.pop("action_masks", False)
    policy = ActorCritic(obs_space, action_space, action_masks=masked, **kwargs)
    stage = tuple(vector_obs_shapes(obs_space)) if normalize else ()
    storage = RolloutStorage(obs_space, action_space, 4, N_ENVS, stage_keys=stage)
    normalizer = Normalizer(vector_obs_shapes(obs_space), N_ENVS) if normalize else None
    cfg = Config(env="gym_CartPole-v1", n_envs=N_ENVS, device="cpu")
    return ShardedRollout(cfg, storage, "test", policy, normalizer, PolicyStep(policy, N_ENVS)), policy


def probe_or_skip(rollout: ShardedRollout) -> int:
    granule, why = rollout.probe(StepObsToDevice(rollout.storage, torch.device("cpu")), PROCESSES)
    if granule is None:
        pytest.skip(f"the start probe keeps the central step on this CPU: {why}")
    assert f"windows of {granule} row" in why
    return granule


@pytest.mark.parametrize("name", list(CASES))
def test_the_probe_finds_the_rows_of_every_kind_of_space(name: str) -> None:
    obs_space, action_space, kwargs = CASES[name]
    rollout, _ = sharded(obs_space, action_space, **kwargs)
    probe_or_skip(rollout)


@pytest.mark.parametrize("name", list(MASKED))
def test_the_probe_finds_the_rows_of_masked_policies(name: str) -> None:
    rollout, _ = sharded(CASES["mlp-box-2"][0], with_action_masks(MASKED[name]), action_masks=True)
    probe_or_skip(rollout)


def test_the_probe_leaves_the_generator_and_the_exploration_matrices_as_it_found_them() -> None:
    obs_space, action_space, kwargs = CASES["gsde"]
    rollout, policy = sharded(obs_space, action_space, **kwargs)
    policy.reset_noise(N_ENVS)
    gsde = policy.action_spec.gsde
    matrices, state = gsde.exploration_matrices, torch.get_rng_state()
    probe_or_skip(rollout)
    assert torch.equal(torch.get_rng_state(), state)
    assert gsde.exploration_matrices is matrices


def test_the_probe_refuses_a_window_that_rounds_a_row_differently(monkeypatch) -> None:
    """A process whose rows differ from the whole batch's in the last bit (as a matrix product can, by its batch)
    is found, at every granule: the central step stays, and the probe says what differed."""
    obs_space, action_space, kwargs = CASES["mlp-box-2"]
    rollout, _ = sharded(obs_space, action_space, **kwargs)
    call = PolicyStep.__call__

    def off_by_one_ulp(self, obs, **kwargs):
        actions, values, log_probs = call(self, obs, **kwargs)
        rows = kwargs.get("rows")
        if kwargs.get("draws") is not None and rows.start <= 3 < rows.stop:  # a sharded window holding one worker's first row
            values = torch.nextafter(values, torch.full_like(values, np.inf))
        return actions, values, log_probs

    monkeypatch.setattr(PolicyStep, "__call__", off_by_one_ulp)
    granule, why = rollout.probe(StepObsToDevice(rollout.storage, torch.device("cpu")), PROCESSES)
    assert granule is None
    assert why == f"windows of {GRANULES[-1]} rows gave other values than the whole batch"


def test_the_probe_refuses_draws_that_end_the_generator_elsewhere(monkeypatch) -> None:
    obs_space, action_space, kwargs = CASES["mlp-discrete"]
    rollout, policy = sharded(obs_space, action_space, **kwargs)
    sampler = rollout.central.sampler
    draw = sampler.draw
    monkeypatch.setattr(sampler, "draw", lambda into: (draw(into), torch.rand(1)))  # one draw too many
    granule, why = rollout.probe(StepObsToDevice(rollout.storage, torch.device("cpu")), PROCESSES)
    assert granule is None and "random draws" in why


def test_normalised_runs_are_probed_on_their_shared_normalised_rows() -> None:
    box = spaces.Box(-np.inf, np.inf, (5,), np.float32)
    rollout, _ = sharded(box, spaces.Box(-1, 1, (2,), np.float32), normalize=True)
    assert rollout.storage.stage_keys == ("obs",) and "stats/obs/mean" in rollout.block.tensors
    probe_or_skip(rollout)


@pytest.mark.parametrize(
    "what,expected",
    [
        (dict(shard_policy=False), "as asked (--shard_policy False)"),
        (dict(double_buffer=True), "--double_buffer samples one half's actions here while the workers step the other"),
    ],
)
def test_what_keeps_the_policy_step_central_is_said(what: dict, expected: str) -> None:
    obs_space, action_space, kwargs = CASES["mlp-box-2"]
    policy = ActorCritic(obs_space, action_space, **kwargs)
    storage = RolloutStorage(obs_space, action_space, 2, 4)
    cfg = Config(env="gym_CartPole-v1", n_envs=4, **what)
    assert sharding_problem(cfg, storage, policy, None, torch.device("cpu")) == expected
    assert (
        sharding_problem(cfg.replace(shard_policy=True, double_buffer=False), storage, policy, None, torch.device("cuda"))
        == "the policy runs on cuda"
    )
    normalizer = Normalizer({"obs": (11,)}, 4)  # its normalised rows would be this process's alone
    assert (
        sharding_problem(cfg.replace(shard_policy=True, double_buffer=False), storage, policy, normalizer, torch.device("cpu"))
        == "its normalised observations are not in shared memory"
    )


def test_a_worker_s_rows_land_in_its_columns_alone() -> None:
    """A process's step writes its own columns of the step's rows (actions, values, log-probs, env actions) and no other."""
    obs_space, action_space, kwargs = CASES["mlp-box-2"]
    rollout, _ = sharded(obs_space, action_space, **kwargs)
    probe_or_skip(rollout)
    s = rollout.storage
    work = ShardWork(rollout.program, rollout.policy, rollout.block, s, range(3, 5))
    for arr in (s.actions, s.values, s.log_probs, s.env_actions):
        arr[...] = np.nan
    rollout.draw(1, -1)
    work.before((2, 1, 0, 0, 1, rollout.mslot, rollout.version))
    written = ~np.isnan(s.values)
    assert written[1, 3:5].all() and written.sum() == 2
    assert (~np.isnan(s.env_actions)).all(axis=1).tolist() == [i in (3, 4) for i in range(N_ENVS)]
