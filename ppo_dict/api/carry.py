"""What sb3 keeps between ``learn`` calls, and the views of a ``VecNormalize`` the trainer steps around.

**The last observations.** sb3 keeps its own copy of the observations the next rollout starts from
(``_last_obs``), so a script may step or reset the training env between two
``learn(reset_num_timesteps=False)`` calls (``evaluate_policy(model, model.get_env())``) and the next
rollout still acts on that copy, while the envs go on from wherever the script left them. The trainer's
next rollout starts from the storage's first row, which the training vec env's own steps write (they
go through the same pool): :func:`carry_out` copies the row when ``learn`` returns, :func:`carry_in`
writes it back when the next ``learn`` goes on without a reset (MaskablePPO's masks asked of the envs
as they are then, as sb3-contrib asks them at every step), and :func:`last_obs` is sb3's ``_last_obs``
as ``save`` writes it into the zip.

**A VecNormalize around the pool** is not stepped during training (the trainer's normaliser holds its
statistics), so what its own step would set is set here: ``old_obs`` and ``old_reward`` (what
``get_original_obs()`` and ``get_original_reward()`` return) and ``returns``, after each step while a
callback watches (:func:`show_step`), at the reset and when ``learn`` returns.
"""

from __future__ import annotations

from typing import Any, Optional

import numpy as np
import torch
from gymnasium import spaces

from ppo_dict.api.buffer import batch_obs
from ppo_dict.data.masking import METHOD
from ppo_dict.data.storage import OBS_KEY

#: an algorithm of sb3's API (``ppo_dict.api.base.Algorithm``)
Algorithm = Any
Trainer = Any


def carry_out(algorithm: Algorithm, trainer: Trainer) -> None:
    """Copies of the storage's first row (both stages; MaskablePPO's masks): the next rollout's start."""
    s = trainer.storage
    algorithm._carried = {
        "env_obs": {key: arr[0].copy() for key, arr in s.env_obs.items()},
        "obs": {key: arr[0].copy() for key, arr in s.obs.items()},
        "dones": trainer.collector.last_dones.copy(),
    }


def carry_in(algorithm: Algorithm, trainer: Trainer) -> None:
    """The first row :func:`carry_out` copied, back in the storage (a script's steps of the training env may
    have written it since); the envs' masks as they are now; a VecNormalize's returns as its steps left them."""
    carried, s = algorithm._carried, trainer.storage
    if carried is None:
        return
    for stage in ("env_obs", "obs"):
        for key, row in carried[stage].items():
            getattr(s, stage)[key][0] = row
    # sb3-contrib's get_action_masks(env) at each step: the envs' state now
    if s.action_masks is not None and trainer.collector.masking:
        s.action_masks[0] = np.stack(trainer.pool.call("env_method", range(trainer.n_envs), METHOD)).reshape(
            s.action_masks[0].shape
        )
    elif s.action_masks is not None:  # learn(use_masking=False): not asked, the buffer's all-True masks
        s.action_masks[0] = True
    vn = algorithm.envs.vec_normalize
    if vn is not None and trainer.normalizer is not None:
        trainer.normalizer.returns = np.array(vn.returns, dtype=np.float64)


def last_obs(algorithm: Algorithm) -> Optional[Any]:
    """sb3's ``_last_obs``: the observations the next rollout starts from, as the training vec env returned them
    (normalised by its VecNormalize, images channel-first under sb3's VecTransposeImage); None before any ``learn``."""
    carried, trainer = algorithm.__dict__.get("_carried"), algorithm.trainer
    if carried is None or trainer is None:
        return None
    return batch_obs(trainer.storage.as_policy_input(carried["obs"]), algorithm.observation_space, trainer.n_envs)


def last_episode_starts(algorithm: Algorithm) -> Optional[np.ndarray]:
    """sb3's ``_last_episode_starts``: the envs whose episode starts with :func:`last_obs`."""
    carried = algorithm.__dict__.get("_carried")
    return None if carried is None else carried["dones"].copy()


def rnn_states(trainer: Trainer, row: int) -> Any:
    """sb3-contrib's ``RNNStates`` of every env at rollout row ``row`` (row 0 once ``learn`` returned: its
    ``_last_lstm_states``), as copies; a GRU's hold ``(h,)`` where an LSTM's hold ``(h, c)``."""
    from sb3_contrib.common.recurrent.type_aliases import RNNStates

    store = trainer.collector.states
    groups = [store.at(row, g) for g in range(len(store.groups))]
    cells = len(store.pi_names)  # an LSTM's (h, c), a GRU's (h,)
    return RNNStates(
        *(tuple(torch.cat([getattr(g, part)[i] for g in groups], dim=1) for i in range(cells)) for part in ("pi", "vf"))
    )


def raw_obs(algorithm: Algorithm, trainer: Trainer, row: int) -> Any:
    """Row ``row`` of the envs' own observations as the pool's vec env returns them (what a VecNormalize around it
    receives)."""
    space, obs = algorithm.envs.facade.observation_space, trainer.storage.env_obs_at(row)
    return batch_obs(obs if isinstance(space, spaces.Dict) else obs[OBS_KEY], space, trainer.n_envs)


def show_reset(algorithm: Algorithm, trainer: Trainer) -> None:
    """A VecNormalize's ``reset()``: ``old_obs`` the reset observations, ``returns`` zeros; the vec env's ``reset_infos``."""
    vn = algorithm.envs.vec_normalize
    if vn is not None:
        vn.old_obs, vn.returns = raw_obs(algorithm, trainer, 0), np.zeros(trainer.n_envs)
    show_reset_infos(algorithm, trainer)


def show_reset_infos(algorithm: Algorithm, trainer: Trainer, recorded: bool = False) -> None:
    """The pool's vec env's ``reset_infos`` as sb3's ``DummyVecEnv`` keeps them (each env's last reset info, an
    auto-reset's too): the pool's own while it records infos (``recorded``: a callback's step), else asked of the
    runners (one call, where each env lives: at the reset and when ``learn`` returns)."""
    facade = algorithm.envs.facade
    if facade is not None:
        facade.reset_infos = (
            list(trainer.pool.reset_infos) if recorded else trainer.pool.call("reset_infos", range(trainer.n_envs))
        )


def show_step(algorithm: Algorithm, trainer: Trainer, obs_row: int, t: int) -> None:
    """A VecNormalize's ``step_wait`` of rollout step ``t``: ``old_obs`` (the envs' observations in row ``obs_row``),
    ``old_reward`` (their rewards), ``returns`` (the normaliser's)."""
    vn = algorithm.envs.vec_normalize
    if vn is not None:
        vn.old_obs, vn.old_reward = raw_obs(algorithm, trainer, obs_row), trainer.storage.env_rewards[t].copy()
        if trainer.normalizer is not None:
            vn.returns = trainer.normalizer.returns.copy()
