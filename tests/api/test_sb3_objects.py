"""sb3's objects as callbacks and scripts see them: ``model.rollout_buffer`` (sb3's attributes and
``get()`` on the rollout storage), ``set_env`` keeping the policy and optimizer objects,
``locals["rewards"]`` in the vec env's own dtype, ``policy.action_dist`` with gSDE, and sb3's
``verbose=1`` lines.

The scripts run under sb3's import and ppo_dict's (sb3's ``make_vec_env``, its ``SubprocVecEnv``, and
ppo_dict's ``make_vec_env``), and what they saw is compared with ``==``.
"""

from __future__ import annotations

import contextlib
import functools
import io
import os
from types import SimpleNamespace

import gymnasium as gym
import numpy as np
import pytest
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.vec_env import SubprocVecEnv

import ppo_dict
import ppo_dict.envs.masked  # noqa: F401  (registers PPODictMaskedJump-v0)
from tests.api.scripts import Record, Watch, imports, run
from tests.api.test_scripts import assert_same_run

#: sb3's rollout buffer's attributes a callback reads, besides its arrays
ATTRIBUTES = (
    "pos",
    "full",
    "buffer_size",
    "n_envs",
    "gamma",
    "gae_lambda",
    "obs_shape",
    "action_dim",
    "observation_space",
    "action_space",
)
ARRAYS = ("observations", "actions", "rewards", "episode_starts", "values", "log_probs", "advantages", "returns")


class ReadBuffer(BaseCallback):
    """Reads ``model.rollout_buffer`` as callbacks do: at each step its position, at each rollout's end its
    attributes, arrays and two minibatches of ``get()`` (which draws a permutation from numpy's RNG, as sb3's);
    the step's ``locals["rewards"]`` with its dtype and gSDE's exploration matrix at each rollout's start."""

    def __init__(self, record: Record):
        super().__init__()
        self.record = record

    def _on_rollout_start(self) -> None:
        if getattr(self.model, "use_sde", False):
            self.record.events.append(
                (
                    "noise",
                    self.model.policy.action_dist.exploration_mat.clone(),
                    self.model.policy.action_dist.exploration_matrices.clone(),
                )
            )

    def _on_step(self) -> bool:
        b = self.model.rollout_buffer
        rewards = self.locals["rewards"]
        self.record.events.append(("step", b.pos, b.size(), b.full, rewards.dtype, rewards.copy()))
        return True

    def _on_rollout_end(self) -> None:
        b = self.model.rollout_buffer
        seen = {name: getattr(b, name) for name in ATTRIBUTES}
        seen["size"], seen["device"] = b.size(), str(b.device)
        seen.update({name: np.array(getattr(b, name)) for name in ARRAYS})
        batches = b.get(batch_size=48)
        seen["samples"] = [tuple(next(batches)) for _ in range(2)]
        self.record.events.append(("rollout_end", seen))


def read_buffer(api: SimpleNamespace, tmp: str, record: Record, subproc: bool = False) -> None:
    """gSDE on Pendulum (time limits within the rollout) with a callback reading the rollout buffer; then
    ``set_env`` with a new env (the policy and optimizer objects a script holds keep training)."""
    kwargs = {"vec_env_cls": SubprocVecEnv} if subproc else {}
    env = api.make_vec_env("Pendulum-v1", n_envs=2, seed=0, **kwargs)
    model = api.PPO(
        "MlpPolicy", env, n_steps=128, batch_size=64, n_epochs=2, gamma=0.95, gae_lambda=0.9, use_sde=True, seed=1, verbose=0
    )
    record.attach(model)
    model.learn(512, callback=[ReadBuffer(record), Watch(record)])
    policy, optimizer = model.policy, model.policy.optimizer
    other = api.make_vec_env("Pendulum-v1", n_envs=2, seed=5, **kwargs)
    model.set_env(other)
    record.results["same_objects"] = (model.policy is policy, model.policy.optimizer is optimizer)
    model.learn(256, reset_num_timesteps=False, callback=ReadBuffer(record))
    record.keep("trained", model)
    record.results["held"] = {k: v.clone() for k, v in policy.state_dict().items()}  # the reference taken before set_env
    env.close()
    other.close()


