"""GAE and the PPO update beyond the parity suite: hand-computed GAE, minibatch tensors, the logs' shape."""
import numpy as np
import pytest
import torch
from gymnasium import spaces

from ppo_dict.policy import ActorCritic
from ppo_dict.storage import RolloutStorage
from ppo_dict.update import RolloutTensors, UpdateSettings, compute_gae, explained_variance, ppo_update


def test_gae_by_hand() -> None:
    """T=2, one env, gamma 0.5, lambda 0.5; the episode restarts at step 1 for the second column."""
    rewards = np.array([[1.0, 1.0], [2.0, 2.0]], np.float32)
    values = np.array([[0.5, 0.5], [1.0, 1.0]], np.float32)
    starts = np.array([[1.0, 1.0], [0.0, 1.0]], np.float32)
    adv, ret = compute_gae(rewards, values, starts, np.array([4.0, 4.0], np.float32), np.array([False, True]), 0.5, 0.5)
    # column 0: delta1 = 2 + 0.5*4 - 1 = 3; delta0 = 1 + 0.5*1 - 0.5 = 1; adv0 = 1 + 0.25*3 = 1.75
    # column 1: last step done (no bootstrap): delta1 = 2 - 1 = 1; step 1 starts an episode: adv0 = 1 + 0 - 0.5 = 0.5
    assert adv.tolist() == [[1.75, 0.5], [3.0, 1.0]] and adv.dtype == np.float32
    assert np.array_equal(ret, adv + values)


def test_explained_variance() -> None:
    y = np.array([1.0, 2.0, 3.0], np.float32)
    assert explained_variance(y, y) == 1.0 and np.isnan(explained_variance(y, np.ones(3, np.float32)))
    assert explained_variance(np.zeros(3, np.float32), y) == 0.0


@pytest.mark.parametrize("action_space", [spaces.Discrete(3), spaces.Box(-1, 1, (2,), np.float32)])
def test_minibatch_tensors(action_space) -> None:
    s = RolloutStorage(spaces.Box(-1, 1, (4,), np.float64), action_space, n_steps=3, n_envs=2)
    s.actions[...] = np.arange(s.actions.size).reshape(s.actions.shape)
    batch = RolloutTensors(s.flat_samples(), isinstance(action_space, spaces.Discrete), torch.device("cpu")).take(np.array([5, 0]))
    assert batch.obs.dtype == torch.float64 and batch.obs.shape == (2, 4)  # the buffer's dtype; the forward casts
    if isinstance(action_space, spaces.Discrete):
        assert batch.actions.dtype == torch.int64 and batch.actions.tolist() == [5, 0]  # env 1, step 2 first
    else:
        assert batch.actions.dtype == torch.float32 and batch.actions.shape == (2, 2)
    assert all(t.shape == (2,) for t in (batch.old_values, batch.old_log_prob, batch.advantages, batch.returns))


def test_update_counts_epochs_and_logs_sb3s_keys() -> None:
    torch.manual_seed(0)
    np.random.seed(0)
    policy = ActorCritic(spaces.Box(-1, 1, (3,), np.float32), spaces.Box(-1, 1, (1,), np.float32))
    optimizer = torch.optim.Adam(policy.parameters(), lr=1e-3, eps=1e-5)
    s = RolloutStorage(policy.observation_space, policy.action_space, n_steps=8, n_envs=2)
    rng = np.random.default_rng(0)
    s.env_obs["obs"][...] = rng.normal(size=s.env_obs["obs"].shape)
    s.advantages[...], s.returns[...] = rng.normal(size=(8, 2)), rng.normal(size=(8, 2))
    settings = UpdateSettings(learning_rate=1e-3, clip_range=0.2, clip_range_vf=None, n_epochs=3, batch_size=6,
                              normalize_advantage=True, ent_coef=0.0, vf_coef=0.5, max_grad_norm=0.5, target_kl=None)
    logs, n_updates = ppo_update(policy, optimizer, s, settings, 7, torch.device("cpu"))
    assert n_updates == 10 and logs["train/n_updates"] == 10
    assert list(logs) == ["train/entropy_loss", "train/policy_gradient_loss", "train/value_loss", "train/approx_kl",
                          "train/clip_fraction", "train/loss", "train/explained_variance", "train/std", "train/n_updates", "train/clip_range"]
    assert optimizer.state[policy.log_std]["step"] == 9  # 3 epochs x 3 minibatches of 16 samples (6, 6, 4)
