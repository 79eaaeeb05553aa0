"""A trained model as its users hold it: the policy, the normaliser's statistics, the spaces and the
config; read from a file, written to one, asked for actions (sb3's ``PPO.load(path).predict(obs)``).

    model = Model.from_file("runs/x/best_model.pt")    # or a checkpoint, or a run's model.pt
    action, _ = model.predict(obs, deterministic=True)  # one observation or a batch, as sb3's predict

The trainer's model is ``PPO.model`` (its policy and normaliser, not copies); checkpoints,
evaluation, ``enjoy`` and the ONNX export read and act through this class, and none of them
imports the trainer.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any, Optional

import numpy as np
import torch
from gymnasium import spaces

from ppo_dict.algo.rollout.normalize import Normalizer
from ppo_dict.algo.networks.policy import ActorCritic
from ppo_dict.algo.networks.recurrent_policy import RecurrentActorCritic, build_policy
from ppo_dict.data.recurrent import CELL_STATES
from ppo_dict.core.config import Config
from ppo_dict.core.errors import CheckpointError
from ppo_dict.core.file_effects import announce
from ppo_dict.core.files import FORMAT, atomic_write, config_values, load_model_state, space_mismatch, to_numpy, to_tensors
from ppo_dict.core.reading import one_line
from ppo_dict.data.storage import (
    aligned,
    channel_last_keys,
    obs_layout,
    obs_parts,
    obs_to_tensor,
    policy_view,
    storage_keys,
    vector_obs_shapes,
)
from ppo_dict.envs import GODOT_PREFIX, make_env


def resolve_device(name: str, images: bool = False, cuda_available: Optional[bool] = None) -> torch.device:
    """The torch device ``--device name`` means for a policy that takes images or not.

    ``auto`` keeps sb3's numbers where it can: MLP policies stay on the CPU (where PPO is also
    faster, and bit-exact with sb3; sb3 warns about the GPU for them), image policies (NatureCNN,
    dicts with images) go to CUDA when a GPU is present (``cuda_available``: None probes torch).
    """
    if name != "auto":
        return torch.device(name)
    if cuda_available is None:
        cuda_available = torch.cuda.is_available()
    return torch.device("cuda" if images and cuda_available else "cpu")


def build_normalizer(cfg: Config, observation_space: spaces.Space, n_envs: int) -> Optional[Normalizer]:
    """sb3 ``VecNormalize`` statistics for every Box vector key (uint8 images and the integer
    observations of Discrete, MultiDiscrete and MultiBinary keys are left alone: sb3's
    ``norm_obs_keys`` can only name Box keys), or None."""
    if not cfg.normalize:
        return None
    return Normalizer(
        vector_obs_shapes(observation_space),
        n_envs,
        cfg.norm_obs,
        cfg.norm_reward,
        cfg.clip_obs,
        cfg.clip_reward,
        cfg.vecnorm_gamma,
        cfg.norm_epsilon,
    )


@dataclass
class Model:
    """``policy`` and ``normalizer`` (None without ``--normalize``; its statistics are read, never
    updated, here) for ``observation_space`` and ``action_space`` (the env's own: channel-last
    images as the env gives them), built from ``cfg``, trained for ``num_timesteps``."""

    cfg: Config
    policy: ActorCritic
    normalizer: Optional[Normalizer]
    observation_space: spaces.Space
    action_space: spaces.Space
    num_timesteps: int = 0

    # ------------------------------------------------------------------ files
    def state(self) -> dict[str, Any]:
        """What a model file holds of the model (a checkpoint adds the training state: Adam,
        counters, RNG states, episode buffers): tensors and plain values only."""
        return {
            "format": FORMAT,
            "policy": self.policy.state_dict(),
            "normalizer": None if self.normalizer is None else to_tensors(self.normalizer.state_dict()),
            "num_timesteps": self.num_timesteps,
            "observation_space": str(self.observation_space),
            "action_space": str(self.action_space),
            "config": config_values(self.cfg),
        }

    def load(self, policy_state: dict[str, Any], normalizer_state: Optional[dict[str, Any]], source: str) -> None:
        """Load saved weights (and the normaliser's statistics, numpy) into this model's own policy and
        normaliser, in place; weights that do not fit are a :class:`CheckpointError` naming ``source``."""
        try:
            self.policy.load_state_dict(policy_state)
        except (RuntimeError, ValueError, KeyError) as exc:
            raise CheckpointError(f"{source}: the saved policy does not fit the config ({type(exc).__name__}: {exc})") from exc
        if self.normalizer is not None and normalizer_state is not None:
            saved = {key: np.shape(rms["mean"]) for key, rms in normalizer_state["obs_rms"].items()}
            ours = {key: rms.mean.shape for key, rms in self.normalizer.obs_rms.items()}
            if any(saved.get(key) != shape for key, shape in ours.items()):
                raise CheckpointError(
                    f"{source}: the saved normaliser's statistics {saved} (key: shape) do not fit this model's {ours}"
                )
            self.normalizer.load_state_dict(normalizer_state)

    def save(self, path: str) -> str:
        """Write :meth:`state` to ``path`` atomically (:meth:`from_file` reads it; training cannot
        resume from it: it holds no optimiser); returns ``path``."""
        atomic_write(path, lambda f: torch.save(self.state(), f))
        return path

    @classmethod
    def from_state(
        cls, state: dict[str, Any], observation_space: spaces.Space, action_space: spaces.Space, source: str
    ) -> "Model":
        """The model in a loaded file's ``state`` for an env with these spaces (on the CPU, in eval
        mode); spaces that differ from the saved ones, or weights that do not fit, are a :class:`CheckpointError`."""
        mismatch = space_mismatch(state, observation_space, action_space)
        if mismatch:
            raise CheckpointError(f"{source}: {mismatch}")
        cfg = saved_config(state, source)
        model = cls(
            cfg,
            build_policy(cfg, observation_space, action_space),
            build_normalizer(cfg, observation_space, 1),
            observation_space,
            action_space,
            int(state["num_timesteps"]),
        )
        model.load(state["policy"], to_numpy(state["normalizer"]), source)
        model.policy.eval()
        return model

    @classmethod
    def from_file(cls, path: str, env: Any = None) -> "Model":
        """The model in a model file, checkpoint or run directory (its ``model.pt``), for ``env``
        (default: one env built from the saved config to read the spaces, then closed)."""
        state = load_model_state(path)
        if env is not None:
            return cls.from_state(state, env.observation_space, env.action_space, path)
        cfg = saved_config(state, path)
        announce(path, cfg, typed=(), dry_run=False)  # what its config imports or launches, said before it is
        env = saved_env(gym_env_spec(cfg, path), path)
        try:
            return cls.from_state(state, env.observation_space, env.action_space, path)
        finally:
            env.close()

    # ------------------------------------------------------------------ actions
    @property
    def device(self) -> torch.device:
        return self.policy.value_net.weight.device

    @property
    def recurrent(self) -> bool:
        """An LSTM policy (sb3-contrib's RecurrentPPO): it acts from states the caller carries (:meth:`predict`)."""
        return isinstance(self.policy, RecurrentActorCritic)

    def policy_input(self, batch: dict[str, np.ndarray]) -> Any:
        """A batch of observations as the env wrote them -> the policy's tensors: normalised with the frozen
        statistics, laid out as fresh tensors, channel-last images seen as ``[B, C, H, W]`` (sb3's ``VecTransposeImage``)."""
        batch = dict(batch)
        if self.normalizer is not None:
            batch.update(self.normalizer.normalize_obs(batch))  # frozen: a pure function of the statistics
        batch = aligned(batch)  # laid out as a fresh tensor, wherever the env's or the normaliser's array starts
        return obs_to_tensor(
            policy_view(batch, self._channel_last, isinstance(self.observation_space, spaces.Dict)), self.device
        )

    @torch.no_grad()
    def predict_batch(
        self, batch: dict[str, np.ndarray], deterministic: bool = True, masks: Optional[np.ndarray] = None
    ) -> np.ndarray:
        """The actions the env gets for a batch of observations ``{key: [B, *shape]}`` as the env
        wrote them (:func:`~ppo_dict.data.storage.obs_layout`'s keys and dtypes); ``[B, *action_shape]``.

        :meth:`policy_input`'s tensors; the Gaussian mean or a sample (clipped to the action bounds, as sb3's
        ``predict``), or the most probable or a sampled discrete action; ``masks`` (``[B, mask_dim]``,
        masked policies): only valid actions, as sb3-contrib's ``predict(..., action_masks=...)``.
        A recurrent model acts from zero states here, each observation a new episode (:meth:`predict_recurrent` carries them).
        """
        if self.recurrent:
            return self.predict_recurrent(batch, None, None, deterministic, masks)[0]
        action_masks = None if masks is None else torch.as_tensor(masks, device=self.device)
        actions = (
            self.policy(self.policy_input(batch), deterministic=deterministic, action_masks=action_masks)[0].cpu().numpy()
        )
        return self.policy.action_spec.to_env(actions)  # Box: clipped to the bounds, as sb3's predict

    @torch.no_grad()
    def predict_recurrent(
        self,
        batch: dict[str, np.ndarray],
        state: Any,
        episode_start: Any,
        deterministic: bool,
        masks: Optional[np.ndarray] = None,
    ) -> tuple[np.ndarray, tuple[np.ndarray, ...]]:
        """sb3-contrib's ``RecurrentActorCriticPolicy.predict`` for a batch of ``B`` observations: ``(actions,
        (h, c))`` (a GRU's ``(h,)``), the actor's states after the step, float32 ``[n_layers, B, hidden]``. ``state``: those
        before it (None: zeros); ``episode_start`` ``[B]``: where an episode starts, its states zeroed first (None: nowhere);
        ``masks`` ``[B, mask_dim]`` (a masked policy): only the valid actions."""
        n = len(next(iter(batch.values())))
        policy: RecurrentActorCritic = self.policy  # type: ignore[assignment]
        cell = CELL_STATES[policy.rnn_type]
        if state is None:
            state = (
                np.zeros(policy.lstm_hidden_state_shape[:1] + (n,) + policy.lstm_hidden_state_shape[2:], np.float32),
            ) * len(cell)
        hx = tuple(torch.tensor(np.asarray(s), dtype=torch.float32, device=self.device) for s in state)
        shape = (policy.lstm_actor.num_layers, n, policy.lstm_actor.hidden_size)
        if len(hx) != len(cell) or any(h.shape != shape for h in hx):
            raise ValueError(
                f"state: shapes {[tuple(h.shape) for h in hx]}; expected "
                f"{'(h, c)' if len(cell) == 2 else '(h,) (a GRU)'}, each (n_lstm_layers={shape[0]}, n_envs={n}, "
                f"lstm_hidden_size={shape[2]})"
            )
        starts = np.zeros(n, dtype=bool) if episode_start is None else np.asarray(episode_start).reshape(n)
        starts = torch.tensor(starts, dtype=torch.float32, device=self.device)
        action_masks = None if masks is None else torch.as_tensor(masks, device=self.device)
        actions, states = policy.act(
            self.policy_input(batch),
            hx,
            starts,  # type: ignore[arg-type]
            deterministic,
            action_masks,
        )
        return self.policy.action_spec.to_env(actions.cpu().numpy()), tuple(s.cpu().numpy() for s in states)

    def predict(
        self,
        observation: Any,
        state: Any = None,
        episode_start: Any = None,
        deterministic: bool = False,
        action_masks: Optional[np.ndarray] = None,
    ) -> tuple[np.ndarray, Optional[tuple[np.ndarray, np.ndarray]]]:
        """sb3's ``predict``: ``(actions, state)`` for one observation as the env returns it, or a batch (each
        array with a leading batch dimension), with sb3's and sb3-contrib's arguments. Stochastic unless
        ``deterministic``, as sb3's default.

        A recurrent model is sb3-contrib's ``RecurrentPPO.predict``: ``state`` is the actor's ``(h, c)``
        returned by the previous call (None: zeros), ``episode_start`` flags each env whose episode starts
        with this observation (its states are zeroed first); the states after the step are returned. Other
        models return ``None`` and ignore both, as sb3's ``PPO.predict``."""
        batch, vectorized = self._as_batch(observation)
        masks = (
            None if action_masks is None else np.asarray(action_masks, dtype=bool).reshape(len(next(iter(batch.values()))), -1)
        )
        if self.recurrent:
            actions, states = self.predict_recurrent(batch, state, episode_start, deterministic, masks)
            return (actions if vectorized else actions[0]), states
        actions = self.predict_batch(batch, deterministic, masks)
        return (actions if vectorized else actions[0]), None

    @cached_property
    def _channel_last(self) -> frozenset[str]:
        return channel_last_keys(self.observation_space)

    @cached_property
    def _keys(self) -> dict[str, tuple[tuple[int, ...], tuple[int, ...], np.dtype, spaces.Space]]:
        """``{key: (one observation's shape as the env gives it, stored shape, dtype, leaf space)}``
        (a Discrete key: a scalar, stored as ``(1,)``)."""
        leaves = storage_keys(self.observation_space)
        return {
            key: (() if isinstance(leaves[key], spaces.Discrete) else shape, shape, dtype, leaves[key])
            for key, (shape, dtype) in obs_layout(self.observation_space).items()
        }

    def _as_batch(self, observation: Any) -> tuple[dict[str, np.ndarray], bool]:
        """``({key: [B, *shape]}, vectorized)`` in the storage's dtypes; sb3's ``is_vectorized_observation``
        tells one observation from a batch (a Discrete key: a scalar or ``[B]``)."""
        parts = obs_parts(self.observation_space, observation)
        arrays = {key: np.asarray(parts[key]) for key in self._keys}
        verdicts = set()
        for key, arr in arrays.items():
            single_shape, _, _, leaf = self._keys[key]
            if arr.shape == single_shape:
                verdicts.add(False)
            elif arr.shape[1:] == single_shape:
                verdicts.add(True)
            else:
                raise ValueError(
                    f"observation {key!r}: shape {arr.shape}; expected {single_shape} or (n_envs, *{single_shape}) for {leaf}"
                )
        if len(verdicts) != 1:
            raise ValueError("observation: some keys are batches and others single observations")
        vectorized = verdicts.pop()
        return {
            key: np.asarray(arr, dtype=self._keys[key][2]).reshape(-1, *self._keys[key][1]) for key, arr in arrays.items()
        }, vectorized


def saved_config(state: dict[str, Any], source: str) -> Config:
    """The config of a loaded model file (``load_model_state`` checked that it reads), refused with
    :class:`CheckpointError` naming each setting out of its range (a run never saves such a config)."""
    cfg = Config.from_dict(state["config"])
    if cfg.problems():
        raise CheckpointError(f"{source}: its config is not one a run saves: {'; '.join(cfg.problems())}")
    return cfg


def saved_env(spec: Any, source: str) -> Any:
    """``make_env(spec)`` for a model file's config; an env that cannot be made is a :class:`CheckpointError` naming it."""
    try:
        return make_env(spec)
    except Exception as exc:  # noqa: BLE001 (a file's env: whatever gymnasium or the env's module raises)
        raise CheckpointError(f"{source}: its config's env {spec.label} cannot be made: {type(exc).__name__}: {exc}") from exc


def gym_env_spec(cfg: Config, path: str) -> Any:
    """The ``EnvSpec`` of a model file's config ``cfg`` if this process can build its env to read the model's
    spaces or play it. A model trained on a Godot game is refused with :class:`CheckpointError` (before the
    game is looked for): its env is the game, which the trainer's worker pool runs (``main_ppo_godot``), not
    an env ``make_env`` builds here; an env that cannot be resolved here is refused naming why."""
    from ppo_dict.vec import env_spec  # the saved config's env, as the run built it

    if cfg.env == GODOT_PREFIX or cfg.env.startswith(GODOT_PREFIX + "_"):
        raise CheckpointError(
            f"{path}: trained on the Godot game {cfg.env}, which is played through the trainer's worker "
            f"pool (python -m ppo_dict.main_ppo_godot), not built as a gymnasium env here: enjoy and the "
            f"ONNX export take models of gymnasium envs"
        )
    try:
        return env_spec(cfg)
    except Exception as exc:  # noqa: BLE001 (a file's env: whatever resolving its name raises)
        raise CheckpointError(f"{path}: its config's env {cfg.env!r} cannot be made here: {one_line(exc)}") from exc
