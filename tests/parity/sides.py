"""Run sb3 and ppo_dict side by side on the same settings and record what each did.

Each side returns a :class:`Record`: per rollout, the buffer arrays ``[n_steps, n_envs, ...]``
(captured after GAE, before training flattens them); per log dump, the logged values; and the
final parameters, Adam state and RNG states.
"""

from __future__ import annotations

import dataclasses
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import numpy as np
import pytest
import torch
from stable_baselines3 import PPO as SB3PPO
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.env_util import make_atari_env, make_vec_env
from stable_baselines3.common.logger import KVWriter, Logger as SB3Logger
from stable_baselines3.common.vec_env import VecEnv, VecFrameStack, VecNormalize

from gymnasium import spaces as gym_spaces

from ppo_dict.algo.rollout.collect import TIMING_KEYS
from ppo_dict.algo.ppo import PPO
from ppo_dict.core.config import Config
from ppo_dict.data.masking import masked_backend
from ppo_dict.envs import make_env
from ppo_dict.data.recurrent import STATE_NAMES
from ppo_dict.interop.sb3 import maskable_ppo_kwargs, recurrent_ppo_kwargs, sb3_policy_name, sb3_ppo_kwargs
from ppo_dict.vec import env_spec, probe_env
from ppo_dict.vec.in_process import InProcessEnvPool

BUFFER_FIELDS = ("observations", "actions", "rewards", "episode_starts", "values", "log_probs", "advantages", "returns")
#: wall-clock keys differ between any two runs
UNTIMED = ("time/fps", "time/time_elapsed", *TIMING_KEYS)


@dataclass
class Record:
    rollouts: list[dict[str, Any]] = field(default_factory=list)
    dumps: list[dict[str, Any]] = field(default_factory=list)
    last_logs: dict[str, Any] = field(default_factory=dict)
    params: dict[str, torch.Tensor] = field(default_factory=dict)
    optimizer: dict[str, Any] = field(default_factory=dict)
    torch_rng: Optional[torch.Tensor] = None
    numpy_rng: Any = None
    normalizer: Optional[dict[str, Any]] = None


def _untimed(values: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in values.items() if k not in UNTIMED}


class _Capture(KVWriter):
    def __init__(self, dumps: list):
        self.dumps = dumps

    def write(self, key_values: dict[str, Any], key_excluded: dict, step: int = 0) -> None:
        self.dumps.append(_untimed(dict(key_values)))


class _RolloutCapture(BaseCallback):
    def __init__(self, rollouts: list):
        super().__init__()
        self.rollouts = rollouts

    def _on_step(self) -> bool:
        return True

    def _on_rollout_end(self) -> None:
        buf = self.model.rollout_buffer
        names = (*BUFFER_FIELDS, "action_masks") if hasattr(buf, "action_masks") else BUFFER_FIELDS  # MaskablePPO's buffer
        names = (*names, *STATE_NAMES) if hasattr(buf, STATE_NAMES[0]) else names  # RecurrentPPO's
        self.rollouts.append({name: getattr(buf, name).copy() for name in names})


def build_policies(sb3_cls: type, observation_space: Any, action_space: Any, sb3_kwargs: dict, our_kwargs: dict, seed: int):
    """``(sb3's policy, torch RNG after it, ours, torch RNG after it)``, each built from ``seed``."""
    from ppo_dict.algo.networks.policy import ActorCritic

    torch.manual_seed(seed)
    sb3 = sb3_cls(observation_space, action_space, lambda _: 3e-4, **sb3_kwargs)
    sb3_rng = torch.get_rng_state()
    torch.manual_seed(seed)
    ours = ActorCritic(observation_space, action_space, **our_kwargs)
    return sb3, sb3_rng, ours, torch.get_rng_state()


