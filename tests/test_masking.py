"""``--action_masks`` beside the parity suite: what a mask may be, what is refused before any process
starts, what stops a run (naming the env, the step and what was wrong), the storage's layout and
evaluation with masks."""

import warnings

import numpy as np
import pytest
import torch
from gymnasium import spaces

from ppo_dict.algo.model import Model
from ppo_dict.algo.networks.policy import ActorCritic
from ppo_dict.algo.ppo import PPO
from ppo_dict.core.config import Config
from ppo_dict.core.errors import ConfigError, EnvWorkerError
from ppo_dict.data.actions import mask_sizes
from ppo_dict.data.masking import mask_dim, mask_problem, with_action_masks
from ppo_dict.data.storage import RolloutStorage
from ppo_dict.envs.masked import MaskedJumpEnv
from ppo_dict.interop.sb3 import export_sb3
from ppo_dict.run.checks import validate
from ppo_dict.run.evaluation import run_episodes
from ppo_dict.vec import make_env_pool
from ppo_dict.vec.shared_memory import plan_layout

MASKED = dict(
    env="gym_PPODictMaskedJump-v0",
    gym_packages="ppo_dict.envs.masked",
    action_masks=True,
    n_steps=16,
    batch_size=32,
    n_epochs=1,
    seed=0,
)
BAD = dict(MASKED, env="gym_PPODictBadMask-v0", gym_packages="tests.envs.mask_fault_envs")


@pytest.mark.parametrize(
    "mask, sizes, expected",
    [
        (np.ones(5, bool), [5], ""),
        (np.array([0, 1, 0, 0, 1]), [5], ""),  # integers 0 and 1 are taken, as sb3-contrib takes them
        (np.ones((2, 3), bool), [3, 3], ""),  # any shape of the right size (sb3-contrib reshapes)
        (np.ones(4, bool), [5], "4 entries (shape (4,)), expected 5 = 5"),
        (np.full(5, 0.5), [5], "dtype float64 with values [0.5]: expected bool (or integers 0 and 1)"),
        (np.array(["a"] * 5), [5], "dtype <U1 with values ['a']: expected bool (or integers 0 and 1)"),
        (np.zeros(5, bool), [5], "allows no action"),
        (np.array([1, 0, 0, 0, 0, 1], bool), [2, 2, 2], "allows no action for entry 1 (of 3)"),
    ],
)
def test_mask_problem(mask: np.ndarray, sizes: list, expected: str) -> None:
    assert mask_problem(mask, sizes) == expected


def test_mask_layout_per_space() -> None:
    """sb3-contrib's mask_dims: n, sum(nvec), 2n; unmarked spaces have no masks."""
    assert mask_sizes(spaces.Discrete(7)) == [7]
    assert mask_sizes(spaces.MultiDiscrete([3, 4])) == [3, 4]
    assert mask_sizes(spaces.MultiBinary(3)) == [2, 2, 2]
    assert mask_dim(spaces.Discrete(7)) == 0 and mask_dim(with_action_masks(spaces.MultiBinary(3))) == 6
    with pytest.raises(ValueError, match="need Discrete"):
        with_action_masks(spaces.Box(-1, 1, (2,)))


def test_masks_live_in_the_shared_layout() -> None:
    """The mask array is one of the env-written fields (after the actions the envs read), so workers write it in place."""
    box, act = spaces.Box(0, 1, (4,), np.float32), with_action_masks(spaces.MultiDiscrete([3, 4]))
    layout, plain = plan_layout(box, act, 8, 3), plan_layout(box, spaces.MultiDiscrete([3, 4]), 8, 3)
    masks = [field[1:] for field in layout.fields if field[1:] not in [f[1:] for f in plain.fields]]
    assert masks == [((9, 64), np.dtype(bool).str)]  # a step's 3 x 7 masks, the row padded to 64 bytes
    assert len(layout.fields) == len(plain.fields) + 1
    storage = RolloutStorage(box, act, 8, 3)
    assert storage.action_masks.shape == (9, 3, 7)
    storage.action_masks[8] = True
    storage.carry_over()
    assert storage.action_masks[0].all()
    assert storage.flat_samples()["action_masks"].shape == (24, 7)


def test_config_refuses_what_masking_does_not_support() -> None:
    problems = Config(**MASKED, use_sde=True, n_envs=3, num_workers=0).problems()
    assert problems == [
        "action_masks=True: MaskablePPO has no gSDE (masks need Discrete, "
        "MultiDiscrete or MultiBinary actions); drop --use_sde"
    ]
    assert not Config(**{**MASKED, "batch_size": 16}, n_envs=3, num_workers=0).problems()  # 48 % 16 = 0
    odd = Config(**{**MASKED, "batch_size": 47}, n_envs=3, num_workers=0)  # 48 % 47 = 1: NaN in MaskablePPO
    assert odd.problems() == [
        "batch_size=47: with action_masks and normalize_advantage, the last minibatch of each epoch holds one sample "
        "(n_steps*n_envs=48), whose advantage std is NaN in MaskablePPO (it has no single-sample guard): choose a batch_size "
        "that leaves no single sample"
    ]
    assert not odd.replace(action_masks=False).problems()  # sb3's PPO skips the normalisation there


