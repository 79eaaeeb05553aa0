"""The settings of how a run runs: the worker processes, the system and the output, the run directory, evaluation
and tracking.

The second half of :class:`ppo_dict.core.config.Config`'s fields, after
:class:`ppo_dict.core.learning_settings.LearningSettings`' (this class inherits them, so that the fields keep their
order: a field's place is its flag's place in ``--help`` and its key's in config.json).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

from ppo_dict.core.fields import option as _opt, whole_number as _int
from ppo_dict.core.learning_settings import LearningSettings
from ppo_dict.core.parse import none_or, parse_bool, parse_packages, parse_words

MP_METHODS = ("forkserver", "spawn", "fork")
PROGRESS_MODES = ("auto", "bar", "lines", "none")
WANDB_MODES = ("online", "offline", "disabled")
MAX_TIMEOUT = 2_000_000.0  # seconds: poll(2) takes at most 2**31-1 ms (24.8 days)
inf = math.inf


@dataclass(frozen=True)
class RunSettings(LearningSettings):
    """How a run runs: processes, threads, output, checkpoints, evaluation, tracking (documented in their ``help``
    text)."""

    # Worker processes
    num_workers: Optional[int] = _opt(
        None,
        "env worker processes, this process counted as one where it steps a share "
        "(main_steps_envs): 2 is one worker process beside it; 0 steps every env in this "
        "process. n_envs is split over them unevenly where it does not divide",
        none_or(int),
        "workers",
        range=(0, inf),
        none="every usable CPU, from the affinity mask "
        "and any cgroup CPU quota: one worker "
        "process per CPU but the one this process "
        "keeps, every CPU where it steps no env; "
        "0 for one env, or on one CPU",
    )
    envs_per_worker: Optional[int] = _opt(
        None,
        "envs each worker steps in turn, all equal: n_envs = num_workers x "
        "envs_per_worker (with n_envs alone, num_workers = n_envs / envs_per_worker)",
        none_or(int),
        "workers",
        range=(1, inf),
        none="n_envs split over num_workers as evenly as whole envs allow, 256 over 15 worker processes: 17 or 16 each",
    )
    mp_method: str = _opt("forkserver", f"worker start method: {' | '.join(MP_METHODS)}", str, "workers", choices=MP_METHODS)
    main_steps_envs: bool = _opt(
        True,
        "the main process steps some envs itself instead of waiting (one process fewer; same "
        "numbers; the start line names them): a crash in one of them (a segfault in an env's "
        "native code) ends the whole run (--resume auto continues it), where a worker's is a "
        "WorkerDiedError; False is the isolation choice, every env in a worker process",
        parse_bool,
        "workers",
    )
    main_envs: Optional[int] = _opt(
        None,
        "with main_steps_envs: how many envs the main process steps, the rest split over the worker processes",
        none_or(int),
        "workers",
        range=(0, inf),
        none="envs_per_worker where given, else a worker's share less half an env per worker "
        "process, as it runs the policy and wakes each worker before it steps its own: 4 + 4 "
        "of 8 envs beside one worker, 9 of 256 beside 15 workers of 17/16",
    )
    spin_wait_us: Optional[float] = _opt(
        None,
        "microseconds a process waiting for another (a worker for its next command, "
        "the main process for the workers' answers) keeps looking, yielding the CPU "
        "between looks, before it sleeps: waking a sleeping process costs 20-90 us on "
        "a VM, on every rollout step's critical path",
        none_or(float),
        "workers",
        range=(0.0, 1e6),
        none="1000 where the worker processes and the main process each "
        "have a physical core, else 0, as a look takes a core another "
        "process needs; 0: sleep at once; the numbers are the same "
        "either way",
    )
    shard_policy: bool = _opt(
        True,
        "each process that steps envs (the workers, and the main process for its share) samples "
        "their actions itself, from the parameters in shared memory and the step's random numbers "
        "drawn by the main process in sb3's order, so the policy step stops being every step's "
        "serial part; used where a start probe finds each process's rows equal to the whole "
        "batch's bit for bit on this CPU (the start line says which and why), else the main "
        "process samples every env's; the numbers are sb3's either way",
        parse_bool,
        "workers",
    )
    double_buffer: bool = _opt(
        False,
        "two halves of the envs alternate: the policy samples one half's actions while the "
        "workers step the other (faster where the policy is costly; deterministic, not "
        "bit-exact with sb3)",
        parse_bool,
        "workers",
    )
    step_timeout: float = _opt(
        60.0,
        "seconds one env step or reset may take before it is declared hung and the run ends: in "
        "a worker (WorkerTimeoutError), or in the main process (EnvTimeoutError, raised in the "
        "hung call by a watchdog thread; a call stuck in C code that never returns to Python "
        "ends the process 2 s later without saving; C code that also holds the GIL stops every "
        "thread of the process: a guard process SIGKILLs the run 1 s after that, exit status "
        "137)",
        float,
        "workers",
        range=(0.0, MAX_TIMEOUT, True, False),
    )
    oversubscribe: bool = _opt(
        False,
        "allow more worker processes (num_workers) or torch threads than 4x the CPUs this "
        "process may run on (its affinity mask, a cgroup CPU quota): slow envs (games that wait "
        "on rendering or a network) may want many more workers than cores; without it such a "
        "layout is refused",
        parse_bool,
        "workers",
    )

    # System and output
    device: str = _opt(
        "auto",
        "torch device: auto | cpu | cuda | cuda:N (auto: cpu for MLP policies, bit-exact with sb3; "
        "cuda for image policies when a GPU is present)",
        str,
        "system",
    )
    cuda_graphs: bool = _opt(
        False,
        "replay each rollout policy step (forward, sampling, log-prob, value) as a CUDA graph "
        "captured per batch size: one launch instead of dozens for small networks; a CUDA device "
        "only, feed-forward policies without gSDE; not bit-exact with sb3 (no CUDA run is)",
        parse_bool,
        "system",
    )
    torch_threads: int = _opt(
        1,
        "torch threads in the main process while building the model and collecting rollouts (1 keeps "
        "results bit-exact with sb3)",
        int,
        "system",
        range=(1, inf),
    )
    update_threads: Optional[int] = _opt(
        None,
        "torch threads during the update, while the workers are idle",
        none_or(int),
        "system",
        range=(1, inf),
        none="the physical cores if one epoch of the run's first "
        "update gives the same bits with them as with "
        "torch_threads, else torch_threads; torch_threads "
        "without a trial where other processes keep the CPUs "
        "busy, for fewer than 10 epochs, and for a recurrent "
        "model, whose update shapes change between updates",
    )
    log_interval: int = _opt(1, "print the log table every this many rollouts", int, "system", range=(1, inf))
    stats_window_size: int = _opt(
        100,
        "the last episodes rollout/ep_rew_mean and the other rollout/* means are taken over (sb3's stats_window_size)",
        int,
        "system",
        range=(1, inf),
    )
    verbose: int = _opt(1, "0: summary line only, 1: sb3's log tables", int, "system")
    save_path: Optional[str] = _opt(None, "directory to write the trained model into", none_or(str), "system")
    export_sb3: Optional[str] = _opt(
        None,
        "write a .zip that stable_baselines3.PPO.load() loads (and rl-zoo's vecnormalize.pkl beside it)",
        none_or(str),
        "system",
    )
    hyperparams: Optional[tuple[str, ...]] = _opt(
        None,
        "rl-zoo's hyperparameters: a file (this repository's "
        "hyperparams/ppo.yml) or rl_zoo3 (the installed rl-zoo's own ppo.yml; "
        "ppo_lstm.yml with a recurrent model), whose entry for the env sets "
        "the defaults; and key:value overrides of them, as rl-zoo's "
        "--hyperparams takes them (n_epochs:5 "
        'policy_kwargs:"dict(net_arch=[64, 64])"); the flags typed win over '
        "both",
        parse_words,
        "system",
    )
    progress: str = _opt(
        "auto",
        f"progress display: {' | '.join(PROGRESS_MODES)} (auto: a bar on a terminal, plain lines otherwise)",
        str,
        "system",
        choices=PROGRESS_MODES,
    )

    # Run directory, checkpoints and resume
    run_dir: Optional[str] = _opt(
        None,
        "where this run writes config, CSV log, checkpoints, evaluations, videos, plots",
        none_or(str),
        "run",
        none="runs/<env>__<seed>__<time>",
    )
    save_freq: int = _opt(
        0,
        "write a checkpoint every this many env steps (0: only at the end and on Ctrl-C/SIGTERM)",
        _int,
        "run",
        range=(0, inf),
    )
    save_every_minutes: float = _opt(
        0.0,
        "also write a checkpoint once this many minutes of wall time have passed since the "
        "last one, at the next update's end (0: off; under torchrun rank 0's clock decides "
        "for every rank)",
        float,
        "run",
        range=(0.0, inf),
    )
    keep_checkpoints: int = _opt(3, "keep the newest K checkpoints", int, "run", range=(1, inf))
    resume: Optional[str] = _opt(
        None,
        "continue from a run directory (its newest valid checkpoint) or a checkpoint file; "
        "auto: from --run_dir if it holds a checkpoint, else start fresh (requeued jobs)",
        none_or(str),
        "run",
    )
    overwrite: bool = _opt(
        False,
        "start this run in a --run_dir that holds an earlier run, removing that run's files "
        "(config, logs, checkpoints, evaluations, videos, branches); without it such a run "
        "directory is refused",
        parse_bool,
        "run",
    )
    trained_agent: Optional[str] = _opt(
        None,
        "start from an sb3 PPO zip (rl-zoo's --trained-agent): its policy, Adam state "
        "and, with vecnormalize.pkl where rl-zoo puts it, its normalisation statistics; "
        "counters start at 0, as in rl-zoo",
        none_or(str),
        "run",
    )
    trust_pickles: bool = _opt(
        False,
        "unpickle the --trained_agent zip's pickled values and its vecnormalize.pkl as sb3 "
        "does, which runs any code they name (only for files you trust); without it they are "
        "read as data, and what cannot be is refused by name. Read from the command line only, "
        "never from a file",
        parse_bool,
        "run",
    )
    plot: bool = _opt(True, "write learning_curve.png into the run directory at the end", parse_bool, "run")
    tensorboard_log: Optional[str] = _opt(
        None, "write TensorBoard event files under DIR/PPO_<n> (as sb3's tensorboard_log)", none_or(str), "run"
    )

    # Evaluation and video
    eval_freq: int = _opt(
        0, "evaluate every this many env steps, checked after each update (0: never)", _int, "eval", range=(0, inf)
    )
    eval_episodes: int = _opt(
        5, "deterministic episodes per evaluation, on a separate env with frozen normalisation", int, "eval", range=(1, inf)
    )
    video: bool = _opt(
        False,
        "record the first episode of each evaluation to an mp4 (MuJoCo needs MUJOCO_GL=egl or osmesa)",
        parse_bool,
        "eval",
    )
    video_length: int = _opt(1000, "at most this many frames per video", int, "eval", range=(1, inf))

    # Experiment tracking (Weights & Biases)
    project: Optional[str] = _opt(None, "wandb project: logging to wandb is on when set", none_or(str), "tracking")
    entity: Optional[str] = _opt(None, "wandb entity (user or team)", none_or(str), "tracking")
    group: Optional[str] = _opt(None, "wandb group (e.g. one per experiment, seeds within it)", none_or(str), "tracking")
    tags: tuple[str, ...] = _opt((), "wandb tags", parse_packages, "tracking")
    run_name: Optional[str] = _opt(None, "wandb run name", none_or(str), "tracking", none="the run directory's name")
    wandb_mode: Optional[str] = _opt(
        None,
        f"{' | '.join(WANDB_MODES)}",
        none_or(str),
        "tracking",
        choices=WANDB_MODES,
        none="$WANDB_MODE, else online if an API key is configured, else offline",
    )
