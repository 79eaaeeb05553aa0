"""One frozen dataclass holds every setting; each field's metadata says how to read and check it.

Names and defaults are Stable-Baselines3's (``PPO.__init__``, ``ActorCriticPolicy``,
``VecNormalize``); schedules are written as rl-zoo writes them (``lin_3e-4``). This module is a
leaf of the trainer: the command line (``ppo_dict.run.cli``) is generated from the metadata, what follows
from the settings (derived values, the checks of the values alone) is ``ppo_dict.core.config_rules``, and the
checks that need other modules (the env, the model, rl-zoo files) live in ``ppo_dict.run.checks``.

A ``Config`` built in Python reads its values with the same parsers as the command line
(``Config(net_arch="64,64")`` is ``[64, 64]``; a value no parser reads is a :class:`ConfigError`
at once), and :meth:`Config.problems` lists what is out of range however the config was built.
"""
from __future__ import annotations

import dataclasses
import difflib
import math
import re
from dataclasses import dataclass
from typing import Any, Callable, Optional, Union

from ppo_dict.core.config_rules import RECURRENT_MODELS, RESUME_AUTO, ConfigRules  # noqa: F401  (the first two re-exported)
from ppo_dict.core.errors import ConfigError
from ppo_dict.core.fields import option as _opt, read_value, whole_number as _int
from ppo_dict.core.machine import physical_cores  # noqa: F401  (re-exported: the trainer and benchmarks ask it here)
from ppo_dict.core.parse import (LSTM_KWARGS, NetArch, none_or, parse_bool, parse_kwargs, parse_lstm_kwargs, parse_net_arch,
                                 parse_packages, parse_schedule, parse_words)

ACTIVATIONS = ("tanh", "relu", "elu", "leaky_relu", "gelu", "silu", "selu", "sigmoid")
MODELS = ("mlp", "cnn", "mlp_lstm", "cnn_lstm")
#: ``(n_steps, batch_size)`` when not given: sb3's PPO's, and sb3-contrib's RecurrentPPO's for a recurrent model
ROLLOUT_DEFAULTS = {False: (2048, 64), True: (128, 128)}
MP_METHODS = ("forkserver", "spawn", "fork")
PROGRESS_MODES = ("auto", "bar", "lines", "none")
WANDB_MODES = ("online", "offline", "disabled")
MAX_TIMEOUT = 2_000_000.0  # seconds: poll(2) takes at most 2**31-1 ms (24.8 days)
#: The largest learning rate Adam can take: its first step is ``lr / (1 - beta1) = 10 x lr`` (torch.optim.Adam's
#: ``step_size``), which torch hands to ``addcdiv_`` as a float32 scalar; above float32's largest value / 10 it
#: raises "value cannot be converted to type float without overflow" (sb3's PPO does the same). Below it, a
#: learning rate too large to train diverges into a NonFiniteError, which says so.
MAX_LEARNING_RATE = 3.4028234663852886e38 / 10
inf = math.inf


def schedule_start(value: Union[float, str, Callable[[float], float]]) -> float:
    """The value a schedule starts from: ``lin_<x>``'s x, a function's value at progress 1 (where sb3
    builds Adam with it), a constant itself."""
    if callable(value):
        return float(value(1.0))
    return float(value[4:]) if isinstance(value, str) else float(value)