def make_sb3_venv(cfg: Config, vec_env_cls: Any = None) -> VecEnv:
    """sb3's vec env for ``cfg``. Plain gymnasium envs are made by sb3 itself (so channel-last
    images take sb3's VecTransposeImage path), Atari games by sb3's ``make_atari_env`` and frame
    stacking by sb3's ``VecFrameStack``; pixel envs come from our renderer (frames stacked in it)."""
    spec = env_spec(cfg)
    if spec.pixel is not None:
        return make_vec_env(lambda: make_env(spec), n_envs=cfg.num_envs, seed=cfg.seed, vec_env_cls=vec_env_cls)
    if spec.atari is not None:
        venv = make_atari_env(
            spec.gym_id,
            n_envs=cfg.num_envs,
            seed=cfg.seed,
            wrapper_kwargs=dataclasses.asdict(spec.atari),
            env_kwargs=spec.kwargs,
            vec_env_cls=vec_env_cls,
        )
    else:
        venv = make_vec_env(spec.gym_id, n_envs=cfg.num_envs, seed=cfg.seed, env_kwargs=spec.kwargs, vec_env_cls=vec_env_cls)
    return VecFrameStack(venv, spec.frame_stack) if spec.frame_stack > 1 else venv


def make_sb3(cfg: Config) -> SB3PPO:
    """sb3's PPO on :func:`make_sb3_venv`'s envs (with ``VecNormalize`` when asked)."""
    venv = make_normalized_venv(cfg)
    return SB3PPO(sb3_policy_name(venv.observation_space, cfg.model), venv, verbose=0, **sb3_ppo_kwargs(cfg))


def make_maskable(cfg: Config, vec_env_cls: Any = None) -> Any:
    """sb3-contrib's ``MaskablePPO`` on :func:`make_normalized_venv`'s envs (``ppo_dict.interop.sb3.maskable_ppo_kwargs``)."""
    from sb3_contrib import MaskablePPO

    venv = make_normalized_venv(cfg, vec_env_cls)
    return MaskablePPO(sb3_policy_name(venv.observation_space, cfg.model), venv, verbose=0, **maskable_ppo_kwargs(cfg))


def make_recurrent(cfg: Config, vec_env_cls: Any = None) -> Any:
    """sb3-contrib's ``RecurrentPPO`` on :func:`make_normalized_venv`'s envs
    (``ppo_dict.interop.sb3.recurrent_ppo_kwargs``)."""
    from sb3_contrib import RecurrentPPO

    venv = make_normalized_venv(cfg, vec_env_cls)
    return RecurrentPPO(sb3_policy_name(venv.observation_space, cfg.model), venv, verbose=0, **recurrent_ppo_kwargs(cfg))


def make_normalized_venv(cfg: Config, vec_env_cls: Any = None) -> VecEnv:
    """:func:`make_sb3_venv`, in ``VecNormalize`` when ``cfg.normalize``."""
    venv = make_sb3_venv(cfg, vec_env_cls)
    if cfg.normalize:
        space = venv.observation_space
        # ppo_dict normalises the Box vector keys and leaves uint8 images and integer spaces alone
        keys = (
            [k for k, sub in space.spaces.items() if isinstance(sub, gym_spaces.Box) and sub.dtype != np.uint8]
            if isinstance(space, gym_spaces.Dict)
            else None
        )
        norm_obs = cfg.norm_obs and (isinstance(space, gym_spaces.Box) or bool(keys))
        venv = VecNormalize(
            venv,
            norm_obs=norm_obs,
            norm_reward=cfg.norm_reward,
            clip_obs=cfg.clip_obs,
            clip_reward=cfg.clip_reward,
            gamma=cfg.vecnorm_gamma,
            norm_obs_keys=keys,
        )
    return venv


def run_sb3(cfg: Config) -> Record:
    return learn_sb3(make_sb3(cfg), cfg.total_timesteps, cfg.log_interval)