@pytest.mark.parametrize(
    "env, kwargs, expected",
    [
        (
            "gym_PPODictToy-v0",
            dict(gym_packages="ppo_dict.envs.toy", env_kwargs=dict(action="discrete")),
            "action_masks=True: env 0 has no action_masks() method, needed by --action_masks",
        ),
        (
            "gym_Pendulum-v1",
            {},
            "action_masks=True: invalid-action masks need Discrete, one-dimensional MultiDiscrete or MultiBinary(n) actions",
        ),
        (
            "gym_PPODictBadMask-v0",
            dict(gym_packages="tests.envs.mask_fault_envs", env_kwargs=dict(bad="shape", at_step=0)),
            "action_masks=True: env 0: action_masks() after its first reset (one env built to check it, before training): "
            "11 entries (shape (11,)), expected 12 = 12",
        ),
    ],
)
def test_validate_refuses_before_any_process(env: str, kwargs: dict, expected: str) -> None:
    cfg = Config(**{**MASKED, "env": env, **kwargs}, n_envs=2, num_workers=0)
    with pytest.raises(ConfigError) as err:
        validate(cfg)
    assert expected in str(err.value)


@pytest.mark.parametrize(
    "bad, what",
    [
        ("shape", "11 entries (shape (11,)), expected 12 = 12"),
        ("dtype", "dtype float64 with values [0.  0.5]: expected bool (or integers 0 and 1)"),
        ("none", "allows no action"),
    ],
)
def test_bad_mask_stops_the_run_naming_env_and_step(bad: str, what: str) -> None:
    """A worker's env whose mask goes wrong mid-rollout: the run stops with the env, the step and the fault."""
    cfg = Config(**BAD, env_kwargs=dict(bad=bad, at_step=3), n_envs=1, num_workers=1, total_timesteps=64)
    pool = make_env_pool(cfg)
    model = PPO(cfg.replace(verbose=0), pool)
    try:
        with pytest.raises(EnvWorkerError) as err:
            model.learn()
    finally:
        model.close()
    message = str(err.value)
    assert message.startswith("worker 0, env 0 (gym_PPODictBadMask-v0) raised in action_masks: ValueError: ")
    assert f"env 0: action_masks() after rollout step 2: {what}" in message


def test_double_buffered_rollouts_respect_masks() -> None:
    """Each half samples with its own rows of the masks."""
    cfg = Config(**MASKED, n_envs=4, num_workers=2, double_buffer=True, total_timesteps=128)
    taken = []
    model = PPO(cfg.replace(verbose=0), make_env_pool(cfg))
    try:
        model.learn(on_rollout=lambda m: taken.append((m.storage.actions.copy(), m.storage.action_masks[:16].copy())))
    finally:
        model.close()
    for actions, masks in taken:
        assert np.take_along_axis(masks, actions.astype(np.int64), axis=-1).all()


def test_evaluation_takes_masks_as_maskable_predict() -> None:
    """Deterministic masked actions equal sb3-contrib's ``predict(..., action_masks=...)``, and an
    evaluation with masks never plays an invalid move (no invalid-move penalty in its returns)."""
    from sb3_contrib.common.maskable.policies import MaskableActorCriticPolicy

    env = MaskedJumpEnv(size=12, reach=2, invalid_penalty=100.0)
    torch.manual_seed(0)
    ours = ActorCritic(env.observation_space, with_action_masks(env.action_space), action_masks=True)
    sb3 = MaskableActorCriticPolicy(env.observation_space, env.action_space, lambda _: 3e-4)
    sb3.load_state_dict(ours.state_dict())
    model = Model(Config(), ours, None, env.observation_space, env.action_space)
    obs, _ = env.reset(seed=1)
    for _ in range(20):
        mask = env.action_masks()[None]
        ours_action = model.predict(obs[None], deterministic=True, action_masks=mask)[0]
        sb3_action, _ = sb3.predict(obs[None], deterministic=True, action_masks=mask)
        assert np.array_equal(ours_action, sb3_action)
        obs, *_ = env.step(ours_action[0])
    returns, _ = run_episodes(model, env, 3, 0, deterministic=False)
    assert min(returns) > -50, "an invalid move was played"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        unmasked = ActorCritic(env.observation_space, env.action_space)
    assert (
        min(
            run_episodes(
                Model(Config(), unmasked, None, env.observation_space, env.action_space), env, 3, 0, deterministic=False
            )[0]
        )
        < -50
    )  # the guard can fail


def test_export_sb3_writes_a_maskable_ppo_zip(tmp_path) -> None:
    """``--export_sb3`` of a masked run: ``MaskablePPO.load`` reads it, with our parameters, Adam state
    and counters exactly, and predicts our masked actions."""
    from sb3_contrib import MaskablePPO

    cfg = Config(
        **MASKED, env_kwargs=dict(action="multi_binary", size=5), n_envs=2, num_workers=0, total_timesteps=64, normalize=True
    )
    model = PPO(cfg.replace(verbose=0), make_env_pool(cfg))
    try:
        model.learn()
        path = export_sb3(model, str(tmp_path / "masked"))
    finally:
        model.close()
    loaded = MaskablePPO.load(path, device="cpu")
    assert loaded.num_timesteps == model.num_timesteps and loaded._n_updates == model.n_updates
    for name, value in model.policy.state_dict().items():
        assert torch.equal(loaded.policy.state_dict()[name], value), name
    ours_adam, theirs_adam = model.optimizer.state_dict()["state"], loaded.policy.optimizer.state_dict()["state"]
    assert all(torch.equal(ours_adam[k]["exp_avg_sq"], theirs_adam[k]["exp_avg_sq"]) for k in ours_adam)
    obs, masks = (
        np.random.default_rng(0).random((4, 10)).astype(np.float32),
        np.tile([True, False, True, True, False, True, True, True, True, False], (4, 1)),
    )
    with torch.no_grad():
        ours = model.policy(torch.as_tensor(obs), deterministic=True, action_masks=torch.as_tensor(masks))[0].numpy()
    assert np.array_equal(loaded.predict(obs, deterministic=True, action_masks=masks)[0], ours)
