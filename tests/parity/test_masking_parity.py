"""``--action_masks`` against sb3-contrib 2.9.2's ``MaskablePPO``, exact: every rollout buffer (its
masks included), every logged value, final parameters, Adam state and RNG states; Discrete,
MultiDiscrete and MultiBinary actions, with and without VecNormalize, box, Dict and image
observations (NatureCNN; sb3-contrib's CnnPolicy and MultiInputPolicy), envs in this process and in
worker processes (whose masks reach the learner through shared memory), odd env counts."""

import warnings

import numpy as np
import pytest
import torch
from gymnasium import spaces

from ppo_dict.algo.networks.policy import ActorCritic
from ppo_dict.algo.rollout.rollout_step import PolicyStep
from ppo_dict.core.config import Config
from ppo_dict.data.actions import mask_sizes
from ppo_dict.data.masking import mask_offsets, with_action_masks
from ppo_dict.vec import make_env_pool
from tests.parity.sides import Record, assert_same_record, assert_same_value, learn_sb3, make_maskable, run_ours

BASE = dict(
    env="gym_PPODictMaskedJump-v0",
    gym_packages="ppo_dict.envs.masked",
    action_masks=True,
    n_steps=32,
    batch_size=32,
    n_epochs=2,
    ent_coef=0.01,
    num_workers=0,
)
CONFIGS = {
    "discrete_3_envs": Config(**BASE, env_kwargs=dict(action="discrete"), n_envs=3, seed=0, total_timesteps=3 * 96),
    "multi_discrete_1_env": Config(
        **BASE, env_kwargs=dict(action="multi_discrete", episode_length=12), n_envs=1, seed=1, total_timesteps=3 * 32
    ),
    "multi_binary_3_envs": Config(
        **BASE, env_kwargs=dict(action="multi_binary", size=6), n_envs=3, seed=2, total_timesteps=2 * 96
    ),
    # VecNormalize, value clipping and a truncated minibatch (96 % 40 = 16)
    "discrete_vecnormalize": Config(
        **{**BASE, "batch_size": 40},
        env_kwargs=dict(action="discrete", size=8),
        n_envs=3,
        normalize=True,
        clip_range_vf=0.2,
        seed=3,
        total_timesteps=3 * 96,
    ),
    "multi_discrete_dict_obs_vecnormalize": Config(
        **BASE,
        env_kwargs=dict(action="multi_discrete", observation="dict", size=5, reach=1),
        n_envs=3,
        normalize=True,
        seed=4,
        total_timesteps=2 * 96,
    ),
    # a channel-last uint8 picture of the board: NatureCNN (CnnPolicy), sb3's VecTransposeImage
    "multi_discrete_image": Config(
        **BASE,
        env_kwargs=dict(action="multi_discrete", observation="image", size=5, reach=1),
        model="cnn",
        n_envs=3,
        seed=6,
        total_timesteps=2 * 96,
    ),
    # a channel-first picture beside a float vector (MultiInputPolicy: NatureCNN + flatten), the vector normalised
    "multi_binary_dict_image_vecnormalize": Config(
        **BASE,
        env_kwargs=dict(action="multi_binary", observation="dict_image", size=6),
        model="cnn",
        n_envs=2,
        normalize=True,
        seed=7,
        total_timesteps=2 * 64,
    ),
    # the mask through sb3-contrib's ActionMasker wrapper, on both sides
    "action_masker_wrapper": Config(
        **{**BASE, "env": "gym_PPODictMaskedJumpMasker-v0"},
        env_kwargs=dict(action="discrete"),
        n_envs=3,
        seed=5,
        total_timesteps=2 * 96,
    ),
}
#: worker layouts: (num_workers, envs_per_worker, main_steps_envs)
POOLS = {
    "discrete_3_envs": (3, 1, True),
    "multi_binary_3_envs": (3, 1, False),
    "discrete_vecnormalize": (1, 3, False),
    "multi_discrete_image": (1, 3, True),
}


def run_both(cfg: Config, pool_layout=None) -> tuple[Record, Record]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sb3 = learn_sb3(make_maskable(cfg), cfg.total_timesteps)
        if pool_layout is None:
            return sb3, run_ours(cfg)
        workers, per_worker, main_steps = pool_layout
        cfg = cfg.replace(
            num_workers=workers, envs_per_worker=per_worker, main_steps_envs=main_steps, main_envs=1 if main_steps else None
        )
        return sb3, run_ours(cfg, make_env_pool(cfg))


def assert_masks_used(rec: Record, space: spaces.Space) -> None:
    """Guard: the masks forbid most actions somewhere, and every action taken was allowed by its mask."""
    offsets = mask_offsets(mask_sizes(space))
    for rollout in rec.rollouts:
        masks, actions = rollout["action_masks"].astype(bool), rollout["actions"].astype(np.int64)
        assert masks.mean() < 0.8, "the masks forbid too little for the test to mean anything"
        picked = np.take_along_axis(masks, offsets + actions, axis=-1)
        assert picked.all(), "an action forbidden by its mask was taken"


@pytest.mark.parametrize("name", list(CONFIGS))
def test_in_process_bit_exact(name: str) -> None:
    sb3, ours = run_both(CONFIGS[name])
    assert_same_record(sb3, ours)
    kind = CONFIGS[name].env_kwargs["action"]
    space = {
        "discrete": spaces.Discrete(12),
        "multi_discrete": spaces.MultiDiscrete([5, 5]),
        "multi_binary": spaces.MultiBinary(6),
    }[kind]
    if name in (
        "discrete_3_envs",
        "multi_binary_3_envs",
        "multi_discrete_dict_obs_vecnormalize",
        "multi_discrete_image",
        "multi_binary_dict_image_vecnormalize",
    ):
        assert_masks_used(ours, space)


