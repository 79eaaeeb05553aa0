"""``MaskablePPO.learn(..., use_masking=False)`` as sb3-contrib 2.9.2 does it: the envs' ``action_masks()`` not
called, the rollout sampled from the unmasked distribution, the update given the buffer's all-True masks, also in
a second call that goes on without a reset; then ``learn(use_masking=True, reset_num_timesteps=False)`` asks the envs
again. Every rollout buffer (its masks included), every log dump, the final parameters and Adam state, and how often
each env was asked for its mask, under sb3-contrib's import and ppo_dict's (sb3's ``make_vec_env``, and ppo_dict's,
whose envs run in worker processes), compared with ``==``.
"""

from __future__ import annotations

import warnings

import gymnasium as gym
import numpy as np
import pytest
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.logger import Logger

import ppo_dict.envs.masked  # noqa: F401  (registers PPODictMaskedJump-v0)
from tests.api.scripts import Capture, imports
from tests.parity.sides import assert_same_value


class CountedMasks(gym.Wrapper):
    """The env's ``action_masks()``, counting its calls (read back with ``get_attr("mask_calls")``)."""

    def __init__(self, env: gym.Env):
        super().__init__(env)
        self.mask_calls = 0

    def action_masks(self) -> np.ndarray:
        self.mask_calls += 1
        return self.env.unwrapped.action_masks()


class Buffers(BaseCallback):
    """Each rollout's buffer at its end (masks included) and what ``on_step`` saw of the masks."""

    def __init__(self, record: dict):
        super().__init__()
        self.record = record

    def _on_step(self) -> bool:
        masks = self.locals["action_masks"]
        self.record.setdefault("step masks", []).append(None if masks is None else masks.copy())
        self.record.setdefault("use_masking", set()).add(self.locals["use_masking"])
        return True

    def _on_rollout_end(self) -> None:
        buf = self.model.rollout_buffer
        fields = ("observations", "actions", "values", "log_probs", "advantages", "returns", "action_masks")
        self.record.setdefault("rollouts", []).append({name: getattr(buf, name).copy() for name in fields})


def record(which: str, n_envs: int) -> dict:
    api = imports(which)
    # the policy step where the envs are
    workers = {} if which != "ppo_dict_envs" else dict(vec_env_kwargs=dict(num_workers=2))
    env = api.make_vec_env("PPODictMaskedJump-v0", n_envs=n_envs, seed=0, wrapper_class=CountedMasks, **workers)
    model = api.MaskablePPO(
        "MlpPolicy", env, n_steps=32, batch_size=32, n_epochs=2, ent_coef=0.01, seed=0, device="cpu", verbose=0
    )
    rec: dict = {"dumps": []}
    model.set_logger(Logger(None, [Capture(rec["dumps"])]))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        before = env.get_attr("mask_calls")
        model.learn(2 * 32 * n_envs, callback=Buffers(rec), use_masking=False)
        # no reset: still not asked
        model.learn(32 * n_envs, callback=Buffers(rec), use_masking=False, reset_num_timesteps=False)
        rec["calls while unmasked"] = [after - was for after, was in zip(env.get_attr("mask_calls"), before)]
        unmasked = len(rec["rollouts"])
        model.learn(32 * n_envs, callback=Buffers(rec), use_masking=True, reset_num_timesteps=False)
        rec["asked again"] = min(env.get_attr("mask_calls")) > 0
    rec["params"] = {k: v.clone() for k, v in model.policy.state_dict().items()}
    rec["optimizer"] = model.policy.optimizer.state_dict()
    rec["unmasked rollouts' masks all True"] = all(r["action_masks"].all() for r in rec["rollouts"][:unmasked])
    rec["masked rollout forbids some"] = not rec["rollouts"][-1]["action_masks"].all()
    trainer = getattr(model, "trainer", None)  # ppo_dict's: where the policy step ran
    sharded = trainer is not None and trainer.collector.shard is not None
    env.close()
    return rec, sharded


@pytest.mark.parametrize("which,n_envs", [("ppo_dict", 3), ("ppo_dict_envs", 4)])
def test_use_masking_false_is_sb3_contribs(which: str, n_envs: int) -> None:
    """ppo_dict_envs: two worker processes, which sample their envs' actions themselves where the start probe allows."""
    (sb3, _), (ours, sharded) = record("sb3", n_envs), record(which, n_envs)
    assert sb3["calls while unmasked"] == [0] * n_envs  # the guard: sb3-contrib does not ask
    assert sb3["unmasked rollouts' masks all True"] and sb3["masked rollout forbids some"] and sb3["asked again"]
    assert_same_value(sb3, ours, "use_masking=False, then True")
    print(f"{which}: policy step {'in the workers' if sharded else 'central'}")