def learn_sb3(model: SB3PPO, total_timesteps: int, log_interval: int = 1) -> Record:
    """``model.learn(total_timesteps)`` (sb3's defaults otherwise), recording what :class:`Record` holds."""
    rec = Record()
    logger = SB3Logger(folder=None, output_formats=[_Capture(rec.dumps)])
    model.set_logger(logger)
    model.learn(total_timesteps, callback=_RolloutCapture(rec.rollouts), log_interval=log_interval)
    rec.last_logs = _untimed(dict(logger.name_to_value))
    rec.params = {k: v.clone() for k, v in model.policy.state_dict().items()}
    rec.optimizer = model.policy.optimizer.state_dict()
    rec.torch_rng, rec.numpy_rng = torch.get_rng_state(), np.random.get_state()
    if isinstance(model.get_env(), VecNormalize):
        venv = model.get_env()
        obs_rms = getattr(venv, "obs_rms", {})
        obs_rms = obs_rms if isinstance(obs_rms, dict) else {"obs": obs_rms}
        rec.normalizer = {
            "obs": {k: (r.mean, r.var, r.count) for k, r in obs_rms.items()},
            "ret_mean": venv.ret_rms.mean,
            "ret_var": venv.ret_rms.var,
            "ret_count": venv.ret_rms.count,
            "returns": venv.returns,
        }
    model.get_env().close()
    return rec


class RecordingPPO(PPO):
    """ppo_dict's PPO, recording each rollout as sb3's buffer holds it (after GAE, before the update)."""

    rollouts: list

    def record_rollout(self, model: PPO) -> None:
        s = self.storage
        obs = s.as_policy_input({k: v[: s.n_steps].copy() for k, v in s.obs.items()})
        self.rollouts.append(
            {
                "observations": obs,
                "actions": s.actions.copy(),
                "rewards": s.rewards.copy(),
                "episode_starts": s.episode_starts.copy(),
                "values": s.values.copy(),
                "log_probs": s.log_probs.copy(),
                "advantages": s.advantages.copy(),
                "returns": s.returns.copy(),
            }
        )
        if s.lstm_states is not None:  # RecurrentPPO's buffer: the states before each step
            self.rollouts[-1].update({name: s.lstm_states.rollout(name) for name in s.lstm_states.names})  # a GRU: its two
        if s.action_masks is not None:  # MaskablePPO's buffer holds them as float32
            self.rollouts[-1]["action_masks"] = s.action_masks[: s.n_steps].astype(np.float32)

    def learn(self, *args, **kwargs) -> "RecordingPPO":
        return super().learn(*args, on_rollout=self.record_rollout, **kwargs)


def make_ours(cfg: Config, pool=None) -> RecordingPPO:
    backend = probe_env(env_spec(cfg)) if pool is None else None
    pool = pool or InProcessEnvPool(masked_backend(backend) if cfg.action_masks else backend, cfg.num_envs, cfg.n_steps)
    # sb3's side runs on the CPU (sb3_ppo_kwargs); "auto" would send an image policy to a GPU where one is present
    model = RecordingPPO(cfg.replace(verbose=0, device="cpu"), pool)
    model.rollouts = []
    return model


def run_ours(cfg: Config, pool=None, prepare: Optional[Callable[[PPO], None]] = None) -> Record:
    """Train ppo_dict on ``cfg``; ``prepare(model)`` runs between construction and ``learn``."""
    rec = Record()
    model = make_ours(cfg, pool)
    if prepare is not None:
        prepare(model)
    model.logger.writers.append(lambda values, step: rec.dumps.append(_untimed(values)))
    try:
        model.learn()
    finally:
        model.close()
    rec.rollouts = model.rollouts
    rec.last_logs = _untimed(dict(model.logger.current))
    rec.params = {k: v.clone() for k, v in model.policy.state_dict().items()}
    rec.optimizer = model.optimizer.state_dict()
    rec.torch_rng, rec.numpy_rng = torch.get_rng_state(), np.random.get_state()
    if model.normalizer is not None:
        n = model.normalizer
        rec.normalizer = {
            "obs": {k: (r.mean, r.var, r.count) for k, r in n.obs_rms.items()},
            "ret_mean": n.ret_rms.mean,
            "ret_var": n.ret_rms.var,
            "ret_count": n.ret_rms.count,
            "returns": n.returns,
        }
    return rec