@pytest.mark.parametrize("name", list(POOLS))
def test_worker_pool_bit_exact(name: str) -> None:
    """Masks written by worker processes (and by the main process's own envs) into shared memory."""
    sb3, ours = run_both(CONFIGS[name], POOLS[name])
    assert_same_record(sb3, ours)


CASES = {
    "discrete": spaces.Discrete(7),
    "multi_discrete": spaces.MultiDiscrete([3, 4, 2]),
    "multi_binary": spaces.MultiBinary(4),
}


@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("n_envs", [1, 5])
def test_policy_passes_exact(name: str, n_envs: int) -> None:
    """MaskableActorCriticPolicy and ours (and the lean rollout step), masks given and not: the same init
    draws and parameters, samples, log-probs, values, entropies and modes, and the same torch RNG state after each."""
    from sb3_contrib.common.maskable.policies import MaskableActorCriticPolicy

    space, box = CASES[name], spaces.Box(-1.0, 1.0, (5,), np.float32)
    torch.manual_seed(3)
    sb3 = MaskableActorCriticPolicy(box, space, lambda _: 3e-4)
    sb3_rng = torch.get_rng_state()
    torch.manual_seed(3)
    ours = ActorCritic(box, with_action_masks(space), action_masks=True)
    assert torch.equal(sb3_rng, torch.get_rng_state())
    assert_same_value(sb3.state_dict(), ours.state_dict(), "initial state_dict")
    rng = np.random.default_rng(n_envs)
    obs = torch.as_tensor(rng.uniform(-1, 1, (n_envs, 5)).astype(np.float32))
    masks = rng.random((n_envs, sum(mask_sizes(space)))) < 0.4
    for start in mask_offsets(mask_sizes(space)):
        masks[:, start] = True  # every categorical keeps one valid action
    for given in (torch.as_tensor(masks), None):
        outputs = []
        for policy in (sb3, ours):
            torch.manual_seed(11)
            with torch.no_grad():
                actions, values, log_probs = policy(obs, action_masks=given)
                scored = policy.evaluate_actions(
                    obs, actions.reshape(n_envs, -1).squeeze(-1) if name == "discrete" else actions.float(), action_masks=given
                )
                mode = policy(obs, deterministic=True, action_masks=given)[0]
            outputs.append((actions, values, log_probs, *scored, mode, torch.get_rng_state()))
        assert_same_value(
            list(outputs[0]), list(outputs[1]), f"passes with masks {'given' if given is not None else 'absent'}"
        )
        torch.manual_seed(11)
        lean = PolicyStep(ours, n_envs)(obs, masks=given)  # the rollout's step: the same floats and draws
        assert_same_value([*lean, torch.get_rng_state()], [*outputs[0][:3], outputs[0][-1]], "the lean rollout step")


def test_continuing_a_maskable_ppo_zip_equals_maskable_load_learn(tmp_path) -> None:
    """``--trained_agent`` of a MaskablePPO zip: the run takes masks from the zip (no flag typed) and
    continues as ``MaskablePPO.load(zip, env, seed=...).learn(n)`` does, bit for bit."""
    from sb3_contrib import MaskablePPO
    from stable_baselines3.common.env_util import make_vec_env

    import ppo_dict.envs.masked  # noqa: F401 (registers the env for sb3's make_vec_env)
    from ppo_dict.interop.trained_agent import apply_trained_agent, read_trained_agent
    from ppo_dict.run.checks import validate
    from ppo_dict.run.cli import config_from_args

    kwargs = dict(action="multi_discrete", size=6)
    first = MaskablePPO(
        "MlpPolicy",
        make_vec_env("PPODictMaskedJump-v0", n_envs=3, seed=0, env_kwargs=kwargs),
        n_steps=32,
        batch_size=48,
        n_epochs=2,
        ent_coef=0.01,
        seed=0,
        device="cpu",
        policy_kwargs=dict(net_arch=[32, 32]),
    )
    first.learn(192)
    zip_path = str(tmp_path / "masked.zip")
    first.save(zip_path)
    first.get_env().close()

    env = make_vec_env("PPODictMaskedJump-v0", n_envs=3, seed=1, env_kwargs=kwargs)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sb3 = learn_sb3(MaskablePPO.load(zip_path, env=env, seed=1, device="cpu", n_steps=32, batch_size=48), 192)
    argv = [
        "--env",
        "gym_PPODictMaskedJump-v0",
        "--gym_packages",
        "ppo_dict.envs.masked",
        "--env_kwargs",
        repr(kwargs),
        "--n_envs",
        "3",
        "--n_steps",
        "32",
        "--batch_size",
        "48",
        "--seed",
        "1",
        "--total_timesteps",
        "192",
    ]
    agent = read_trained_agent(zip_path, "gym_PPODictMaskedJump-v0")
    cfg = config_from_args(
        argv + ["--trained_agent", zip_path, "--num_workers", "0", "--verbose", "0"], base=agent.saved, pinned=agent.pinned
    )
    assert cfg.action_masks and cfg.net_arch == [32, 32] and cfg.ent_coef == 0.01
    validate(cfg, agent)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ours = run_ours(cfg, prepare=lambda model: apply_trained_agent(model, agent))
    assert_same_record(sb3, ours)