def read_masked_buffer(api: SimpleNamespace, tmp: str, record: Record) -> None:
    """sb3-contrib's MaskablePPO: its buffer's masks, and its get()'s samples with them."""
    env = api.make_vec_env("PPODictMaskedJump-v0", n_envs=2, seed=3)
    model = api.MaskablePPO("MlpPolicy", env, n_steps=128, batch_size=64, n_epochs=2, seed=1, verbose=0)
    record.attach(model)
    model.learn(768, callback=[ReadBuffer(record), Watch(record)])
    record.results["same_objects"] = (True, True)
    record.keep("trained", model)
    env.close()


SCRIPTS = {
    "read_buffer": read_buffer,
    "read_buffer_subproc": functools.partial(read_buffer, subproc=True),
    "read_masked_buffer": read_masked_buffer,
}


@pytest.mark.parametrize(
    "name,which",
    [
        ("read_buffer", "ppo_dict"),
        ("read_buffer", "ppo_dict_envs"),
        ("read_buffer_subproc", "ppo_dict"),
        ("read_masked_buffer", "ppo_dict_envs"),
    ],
)
def test_callbacks_see_sb3s_rollout_buffer_and_locals(name: str, which: str, tmp_path) -> None:
    sb3 = run(name, "sb3", os.path.join(tmp_path, "sb3"), SCRIPTS)
    ours = run(name, which, os.path.join(tmp_path, "ours"), SCRIPTS)
    ends = [e[1] for e in ours.events if e[0] == "rollout_end"]
    assert len(ends) >= 3 and ends[0]["pos"] == 128 and ends[0]["full"]
    steps = [e for e in ours.events if e[0] == "step"]
    assert [e[1] for e in steps[:3]] == [0, 1, 2] and steps[0][4] == (np.float64 if name.endswith("subproc") else np.float32)
    assert len(ends[0]["samples"][0]) == (7 if "masked" in name else 6)  # MaskableRolloutBufferSamples add the masks
    assert ours.results["same_objects"] == (True, True)
    assert_same_run(sb3, ours)


def test_the_rollout_buffers_arrays_are_the_storage_itself_during_a_rollout() -> None:
    """(What it holds once learn returns: tests/api/test_after_learn.py.)"""
    seen = []

    def at_the_end(locals_: dict, globals_: dict) -> bool:
        b, s = locals_["self"].rollout_buffer, locals_["self"].trainer.storage
        seen.extend(
            np.shares_memory(getattr(b, name), getattr(s, name))
            for name in ("actions", "rewards", "values", "log_probs", "advantages", "returns", "episode_starts")
        )
        seen.append(np.shares_memory(b.observations, s.obs["obs"]) and b.observations.shape == (32, 1, 4))
        return True

    model = ppo_dict.PPO("MlpPolicy", "CartPole-v1", n_steps=32, batch_size=32, n_epochs=1, seed=0, verbose=0)
    model.learn(32, callback=at_the_end)
    assert len(seen) == 32 * 8 and all(seen)
    model.close()


def construction_lines(cls: type, env) -> list[str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        model = cls("MlpPolicy", env, seed=0, verbose=1, device="cpu")
    model.get_env().close()
    return [line for line in out.getvalue().splitlines() if not line.startswith("note: ")]


@pytest.mark.parametrize("env", ["CartPole-v1", "instance", "monitored"])
def test_verbose_lines_are_sb3s(env: str) -> None:
    from stable_baselines3.common.monitor import Monitor

    make = {
        "CartPole-v1": lambda: "CartPole-v1",
        "instance": lambda: gym.make("CartPole-v1"),
        "monitored": lambda: Monitor(gym.make("CartPole-v1")),
    }[env]
    sb3 = construction_lines(imports("sb3").PPO, make())
    assert "Wrapping the env in a DummyVecEnv." in sb3
    # sb3's lines, but the pool where sb3 says DummyVecEnv: a user reading "DummyVecEnv" would think the pool unused
    from ppo_dict.api.envs import POOL_LINE

    assert construction_lines(ppo_dict.PPO, make()) == [
        POOL_LINE if line == "Wrapping the env in a DummyVecEnv." else line for line in sb3
    ]