@dataclass(frozen=True)
class Config(ConfigRules):
    """Every setting of a run. Flags are ``--<field name>``; defaults are sb3's.

    Attributes are documented in their ``help`` text, which is also ``--help``.
    """

    # Environment
    env: str = _opt("gym_Reacher-v2", "environment: a gymnasium id, as rl-zoo takes it (CartPole-v1, Reacher-v2), the gym_ "
                                      "prefix optional (gym_CartPole-v1); <module>:<id> imports the module first; or "
                                      "test_dummy, godot_demo, or godot with --env_kwargs dict(env_path=...)", str, "env")
    gym_packages: tuple[str, ...] = _opt((), "modules to import that register custom envs (as rl-zoo's --gym-packages)",
                                         parse_packages, "env")
    n_envs: Optional[int] = _opt(None, "environments stepped in parallel", none_or(int), "env", range=(1, inf),
                                 none="num_workers x envs_per_worker, or 1")
    seed: Optional[int] = _opt(None, "random seed; env i is first reset with seed+i", none_or(int), "env",
                               range=(0, 2**32 - 1), none="drawn at random and printed")
    total_timesteps: int = _opt(1_000_000, "environment steps to train for (summed over envs)", _int, "env", range=(1, inf))
    env_kwargs: dict[str, Any] = _opt({}, "keyword arguments for making the env, e.g. dict(image_size=64)", parse_kwargs,
                                      "env")
    info_keywords: tuple[str, ...] = _opt((), "info keys recorded at each episode end (rl-zoo's monitor_kwargs info_keywords, "
                                              "sb3 Monitor's) and logged as rollout/<key>, the mean over the last 100 "
                                              "episodes, e.g. is_success,distance", parse_packages, "env")

    # Pixel observations (MuJoCo envs rendered in each worker)
    pixel_obs_wrapper: bool = _opt(False, "observe rendered frames instead of the state (dict observation)", parse_bool,
                                   "pixels")
    # NatureCNN's kernels need 36 pixels
    image_size: int = _opt(84, "frame height and width: rendered pixels, and Atari's screen_size", int, "pixels",
                           range=(36, 4096))
    grayscale: bool = _opt(False, "convert rendered frames to one grey channel (Atari frames are always grey)", parse_bool,
                           "pixels")
    frame_stack: int = _opt(1, "stack the last K observations on the channel axis, in each env (sb3 VecFrameStack)", int,
                            "pixels", range=(1, 64))
    pixel_keep_state: bool = _opt(False, "also observe the state vector, under its own key", parse_bool, "pixels")

    # Atari games (ale-py), sb3 AtariWrapper's arguments and defaults; screen_size is --image_size
    atari_wrapper: bool = _opt(False, "sb3's AtariWrapper in each worker (noop reset, frame skip, life loss, fire reset, "
                                      "84x84 grey, reward clip)", parse_bool, "atari")
    atari_noop_max: int = _opt(30, "AtariWrapper noop_max: at most this many no-ops after a reset (0: none)", int, "atari",
                               range=(0, inf))
    atari_frame_skip: int = _opt(4, "AtariWrapper frame_skip: repeat each action this many frames, max-pooling the last two "
                                    "(1: none)", int, "atari", range=(1, inf))
    atari_terminal_on_life_loss: bool = _opt(True, "AtariWrapper terminal_on_life_loss: a lost life ends the training episode",
                                             parse_bool, "atari")
    atari_clip_reward: bool = _opt(True, "AtariWrapper clip_reward: train on the reward's sign", parse_bool, "atari")
    atari_action_repeat_probability: float = _opt(0.0, "AtariWrapper action_repeat_probability: sticky actions", float,
                                                  "atari", range=(0.0, 1.0))

    # Policy (sb3 ActorCriticPolicy keyword arguments)
    model: str = _opt("mlp", f"policy network: {' | '.join(MODELS)} (the _lstm models are sb3-contrib's RecurrentPPO: an LSTM "
                             f"after the features extractor, Dict observations taking its multi-input form)", str, "policy",
                      choices=MODELS)
    net_arch: Optional[NetArch] = _opt(None, "hidden layers: 64,64 | pi=256,256;vf=256,256 | [256, 256]",
                                       none_or(parse_net_arch), "policy",
                                      none="sb3's: pi=64,64;vf=64,64 for mlp models, no hidden layer after NatureCNN for cnn "
                                           "models")
    activation_fn: str = _opt("tanh", f"activation: {' | '.join(ACTIVATIONS)}", lambda s: str(s).lower().removeprefix("nn."),
                              "policy", choices=ACTIVATIONS)
    ortho_init: bool = _opt(True, "orthogonal initialisation with sb3's gains", parse_bool, "policy")
    log_std_init: float = _opt(0.0, "initial log standard deviation of Gaussian actions", float, "policy",
                               range=(-inf, inf, True, True))
    share_features_extractor: bool = _opt(True, "one features extractor for actor and critic", parse_bool, "policy")
    normalize_images: bool = _opt(True, "divide uint8 images by 255 in the forward pass", parse_bool, "policy")
    full_std: bool = _opt(True, "with use_sde: one std parameter per (latent feature, action) pair, else one per latent "
                                "feature", parse_bool, "policy")
    use_expln: bool = _opt(False, "with use_sde: gSDE's expln() instead of exp() for the std (keeps it above zero, grows it "
                                  "slowly)", parse_bool, "policy")
    squash_output: bool = _opt(False, "with use_sde: squash the actions into [-1, 1] with tanh and rescale them to the action "
                                      "bounds, instead of clipping them (sb3's squash_output)", parse_bool, "policy")

    # Recurrent policies (sb3-contrib RecurrentActorCriticPolicy keyword arguments), with --model mlp_lstm | cnn_lstm
    lstm_hidden_size: Optional[int] = _opt(None, "hidden units of each LSTM layer", none_or(int), "recurrent", range=(1, inf),
                                           none="256, sb3-contrib's default")
    n_lstm_layers: Optional[int] = _opt(None, "stacked LSTM layers", none_or(int), "recurrent", range=(1, 100), none="1")
    shared_lstm: Optional[bool] = _opt(None, "the critic reads the actor's LSTM output (detached) instead of having its own",
                                       none_or(parse_bool), "recurrent", none="False")
    enable_critic_lstm: Optional[bool] = _opt(None, "the critic has an LSTM of its own; with neither this nor shared_lstm the "
                                                    "critic is a Linear layer", none_or(parse_bool), "recurrent", none="True")
    lstm_kwargs: dict[str, Any] = _opt({}, f"keyword arguments of the LSTMs (sb3-contrib's lstm_kwargs), of "
                                           f"{' and '.join(LSTM_KWARGS)}: dict(dropout=0.1)", parse_lstm_kwargs, "recurrent")
    lstm_fast_path: bool = _opt(False, "train each LSTM over whole sequences in one call per minibatch, split at episode "
                                       "starts (sb3-contrib PR 118): RecurrentPPO's algorithm and losses, not its bits "
                                       "(False: its bits, one call per time step where a minibatch has an episode start)",
                                parse_bool, "recurrent")
    rnn_type: Optional[str] = _opt(None, "the recurrent cell: lstm (sb3-contrib's RecurrentPPO) or gru (torch's nn.GRU in the "
                                         "LSTM's places, one state per layer; no library has it, and sb3-contrib cannot read "
                                         "it)", none_or(lambda s: str(s).lower()), "recurrent", choices=("lstm", "gru"),
                                   none="lstm")

    # PPO (sb3 PPO keyword arguments)
    learning_rate: Union[float, str, Callable[[float], float]] = _opt(3e-4, "Adam learning rate, or lin_<initial> for a "
                                                                            "linear schedule", parse_schedule, "ppo",
                                                                      range=(0.0, MAX_LEARNING_RATE, False, True),
                                                                      measure=schedule_start)
    n_steps: Optional[int] = _opt(None, "steps per env per rollout", none_or(int), "ppo", range=(1, inf),
                                  none="2048, sb3 PPO's default; 128 with a recurrent model, RecurrentPPO's")
    batch_size: Optional[int] = _opt(None, "minibatch size in transitions", none_or(int), "ppo", range=(1, inf),
                                     none="64, sb3 PPO's default; 128 with a recurrent model, RecurrentPPO's")
    num_batches: Optional[int] = _opt(None, "minibatches per epoch; overrides batch_size (batch_size = n_steps*n_envs // "
                                            "num_batches)", none_or(int), "ppo")
    n_epochs: int = _opt(10, "epochs over the rollout per update", int, "ppo", range=(1, inf))
    gamma: float = _opt(0.99, "discount factor", float, "ppo", range=(0.0, 1.0))
    gae_lambda: float = _opt(0.95, "GAE lambda", float, "ppo", range=(0.0, 1.0))
    clip_range: Union[float, str, Callable[[float], float]] = _opt(0.2, "PPO clip range, or lin_<initial>", parse_schedule,
                                                                   "ppo", range=(0.0, inf, False, True),
                                                                   measure=schedule_start)
    clip_range_vf: Optional[Union[float, str, Callable[[float], float]]] = _opt(None, "value clip range, or lin_<initial>",
                                                                                none_or(parse_schedule), "ppo",
                                                                                range=(0.0, inf, True, True),
                                                                                measure=schedule_start,
                                                                                none="no value clipping")
    normalize_advantage: bool = _opt(True, "normalise advantages per minibatch", parse_bool, "ppo")
    ent_coef: float = _opt(0.0, "entropy coefficient", float, "ppo", range=(0.0, inf, False, True))
    vf_coef: float = _opt(0.5, "value loss coefficient", float, "ppo", range=(0.0, inf, False, True))
    max_grad_norm: float = _opt(0.5, "gradient norm clip", float, "ppo", range=(0.0, inf, True, True))
    target_kl: Optional[float] = _opt(None, "stop the epochs early when approx_kl > 1.5*target_kl", none_or(float), "ppo",
                                      range=(0.0, inf, True, True), none="never")
    use_sde: bool = _opt(False, "generalized State-Dependent Exploration (gSDE) for Box actions, instead of independent "
                                "Gaussian noise", parse_bool, "ppo")
    action_masks: bool = _opt(False, "invalid-action masking as sb3-contrib's MaskablePPO: the env's action_masks() (directly "
                                     "or through sb3-contrib's ActionMasker) gives each step's valid actions, written by the "
                                     "workers beside the observation (Discrete, MultiDiscrete, MultiBinary actions)",
                              parse_bool, "ppo")
    sde_sample_freq: int = _opt(-1, "with use_sde: draw a new exploration matrix every this many steps (-1: only at the start "
                                    "of each rollout)", int, "ppo", range=(-1, inf))

    # Normalisation (sb3 VecNormalize)
    normalize: bool = _opt(False, "VecNormalize observations and rewards (rl-zoo's normalize: true)", parse_bool, "normalize")
    norm_obs: bool = _opt(True, "with --normalize: normalise observations", parse_bool, "normalize")
    norm_reward: bool = _opt(True, "with --normalize: normalise rewards by the return's std", parse_bool, "normalize")
    clip_obs: float = _opt(10.0, "clip normalised observations to +-clip_obs", float, "normalize",
                           range=(0.0, inf, True, True))
    clip_reward: float = _opt(10.0, "clip normalised rewards to +-clip_reward", float, "normalize",
                              range=(0.0, inf, True, True))
    norm_gamma: Optional[float] = _opt(None, "discount of the normalised return", none_or(float), "normalize",
                                       range=(0.0, 1.0), none="--gamma, as rl-zoo does")
    norm_epsilon: float = _opt(1e-8, "VecNormalize epsilon", float, "normalize", range=(0.0, inf, True, True))

    # Worker processes
    num_workers: Optional[int] = _opt(None, "env worker processes, this process counted as one where it steps a share "
                                            "(main_steps_envs): 2 is one worker process beside it; 0 steps every env in this "
                                            "process. n_envs is split over them unevenly where it does not divide",
                                      none_or(int), "workers", range=(0, inf), none="every usable CPU, from the affinity mask "
                                                                                    "and any cgroup CPU quota: one worker "
                                                                                    "process per CPU but the one this process "
                                                                                    "keeps, every CPU where it steps no env; "
                                                                                    "0 for one env, or on one CPU")
    envs_per_worker: Optional[int] = _opt(None, "envs each worker steps in turn, all equal: n_envs = num_workers x "
                                                "envs_per_worker (with n_envs alone, num_workers = n_envs / envs_per_worker)",
                                          none_or(int), "workers", range=(1, inf), none="n_envs split over num_workers as "
                                                                                        "evenly as whole envs allow, 256 over "
                                                                                        "15 worker processes: 17 or 16 each")
    mp_method: str = _opt("forkserver", f"worker start method: {' | '.join(MP_METHODS)}", str, "workers", choices=MP_METHODS)
    main_steps_envs: bool = _opt(True, "the main process steps some envs itself instead of waiting (one process fewer; same "
                                       "numbers; the start line names them): a crash in one of them (a segfault in an env's "
                                       "native code) ends the whole run (--resume auto continues it), where a worker's is a "
                                       "WorkerDiedError; False is the isolation choice, every env in a worker process",
                                 parse_bool, "workers")
    main_envs: Optional[int] = _opt(None, "with main_steps_envs: how many envs the main process steps, the rest split over "
                                          "the worker processes", none_or(int), "workers", range=(0, inf),
                                    none="envs_per_worker where given, else a worker's share less half an env per worker "
                                         "process, as it runs the policy and wakes each worker before it steps its own: 4 + 4 "
                                         "of 8 envs beside one worker, 9 of 256 beside 15 workers of 17/16")
    spin_wait_us: Optional[float] = _opt(None, "microseconds a process waiting for another (a worker for its next command, "
                                               "the main process for the workers' answers) keeps looking, yielding the CPU "
                                               "between looks, before it sleeps: waking a sleeping process costs 20-90 us on "
                                               "a VM, on every rollout step's critical path", none_or(float), "workers",
                                         range=(0.0, 1e6), none="1000 where the worker processes and the main process each "
                                                                "have a physical core, else 0, as a look takes a core another "
                                                                "process needs; 0: sleep at once; the numbers are the same "
                                                                "either way")
    shard_policy: bool = _opt(True, "each process that steps envs (the workers, and the main process for its share) samples "
                                    "their actions itself, from the parameters in shared memory and the step's random numbers "
                                    "drawn by the main process in sb3's order, so the policy step stops being every step's "
                                    "serial part; used where a start probe finds each process's rows equal to the whole "
                                    "batch's bit for bit on this CPU (the start line says which and why), else the main "
                                    "process samples every env's; the numbers are sb3's either way", parse_bool, "workers")
    double_buffer: bool = _opt(False, "two halves of the envs alternate: the policy samples one half's actions while the "
                                      "workers step the other (faster where the policy is costly; deterministic, not "
                                      "bit-exact with sb3)", parse_bool, "workers")
    step_timeout: float = _opt(60.0, "seconds one env step or reset may take before it is declared hung and the run ends: in "
                                     "a worker (WorkerTimeoutError), or in the main process (EnvTimeoutError, raised in the "
                                     "hung call by a watchdog thread; a call stuck in C code that never returns to Python "
                                     "ends the process 2 s later without saving; C code that also holds the GIL stops every "
                                     "thread of the process: a guard process SIGKILLs the run 1 s after that, exit status "
                                     "137)", float, "workers", range=(0.0, MAX_TIMEOUT, True, False))
    oversubscribe: bool = _opt(False, "allow more worker processes (num_workers) or torch threads than 4x the CPUs this "
                                      "process may run on (its affinity mask, a cgroup CPU quota): slow envs (games that wait "
                                      "on rendering or a network) may want many more workers than cores; without it such a "
                                      "layout is refused", parse_bool, "workers")

    # System and output
    device: str = _opt("auto", "torch device: auto | cpu | cuda | cuda:N (auto: cpu for MLP policies, bit-exact with sb3; "
                               "cuda for image policies when a GPU is present)", str, "system")
    cuda_graphs: bool = _opt(False, "replay each rollout policy step (forward, sampling, log-prob, value) as a CUDA graph "
                                    "captured per batch size: one launch instead of dozens for small networks; a CUDA device "
                                    "only, feed-forward policies without gSDE; not bit-exact with sb3 (no CUDA run is)",
                             parse_bool, "system")
    torch_threads: int = _opt(1, "torch threads in the main process while building the model and collecting rollouts (1 keeps "
                                 "results bit-exact with sb3)", int, "system", range=(1, inf))
    update_threads: Optional[int] = _opt(None, "torch threads during the update, while the workers are idle", none_or(int),
                                         "system", range=(1, inf), none="the physical cores if one epoch of the run's first "
                                                                        "update gives the same bits with them as with "
                                                                        "torch_threads, else torch_threads; torch_threads "
                                                                        "without a trial where other processes keep the CPUs "
                                                                        "busy, for fewer than 10 epochs, and for a recurrent "
                                                                        "model, whose update shapes change between updates")
    log_interval: int = _opt(1, "print the log table every this many rollouts", int, "system", range=(1, inf))
    stats_window_size: int = _opt(100, "the last episodes rollout/ep_rew_mean and the other rollout/* means are taken over "
                                       "(sb3's stats_window_size)", int, "system", range=(1, inf))
    verbose: int = _opt(1, "0: summary line only, 1: sb3's log tables", int, "system")
    save_path: Optional[str] = _opt(None, "directory to write the trained model into", none_or(str), "system")
    export_sb3: Optional[str] = _opt(None, "write a .zip that stable_baselines3.PPO.load() loads (and rl-zoo's "
                                           "vecnormalize.pkl beside it)", none_or(str), "system")
    hyperparams: Optional[tuple[str, ...]] = _opt(None, "rl-zoo's hyperparameters: a file (this repository's "
                                                        "hyperparams/ppo.yml) or rl_zoo3 (the installed rl-zoo's own ppo.yml; "
                                                        "ppo_lstm.yml with a recurrent model), whose entry for the env sets "
                                                        "the defaults; and key:value overrides of them, as rl-zoo's "
                                                        "--hyperparams takes them (n_epochs:5 "
                                                        "policy_kwargs:\"dict(net_arch=[64, 64])\"); the flags typed win over "
                                                        "both", parse_words, "system")
    progress: str = _opt("auto", f"progress display: {' | '.join(PROGRESS_MODES)} (auto: a bar on a terminal, plain lines "
                                 f"otherwise)", str, "system", choices=PROGRESS_MODES)

    # Run directory, checkpoints and resume
    run_dir: Optional[str] = _opt(None, "where this run writes config, CSV log, checkpoints, evaluations, videos, plots",
                                  none_or(str), "run", none="runs/<env>__<seed>__<time>")
    save_freq: int = _opt(0, "write a checkpoint every this many env steps (0: only at the end and on Ctrl-C/SIGTERM)", _int,
                          "run", range=(0, inf))
    save_every_minutes: float = _opt(0.0, "also write a checkpoint once this many minutes of wall time have passed since the "
                                          "last one, at the next update's end (0: off; under torchrun rank 0's clock decides "
                                          "for every rank)", float, "run", range=(0.0, inf))
    keep_checkpoints: int = _opt(3, "keep the newest K checkpoints", int, "run", range=(1, inf))
    resume: Optional[str] = _opt(None, "continue from a run directory (its newest valid checkpoint) or a checkpoint file; "
                                       "auto: from --run_dir if it holds a checkpoint, else start fresh (requeued jobs)",
                                 none_or(str), "run")
    overwrite: bool = _opt(False, "start this run in a --run_dir that holds an earlier run, removing that run's files "
                                  "(config, logs, checkpoints, evaluations, videos, branches); without it such a run "
                                  "directory is refused", parse_bool, "run")
    trained_agent: Optional[str] = _opt(None, "start from an sb3 PPO zip (rl-zoo's --trained-agent): its policy, Adam state "
                                              "and, with vecnormalize.pkl where rl-zoo puts it, its normalisation statistics; "
                                              "counters start at 0, as in rl-zoo", none_or(str), "run")
    trust_pickles: bool = _opt(False, "unpickle the --trained_agent zip's pickled values and its vecnormalize.pkl as sb3 "
                                      "does, which runs any code they name (only for files you trust); without it they are "
                                      "read as data, and what cannot be is refused by name. Read from the command line only, "
                                      "never from a file", parse_bool, "run")
    plot: bool = _opt(True, "write learning_curve.png into the run directory at the end", parse_bool, "run")
    tensorboard_log: Optional[str] = _opt(None, "write TensorBoard event files under DIR/PPO_<n> (as sb3's tensorboard_log)",
                                          none_or(str), "run")

    # Evaluation and video
    eval_freq: int = _opt(0, "evaluate every this many env steps, checked after each update (0: never)", _int, "eval",
                          range=(0, inf))
    eval_episodes: int = _opt(5, "deterministic episodes per evaluation, on a separate env with frozen normalisation", int,
                              "eval", range=(1, inf))
    video: bool = _opt(False, "record the first episode of each evaluation to an mp4 (MuJoCo needs MUJOCO_GL=egl or osmesa)",
                       parse_bool, "eval")
    video_length: int = _opt(1000, "at most this many frames per video", int, "eval", range=(1, inf))

    # Experiment tracking (Weights & Biases)
    project: Optional[str] = _opt(None, "wandb project: logging to wandb is on when set", none_or(str), "tracking")
    entity: Optional[str] = _opt(None, "wandb entity (user or team)", none_or(str), "tracking")
    group: Optional[str] = _opt(None, "wandb group (e.g. one per experiment, seeds within it)", none_or(str), "tracking")
    tags: tuple[str, ...] = _opt((), "wandb tags", parse_packages, "tracking")
    run_name: Optional[str] = _opt(None, "wandb run name", none_or(str), "tracking", none="the run directory's name")
    wandb_mode: Optional[str] = _opt(None, f"{' | '.join(WANDB_MODES)}", none_or(str), "tracking", choices=WANDB_MODES,
                                     none="$WANDB_MODE, else online if an API key is configured, else offline")

    def __post_init__(self) -> None:
        """Read every value with its flag's parser; a value none can read is refused here, all at once."""
        values, unreadable = read_values(self.to_dict())
        if unreadable:
            raise ConfigError(list(unreadable.values()))
        for name, value in values.items():
            object.__setattr__(self, name, value)
        # A default that depends on the model is settled here, once: the config then holds the value the
        # run uses (config.json, checkpoints, a sweep agent's --n_steps=128 mean the same as a typed one).
        n_steps, batch_size = ROLLOUT_DEFAULTS[self.recurrent]
        object.__setattr__(self, "n_steps", n_steps if self.n_steps is None else self.n_steps)
        object.__setattr__(self, "batch_size", batch_size if self.batch_size is None else self.batch_size)

    @classmethod
    def read(cls, values: dict[str, Any]) -> tuple["Config", dict[str, str]]:
        """``(config, unreadable)``: the config of ``values`` (keyword arguments, or flags as typed)
        with every value its parser cannot read left at its default, and ``{setting: problem}`` for
        those and for names that are not settings. Never raises: ``ppo_dict.run.checks.validate(config,
        unreadable=...)`` lists these problems with every other one, in one :class:`ConfigError`."""
        known = {k: v for k, v in values.items() if k in FIELDS}
        read, unreadable = read_values(known)
        for name in values.keys() - known.keys():
            close = difflib.get_close_matches(name, FIELDS, n=1)
            unreadable[name] = f"{name}: no such setting" + (f" (did you mean {close[0]}?)" if close else "")
        return cls(**read), unreadable

    # ------------------------------------------------------------------ conversions
    def replace(self, **changes: Any) -> "Config":
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> "Config":
        """A config from :meth:`to_dict`'s output (e.g. read back from a checkpoint or JSON);
        keys that are not fields (written by another version) are ignored."""
        return cls(**parse_values(values))


FIELDS: dict[str, dataclasses.Field] = {f.name: f for f in dataclasses.fields(Config)}


def read_values(values: dict[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    """``(read, unreadable)``: each of ``values`` (keys: Config fields) read by its field's parser,
    and ``{field: "field=value: why"}`` for those no parser reads (whatever the parser raised: they
    read text and touch nothing, so any exception means the value cannot be read)."""
    read, unreadable = {}, {}
    for name, value in values.items():
        try:
            read[name] = read_value(FIELDS[name], value)
        except Exception as exc:  # noqa: BLE001 (ValueError, SyntaxError, OverflowError, RecursionError...: all unreadable)
            unreadable[name] = f"{name}={value!r}: {exc}"
    return read, unreadable


def problem_setting(problem: str) -> str:
    """The setting a problem line names first: ``n_envs`` in ``"n_envs=0: must be in [1, inf]"``."""
    return re.split(r"[=:*\s]", problem, maxsplit=1)[0]


def parse_values(values: dict[str, Any]) -> dict[str, Any]:
    """``{field: value read by its parser}`` for the keys of ``values`` that are Config fields."""
    return {k: read_value(FIELDS[k], v) for k, v in values.items() if k in FIELDS}