def run_both(cfg: Config, pool=None, prepare: Optional[Callable[[PPO], None]] = None) -> tuple[Record, Record]:
    """``(sb3's record, ppo_dict's)`` of ``cfg`` (ppo_dict's on ``pool`` when given; ``prepare``: as :func:`run_ours`),
    sb3's warnings silenced."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return run_sb3(cfg), run_ours(cfg, pool=pool, prepare=prepare)


def policy_step_of(model: PPO, sharded: bool) -> None:
    """``run_ours``'s ``prepare``: the rollouts' policy step must be where ``sharded`` says (each process its own envs'
    rows, or the main process every env's); skips where the start probe kept it central on this CPU, saying why."""
    line = model.collector.policy_line
    if sharded and model.collector.shard is None:
        model.close()
        if "start probe" in line:
            pytest.skip(f"on this CPU: {line}")
        pytest.fail(f"the policy step stayed central: {line}")
    assert (model.collector.shard is not None) == sharded, line


# ------------------------------------------------------------------------------------- comparisons
def assert_same_value(a: Any, b: Any, what: str) -> None:
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b), f"{what} differs"
    elif isinstance(a, dict):
        assert isinstance(b, dict) and list(a) == list(b), f"{what}: keys {list(a)} != {list(b)}"
        for k in a:
            assert_same_value(a[k], b[k], f"{what}[{k!r}]")
    elif isinstance(a, (list, tuple)) and not isinstance(a, str):
        assert len(a) == len(b), f"{what}: length {len(a)} != {len(b)}"
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same_value(x, y, f"{what}[{i}]")
    elif isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        a, b = np.asarray(a), np.asarray(b)
        assert a.dtype == b.dtype and a.shape == b.shape, f"{what}: {a.dtype}{a.shape} != {b.dtype}{b.shape}"
        assert np.array_equal(a, b, equal_nan=True), (
            f"{what}: max abs diff {np.nanmax(np.abs(a.astype(float) - b.astype(float)))}"
        )
    elif isinstance(a, float) and np.isnan(a):
        assert isinstance(b, float) and np.isnan(b), f"{what}: {a!r} != {b!r}"
    else:
        assert a == b, f"{what}: {a!r} != {b!r}"


def assert_same_record(sb3: Record, ours: Record) -> None:
    """Exact equality of everything recorded (no tolerance)."""
    assert len(sb3.rollouts) == len(ours.rollouts) > 0
    for i, (a, b) in enumerate(zip(sb3.rollouts, ours.rollouts)):
        assert ("action_masks" in a) == ("action_masks" in b), f"rollout {i}: masks recorded on one side only"
        assert (STATE_NAMES[0] in a) == (STATE_NAMES[0] in b), f"rollout {i}: LSTM states recorded on one side only"
        names = (*BUFFER_FIELDS, "action_masks") if "action_masks" in a else BUFFER_FIELDS
        for name in (*names, *STATE_NAMES) if STATE_NAMES[0] in a else names:
            assert_same_value(a[name], b[name], f"rollout {i} {name}")
    assert len(sb3.dumps) == len(ours.dumps) > 0
    for i, (a, b) in enumerate(zip(sb3.dumps, ours.dumps)):
        assert_same_value(dict(sorted(a.items())), dict(sorted(b.items())), f"log dump {i}")
    assert_same_value(dict(sorted(sb3.last_logs.items())), dict(sorted(ours.last_logs.items())), "last train logs")
    assert_same_value(sb3.params, ours.params, "final parameters")
    assert_same_value(sb3.optimizer, ours.optimizer, "final Adam state")
    assert_same_value(sb3.torch_rng, ours.torch_rng, "torch RNG state")
    assert_same_value(list(sb3.numpy_rng), list(ours.numpy_rng), "numpy RNG state")
    if sb3.normalizer is not None or ours.normalizer is not None:
        assert_same_value(sb3.normalizer, ours.normalizer, "VecNormalize statistics")
