"""Kernel inputs laid out as sb3's, checked by pointer and strides on any host.

On an AVX-512 CPU a matmul rounds a row that starts 8 bytes off a 16-byte boundary differently
from the same values in a fresh allocation, so exactness is a property of the layout of every
tensor the policy and the update read, not of the floats one host happens to give. These tests
record every observation batch that reaches the policy (``ActorCritic._preprocess``: the rollout
step, the time-limit bootstrap, GAE's last values, evaluation, and the update's
``evaluate_actions``) and every minibatch the update takes, and require each to start on a
64-byte boundary (what torch's allocator gives a fresh tensor, and a multiple of numpy's 16) and to
be dense: C-contiguous, or the channel-last image view sb3's ``VecTransposeImage`` hands over (a
permutation of a C-contiguous array). They fail on a host where a misaligned row happens to round
the same, which is every host CI has.
"""

from __future__ import annotations

import dataclasses
import warnings
from typing import Any, Iterator

import numpy as np
import pytest
import torch

from ppo_dict.algo.networks.policy import ActorCritic
from ppo_dict.algo.ppo import PPO
from ppo_dict.algo.training.update import RolloutTensors
from ppo_dict.core.config import Config
from ppo_dict.envs import make_env
from ppo_dict.run.evaluation import run_episodes
from ppo_dict.run.run_plan import build_env_pool
from ppo_dict.vec import env_spec
from tests.parity.test_env_counts import SPACES

MASKED = dict(env="gym_PPODictMaskedJump-v0", gym_packages=("ppo_dict.envs.masked",), action_masks=True)
#: the spaces of the parity runs, and action masking (sb3-contrib's MaskablePPO: masks in the rollout step and the update)
#: on vectors, on a channel-last picture (NatureCNN) and on a picture beside a normalised vector (MultiInputPolicy)
CASES = {
    **SPACES,
    "masked": MASKED,
    "masked_image": dict(**MASKED, model="cnn", env_kwargs=dict(action="multi_discrete", observation="image", size=5)),
    "masked_dict_image": dict(
        **MASKED, model="cnn", normalize=True, env_kwargs=dict(action="multi_binary", observation="dict_image", size=5)
    ),
}
BATCH_SIZES = (1, 2, 3, 5, 7, 8, 13)
#: the rollout, bootstrap and update settings every case shares: a rollout of 4 steps, minibatches that do not divide it
RUN = dict(n_steps=4, n_epochs=1, seed=0, device="cpu", verbose=0, plot=False)


def dense(t: torch.Tensor) -> bool:
    """C-contiguous, or a permutation of a C-contiguous array (sb3's channel-last image view)."""
    expected = 1
    for d in sorted((d for d in range(t.dim()) if t.shape[d] != 1), key=lambda d: t.stride(d)):
        if t.stride(d) != expected:
            return False
        expected *= t.shape[d]
    return True


def misplaced(where: str, value: Any) -> Iterator[str]:
    """Every tensor in ``value`` (a tensor or a dict of them) that is not laid out as a fresh allocation."""
    for key, t in value.items() if isinstance(value, dict) else [(None, value)]:
        if t.numel() > 1 and (t.data_ptr() % 64 or not dense(t)):
            yield (
                f"{where}[{key}]: {t.dtype}{tuple(t.shape)} strides {t.stride()} at {t.data_ptr() % 64} bytes past a "
                "64-byte boundary"
            )


@pytest.fixture
def recorded(monkeypatch: pytest.MonkeyPatch) -> dict[str, list]:
    """Wraps the policy's one input door and the update's minibatches; returns what they saw."""
    seen: dict[str, list] = {"inputs": [], "problems": []}
    preprocess, take = ActorCritic._preprocess, RolloutTensors.take

    def recording_preprocess(self: ActorCritic, obs: Any) -> Any:
        features = preprocess(self, obs)
        seen["inputs"].append(obs)
        seen["problems"] += [*misplaced("policy input", obs), *misplaced("preprocessed input", features)]
        return features

    def recording_take(self: RolloutTensors, idx: np.ndarray) -> Any:
        batch = take(self, idx)
        for field in dataclasses.fields(batch):
            if getattr(batch, field.name) is not None:  # action_masks: only with masks
                seen["problems"] += misplaced(f"minibatch {field.name}", getattr(batch, field.name))
        return batch

    monkeypatch.setattr(ActorCritic, "_preprocess", recording_preprocess)
    monkeypatch.setattr(RolloutTensors, "take", recording_take)
    return seen


def train_and_evaluate(cfg: Config) -> None:
    """A rollout and an update on ``cfg``'s pool, then one evaluation episode of the trained policy."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = PPO(cfg, build_env_pool(cfg))
        try:
            model.learn()
        finally:
            model.close()
        env = make_env(env_spec(cfg))
        try:
            run_episodes(model.model, env, 1, 0)
        finally:
            env.close()


@pytest.mark.parametrize("n_envs", BATCH_SIZES)
@pytest.mark.parametrize("space", list(CASES))
def test_every_kernel_input_is_laid_out_as_a_fresh_allocation_in_process(recorded: dict, space: str, n_envs: int) -> None:
    cfg = Config(
        **CASES[space],
        **RUN,
        n_envs=n_envs,
        num_workers=0,
        batch_size=max(2, (4 * n_envs) // 3 + 1),
        total_timesteps=4 * n_envs,
    )
    train_and_evaluate(cfg)
    assert len(recorded["inputs"]) > 4, "the policy was not called on every step"
    assert recorded["problems"] == []


@pytest.mark.parametrize("main_envs", [None, 0])
@pytest.mark.parametrize("n_envs", [3, 5, 13])
def test_every_kernel_input_is_laid_out_as_a_fresh_allocation_with_workers(recorded: dict, n_envs: int, main_envs) -> None:
    """Worker processes write the rows in shared memory (one worker, as the odd counts divide no more; default layout:
    the main process steps a share of the envs itself; ``main_envs=0``: the workers step them all)."""
    cfg = Config(
        **SPACES["dict_normalized"],
        **RUN,
        n_envs=n_envs,
        num_workers=1,
        batch_size=n_envs + 1,
        main_envs=main_envs,
        total_timesteps=4 * n_envs,
    )
    train_and_evaluate(cfg)
    assert len(recorded["inputs"]) > 4
    assert recorded["problems"] == []


def test_the_check_sees_a_misaligned_row() -> None:
    """The check itself can fail: a row of a [T, 3, 6] float32 array (not padded) 8 bytes off."""
    rows = torch.zeros(3 * 6 * 4 + 16)[16:].view(4, 3, 6)  # 64 bytes in: row 1 starts 72 + 64 bytes in
    assert list(misplaced("row", rows[0])) == []
    assert list(misplaced("row", rows[1])) and list(misplaced("strided", rows[0, :, :3]))
