"""One frozen dataclass holds every setting; the command line is generated from it.

Names and defaults are Stable-Baselines3's (``PPO.__init__``, ``ActorCriticPolicy``,
``VecNormalize``); schedules are written as rl-zoo writes them (``lin_3e-4``).
"""
from __future__ import annotations

import argparse
import dataclasses
import math
import os
import warnings
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Optional, Union

from ppo_dict.errors import ConfigError
from ppo_dict.parse import (
    NetArch,
    none_or,
    parse_bool,
    parse_kwargs,
    parse_net_arch,
    parse_packages,
    parse_schedule,
)

if TYPE_CHECKING:
    from envs import EnvSpec

ACTIVATIONS = ("tanh", "relu", "elu", "leaky_relu", "gelu", "silu", "selu", "sigmoid")
MODELS = ("mlp", "cnn")
MP_METHODS = ("forkserver", "spawn", "fork")
PROGRESS_MODES = ("auto", "bar", "lines", "none")
WANDB_MODES = ("online", "offline", "disabled")


def physical_cores() -> int:
    """Physical CPU cores (distinct (package, core) pairs in /proc/cpuinfo), else os.cpu_count()."""
    try:
        with open("/proc/cpuinfo") as f:
            pairs, package = set(), None
            for line in f:
                name, _, value = line.partition(":")
                name = name.strip()
                if name == "physical id":
                    package = value.strip()
                elif name == "core id":
                    pairs.add((package, value.strip()))
        if pairs:
            return len(pairs)
    except OSError:
        pass
    return os.cpu_count() or 1


# ----------------------------------------------------------------------------------------------
# The configuration


def _opt(default: Any, help: str, parse: Callable[[Any], Any], group: str) -> Any:
    metadata = {"help": help, "parse": parse, "group": group}
    if isinstance(default, dict):
        return field(default_factory=lambda: dict(default), metadata=metadata)
    return field(default=default, metadata=metadata)


@dataclass(frozen=True)
class Config:
    """Every setting of a run. Flags are ``--<field name>``; defaults are sb3's.

    Attributes are documented in their ``help`` text, which is also ``--help``.
    """

    # Environment
    env: str = _opt("gym_Reacher-v2", "environment: gym_<gymnasium id> (gym_Reacher-v2, gym_CartPole-v1), test_dummy, godot_demo, or godot with --env_kwargs dict(env_path=...)", str, "env")
    gym_packages: tuple[str, ...] = _opt((), "modules to import that register custom envs (as rl-zoo's --gym-packages)", parse_packages, "env")
    n_envs: Optional[int] = _opt(None, "environments stepped in parallel (None: num_workers x envs_per_worker, or 1)", none_or(int), "env")
    seed: Optional[int] = _opt(None, "random seed; env i is first reset with seed+i (None: drawn at random and printed)", none_or(int), "env")
    total_timesteps: int = _opt(1_000_000, "environment steps to train for (summed over envs)", lambda s: int(float(s)), "env")
    env_kwargs: dict[str, Any] = _opt({}, "keyword arguments for making the env, e.g. dict(image_size=64)", parse_kwargs, "env")

    # Pixel observations (MuJoCo envs rendered in each worker)
    pixel_obs_wrapper: bool = _opt(False, "observe rendered frames instead of the state (dict observation)", parse_bool, "pixels")
    image_size: int = _opt(84, "rendered frame height and width", int, "pixels")
    grayscale: bool = _opt(False, "convert frames to one grey channel", parse_bool, "pixels")
    frame_stack: int = _opt(1, "stack the last K frames on the channel axis (sb3 VecFrameStack)", int, "pixels")
    pixel_keep_state: bool = _opt(False, "also observe the state vector, under its own key", parse_bool, "pixels")

    # Policy (sb3 ActorCriticPolicy keyword arguments)
    model: str = _opt("mlp", f"policy network: {' | '.join(MODELS)}", str, "policy")
    net_arch: Optional[NetArch] = _opt(None, "hidden layers: 64,64 | pi=256,256;vf=256,256 | [256, 256] (default: sb3's)", none_or(parse_net_arch), "policy")
    activation_fn: str = _opt("tanh", f"activation: {' | '.join(ACTIVATIONS)}", lambda s: str(s).lower().removeprefix("nn."), "policy")
    ortho_init: bool = _opt(True, "orthogonal initialisation with sb3's gains", parse_bool, "policy")
    log_std_init: float = _opt(0.0, "initial log standard deviation of Gaussian actions", float, "policy")
    share_features_extractor: bool = _opt(True, "one features extractor for actor and critic", parse_bool, "policy")
    normalize_images: bool = _opt(True, "divide uint8 images by 255 in the forward pass", parse_bool, "policy")

    # PPO (sb3 PPO keyword arguments)
    learning_rate: Union[float, str] = _opt(3e-4, "Adam learning rate, or lin_<initial> for a linear schedule", parse_schedule, "ppo")
    n_steps: int = _opt(2048, "steps per env per rollout", int, "ppo")
    batch_size: int = _opt(64, "minibatch size", int, "ppo")
    num_batches: Optional[int] = _opt(None, "minibatches per epoch; overrides batch_size (batch_size = n_steps*n_envs // num_batches)", none_or(int), "ppo")
    n_epochs: int = _opt(10, "epochs over the rollout per update", int, "ppo")
    gamma: float = _opt(0.99, "discount factor", float, "ppo")
    gae_lambda: float = _opt(0.95, "GAE lambda", float, "ppo")
    clip_range: Union[float, str] = _opt(0.2, "PPO clip range, or lin_<initial>", parse_schedule, "ppo")
    clip_range_vf: Optional[Union[float, str]] = _opt(None, "value clip range, or lin_<initial> (None: no value clipping)", none_or(parse_schedule), "ppo")
    normalize_advantage: bool = _opt(True, "normalise advantages per minibatch", parse_bool, "ppo")
    ent_coef: float = _opt(0.0, "entropy coefficient", float, "ppo")
    vf_coef: float = _opt(0.5, "value loss coefficient", float, "ppo")
    max_grad_norm: float = _opt(0.5, "gradient norm clip", float, "ppo")
    target_kl: Optional[float] = _opt(None, "stop the epochs early when approx_kl > 1.5*target_kl (None: never)", none_or(float), "ppo")

    # Normalisation (sb3 VecNormalize)
    normalize: bool = _opt(False, "VecNormalize observations and rewards (rl-zoo's normalize: true)", parse_bool, "normalize")
    norm_obs: bool = _opt(True, "with --normalize: normalise observations", parse_bool, "normalize")
    norm_reward: bool = _opt(True, "with --normalize: normalise rewards by the return's std", parse_bool, "normalize")
    clip_obs: float = _opt(10.0, "clip normalised observations to +-clip_obs", float, "normalize")
    clip_reward: float = _opt(10.0, "clip normalised rewards to +-clip_reward", float, "normalize")
    norm_gamma: Optional[float] = _opt(None, "discount of the normalised return (None: --gamma, as rl-zoo does)", none_or(float), "normalize")
    norm_epsilon: float = _opt(1e-8, "VecNormalize epsilon", float, "normalize")

    # Worker processes
    num_workers: Optional[int] = _opt(None, "env worker processes; 0 steps envs in this process (None: physical cores, dividing n_envs)", none_or(int), "workers")
    envs_per_worker: Optional[int] = _opt(None, "envs each worker steps in turn (None: n_envs / num_workers)", none_or(int), "workers")
    mp_method: str = _opt("forkserver", f"worker start method: {' | '.join(MP_METHODS)}", str, "workers")
    main_steps_envs: bool = _opt(True, "the main process steps worker 0's envs itself instead of waiting (one process fewer; same numbers)", parse_bool, "workers")
    step_timeout: float = _opt(60.0, "seconds a worker may take for one step or reset before it is declared hung", float, "workers")

    # System and output
    device: str = _opt("auto", "torch device: auto | cpu | cuda | cuda:N", str, "system")
    torch_threads: int = _opt(1, "torch threads in the main process (1 keeps results bit-exact with sb3)", int, "system")
    log_interval: int = _opt(1, "print the log table every this many rollouts", int, "system")
    verbose: int = _opt(1, "0: summary line only, 1: sb3's log tables", int, "system")
    save_path: Optional[str] = _opt(None, "directory to write the trained model into", none_or(str), "system")
    export_sb3: Optional[str] = _opt(None, "write a .zip that stable_baselines3.PPO.load() loads (and rl-zoo's vecnormalize.pkl beside it)", none_or(str), "system")
    hyperparams: Optional[str] = _opt(None, "rl-zoo hyperparameter file (e.g. ppo.yml); the env's entry sets defaults, explicit flags win", none_or(str), "system")
    progress: str = _opt("auto", f"progress display: {' | '.join(PROGRESS_MODES)} (auto: a bar on a terminal, plain lines otherwise)", str, "system")

    # Run directory, checkpoints and resume
    run_dir: Optional[str] = _opt(None, "where this run writes config, CSV log, checkpoints, evaluations, videos, plots (None: runs/<env>__<seed>__<time>)", none_or(str), "run")
    save_freq: int = _opt(0, "write a checkpoint every this many env steps (0: only at the end and on Ctrl-C/SIGTERM)", lambda s: int(float(s)), "run")
    keep_checkpoints: int = _opt(3, "keep the newest K checkpoints", int, "run")
    resume: Optional[str] = _opt(None, "continue from a run directory (its newest valid checkpoint) or a checkpoint file", none_or(str), "run")
    plot: bool = _opt(True, "write learning_curve.png into the run directory at the end", parse_bool, "run")
    tensorboard_log: Optional[str] = _opt(None, "write TensorBoard event files under DIR/PPO_<n> (as sb3's tensorboard_log)", none_or(str), "run")

    # Evaluation and video
    eval_freq: int = _opt(0, "evaluate every this many env steps, checked after each update (0: never)", lambda s: int(float(s)), "eval")
    eval_episodes: int = _opt(5, "deterministic episodes per evaluation, on a separate env with frozen normalisation", int, "eval")
    video: bool = _opt(False, "record the first episode of each evaluation to an mp4 (MuJoCo needs MUJOCO_GL=egl or osmesa)", parse_bool, "eval")
    video_length: int = _opt(1000, "at most this many frames per video", int, "eval")

    # Experiment tracking (Weights & Biases)
    project: Optional[str] = _opt(None, "wandb project: logging to wandb is on when set", none_or(str), "tracking")
    entity: Optional[str] = _opt(None, "wandb entity (user or team)", none_or(str), "tracking")
    group: Optional[str] = _opt(None, "wandb group (e.g. one per experiment, seeds within it)", none_or(str), "tracking")
    tags: tuple[str, ...] = _opt((), "wandb tags", parse_packages, "tracking")
    run_name: Optional[str] = _opt(None, "wandb run name (None: the run directory's name)", none_or(str), "tracking")
    wandb_mode: Optional[str] = _opt(None, f"{' | '.join(WANDB_MODES)} (None: $WANDB_MODE, else online if an API key is configured, else offline)", none_or(str), "tracking")

    # ------------------------------------------------------------------ derived values
    @property
    def worker_layout(self) -> tuple[int, int, int]:
        """``(n_envs, num_workers, envs_per_worker)``; num_workers 0 means in-process.

        Unset values are derived: W defaults to the largest divisor of n_envs not above the
        physical core count; n_envs defaults to W x E (or 1). Inconsistent values are reported by
        :func:`validate`, which checks ``n_envs == W x E`` for worker layouts.
        """
        n, w, e = self.n_envs, self.num_workers, self.envs_per_worker
        if w == 0:
            return (n or 1), 0, 0
        if w is None:
            if n is None and e is None:
                n = 1
            if n is None:
                w = physical_cores()
            else:
                w = max(d for d in range(1, min(n, physical_cores()) + 1) if n % d == 0)
        if n is None:
            n = w * (e or 1)
        if e is None:
            e = max(1, n // max(w, 1))
        return n, w, e

    @property
    def num_envs(self) -> int:
        return self.worker_layout[0]

    @property
    def rollout_size(self) -> int:
        """Transitions per rollout: ``n_steps * n_envs``."""
        return self.n_steps * self.num_envs

    @property
    def minibatch_size(self) -> int:
        if self.num_batches is not None:
            return max(1, self.rollout_size // self.num_batches)
        return self.batch_size

    @property
    def vecnorm_gamma(self) -> float:
        return self.gamma if self.norm_gamma is None else self.norm_gamma

    def env_spec(self) -> EnvSpec:
        """The checked recipe for this run's envs (raises gymnasium's error for an unknown id)."""
        from envs import PixelOptions, resolve_env_name  # imported here: envs imports gymnasium

        pixel = PixelOptions(self.image_size, self.grayscale, self.frame_stack, self.pixel_keep_state) if self.pixel_obs_wrapper else None
        return resolve_env_name(self.env, self.gym_packages, kwargs=self.env_kwargs, pixel=pixel)

    def replace(self, **changes: Any) -> "Config":
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> "Config":
        """A config from :meth:`to_dict`'s output (e.g. read back from a checkpoint or JSON).

        Each value goes through its flag's parser (lists become tuples, ``"lin_1e-3"`` stays a
        schedule); keys that are not fields (written by another version) are ignored.
        """
        return cls(**parse_values(values))


def parse_values(values: dict[str, Any]) -> dict[str, Any]:
    """``{field: parsed value}`` for the keys of ``values`` that are Config fields."""
    fields = {f.name: f for f in dataclasses.fields(Config)}
    return {k: (None if v is None else fields[k].metadata["parse"](v)) for k, v in values.items() if k in fields}


# ----------------------------------------------------------------------------------------------
# Validation: every problem is collected, then one ConfigError lists them all.


def _in_range(problems: list[str], name: str, value: Any, lo: float, hi: float, lo_open: bool = False, hi_open: bool = False) -> None:
    ok = isinstance(value, (int, float)) and math.isfinite(value)
    if ok:
        ok = (value > lo if lo_open else value >= lo) and (value < hi if hi_open else value <= hi)
    if not ok:
        lo_b, hi_b = ("(" if lo_open else "["), (")" if hi_open else "]")
        problems.append(f"{name}={value!r}: must be in {lo_b}{lo}, {hi}{hi_b}")


def _schedule_start(value: Union[float, str]) -> float:
    return float(value[4:]) if isinstance(value, str) else float(value)


def validate(cfg: Config) -> None:
    """Raise one :class:`ConfigError` listing every invalid setting; warn where sb3 warns.

    Runs before any environment or process is created. Uses no ``assert`` (safe under ``python -O``).
    """
    p: list[str] = []
    inf = math.inf
    if cfg.n_envs is not None:
        _in_range(p, "n_envs", cfg.n_envs, 1, inf)
    if cfg.num_workers is not None:
        _in_range(p, "num_workers", cfg.num_workers, 0, inf)
    if cfg.envs_per_worker is not None:
        _in_range(p, "envs_per_worker", cfg.envs_per_worker, 1, inf)
    if not p:
        n, w, e = cfg.worker_layout
        if w > 0 and n != w * e:
            p.append(f"n_envs={n}: must equal num_workers x envs_per_worker = {w} x {e}; choose n_envs divisible by num_workers={w}")
    if cfg.mp_method not in MP_METHODS:
        p.append(f"mp_method={cfg.mp_method!r}: must be one of {', '.join(MP_METHODS)}")
    _in_range(p, "step_timeout", cfg.step_timeout, 0.0, inf, lo_open=True)
    _in_range(p, "n_steps", cfg.n_steps, 1, inf)
    _in_range(p, "batch_size", cfg.batch_size, 1, inf)
    _in_range(p, "n_epochs", cfg.n_epochs, 1, inf)
    _in_range(p, "total_timesteps", cfg.total_timesteps, 1, inf)
    _in_range(p, "gamma", cfg.gamma, 0.0, 1.0)
    _in_range(p, "gae_lambda", cfg.gae_lambda, 0.0, 1.0)
    _in_range(p, "learning_rate", _schedule_start(cfg.learning_rate), 0.0, inf, lo_open=True, hi_open=True)
    _in_range(p, "clip_range", _schedule_start(cfg.clip_range), 0.0, inf, lo_open=True, hi_open=True)
    if cfg.clip_range_vf is not None:
        _in_range(p, "clip_range_vf", _schedule_start(cfg.clip_range_vf), 0.0, inf, lo_open=True, hi_open=True)
    _in_range(p, "ent_coef", cfg.ent_coef, 0.0, inf, hi_open=True)
    _in_range(p, "vf_coef", cfg.vf_coef, 0.0, inf, hi_open=True)
    _in_range(p, "max_grad_norm", cfg.max_grad_norm, 0.0, inf, lo_open=True, hi_open=True)
    if cfg.target_kl is not None:
        _in_range(p, "target_kl", cfg.target_kl, 0.0, inf, lo_open=True, hi_open=True)
    _in_range(p, "log_std_init", cfg.log_std_init, -inf, inf, lo_open=True, hi_open=True)
    _in_range(p, "clip_obs", cfg.clip_obs, 0.0, inf, lo_open=True, hi_open=True)
    _in_range(p, "clip_reward", cfg.clip_reward, 0.0, inf, lo_open=True, hi_open=True)
    _in_range(p, "norm_epsilon", cfg.norm_epsilon, 0.0, inf, lo_open=True, hi_open=True)
    if cfg.norm_gamma is not None:
        _in_range(p, "norm_gamma", cfg.norm_gamma, 0.0, 1.0)
    _in_range(p, "torch_threads", cfg.torch_threads, 1, inf)
    _in_range(p, "log_interval", cfg.log_interval, 1, inf)
    if cfg.seed is not None:
        _in_range(p, "seed", cfg.seed, 0, 2**32 - 1)
    if cfg.model not in MODELS:
        p.append(f"model={cfg.model!r}: must be one of {', '.join(MODELS)}")
    if cfg.activation_fn not in ACTIVATIONS:
        p.append(f"activation_fn={cfg.activation_fn!r}: must be one of {', '.join(ACTIVATIONS)}")
    if not (cfg.device in ("auto", "cpu", "cuda") or cfg.device.startswith("cuda:")):
        p.append(f"device={cfg.device!r}: must be auto, cpu, cuda or cuda:N")
    if cfg.num_batches is not None:
        _in_range(p, "num_batches", cfg.num_batches, 1, max(1, cfg.rollout_size))
    # sb3 PPO.__init__ asserts these two; we report them with the rest.
    if cfg.normalize_advantage and cfg.minibatch_size <= 1:
        p.append(f"batch_size={cfg.minibatch_size}: must be > 1 when normalize_advantage is True (sb3 issue #440)")
    if cfg.normalize_advantage and cfg.rollout_size <= 1:
        p.append(f"n_steps*n_envs={cfg.rollout_size}: must be > 1 when normalize_advantage is True")
    if cfg.save_path is not None and os.path.isfile(cfg.save_path):
        p.append(f"save_path={cfg.save_path!r}: is a file, must be a directory")
    if cfg.progress not in PROGRESS_MODES:
        p.append(f"progress={cfg.progress!r}: must be one of {', '.join(PROGRESS_MODES)}")
    if cfg.wandb_mode is not None and cfg.wandb_mode not in WANDB_MODES:
        p.append(f"wandb_mode={cfg.wandb_mode!r}: must be one of {', '.join(WANDB_MODES)} or None")
    _in_range(p, "save_freq", cfg.save_freq, 0, inf)
    _in_range(p, "keep_checkpoints", cfg.keep_checkpoints, 1, inf)
    _in_range(p, "eval_freq", cfg.eval_freq, 0, inf)
    _in_range(p, "eval_episodes", cfg.eval_episodes, 1, inf)
    _in_range(p, "video_length", cfg.video_length, 1, inf)
    if cfg.video and cfg.eval_freq == 0:
        p.append("video=True: needs --eval_freq > 0 (videos are recorded during evaluations)")
    if cfg.resume is not None and not os.path.exists(cfg.resume):
        p.append(f"resume={cfg.resume!r}: no such run directory or checkpoint file")
    if cfg.hyperparams is not None:
        from ppo_dict.hyperparams import load_hyperparams  # rl-zoo interop, only when asked for

        p.extend(load_hyperparams(cfg.hyperparams, cfg.env)[1])
    _in_range(p, "image_size", cfg.image_size, 36, 4096)  # NatureCNN's kernels need at least 36 pixels
    _in_range(p, "frame_stack", cfg.frame_stack, 1, 64)
    try:
        spec = cfg.env_spec()
        if cfg.model in MODELS:
            from ppo_dict.policy import model_problem

            p.append(model_problem(cfg.model, spec))
        from envs import is_godot

        if is_godot(spec):  # whole games per worker, timeouts; may launch the game once, briefly
            from envs.godot.pool import config_problems

            p.extend(config_problems(spec, cfg))
    except Exception as exc:  # gymnasium's own text carries the "Did you mean" hint
        p.append(f"env={cfg.env!r}: {exc}")
    p = [problem for problem in p if problem]
    if p:
        raise ConfigError(p)
    if cfg.rollout_size % cfg.minibatch_size > 0:
        warn_truncated_minibatch(cfg.minibatch_size, cfg.n_steps, cfg.num_envs)


def warn_truncated_minibatch(batch_size: int, n_steps: int, n_envs: int) -> None:
    """sb3's warning, word for word (``PPO.__init__``); training then uses the short minibatch."""
    buffer_size = n_envs * n_steps
    warnings.warn(
        f"You have specified a mini-batch size of {batch_size},"
        f" but because the `RolloutBuffer` is of size `n_steps * n_envs = {buffer_size}`,"
        f" after every {buffer_size // batch_size} untruncated mini-batches,"
        f" there will be a truncated mini-batch of size {buffer_size % batch_size}\n"
        f"We recommend using a `batch_size` that is a factor of `n_steps * n_envs`.\n"
        f"Info: (n_steps={n_steps} and n_envs={n_envs})",
        stacklevel=2,
    )


# ----------------------------------------------------------------------------------------------
# Command line


def build_parser(prog: str = "python -m ppo_dict.main_ppo", suppress_defaults: bool = False) -> argparse.ArgumentParser:
    """An argparse parser with one ``--flag`` per :class:`Config` field.

    Booleans accept ``--x``, ``--x True`` and ``--x=False``; optional values accept ``None``.
    Unknown flags are an argparse error (no abbreviations: ``--bacth`` is refused).
    With ``suppress_defaults`` only the flags given appear in the result (to tell them apart).
    """
    parser = argparse.ArgumentParser(prog=prog, allow_abbrev=False, formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    groups: dict[str, argparse._ArgumentGroup] = {}
    for f in dataclasses.fields(Config):
        group = groups.setdefault(f.metadata["group"], parser.add_argument_group(f.metadata["group"]))
        kwargs: dict[str, Any] = dict(default=f.default, help=f.metadata["help"], type=f.metadata["parse"])
        if kwargs["default"] is dataclasses.MISSING:
            kwargs["default"] = f.default_factory()  # type: ignore[misc]
        if f.metadata["parse"] is parse_bool:
            kwargs.update(nargs="?", const=True, metavar="True|False")
        elif f.metadata["parse"] is parse_packages:
            kwargs.update(nargs="*", type=str, metavar="NAME")
        if suppress_defaults:
            kwargs["default"] = argparse.SUPPRESS
        group.add_argument(f"--{f.name}", **kwargs)
    return parser


def explicit_flags(argv: Optional[list[str]]) -> dict[str, Any]:
    """``{field: value}`` for the flags actually given on the command line (parsed)."""
    ns = build_parser(suppress_defaults=True).parse_args(argv)
    return {k: parse_packages(v) if k in ("gym_packages", "tags") else v for k, v in vars(ns).items()}


def config_from_args(argv: Optional[list[str]] = None, base: Optional[dict[str, Any]] = None) -> Config:
    """Parse a command line into a :class:`Config` (not yet validated).

    Precedence, lowest first: sb3's defaults, ``base`` (a resumed checkpoint's config), the
    ``--hyperparams`` file's entry for the env, then the flags actually typed.
    """
    values = vars(build_parser().parse_args(argv))  # argparse exits 2 on unknown flags or bad values
    given = explicit_flags(argv)
    layered: dict[str, Any] = dict(base or {})
    hyperparams_file = given.get("hyperparams", layered.get("hyperparams"))
    if hyperparams_file and "resume" not in given:
        from ppo_dict.hyperparams import load_hyperparams  # rl-zoo interop, only when asked for

        env = given.get("env", layered.get("env", values["env"]))
        layered.update(load_hyperparams(hyperparams_file, env)[0])
    layered.update(given)
    values.update(layered)
    values["gym_packages"], values["tags"] = parse_packages(values["gym_packages"]), parse_packages(values["tags"])
    return Config(**values)
