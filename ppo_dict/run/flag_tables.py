"""The command line's tables of flags that are not :class:`~ppo_dict.core.config.Config`'s own spellings: rl-zoo's
spellings of settings, the command line's own flags, and rl-zoo's ``train.py`` flags that are no setting here.
``ppo_dict.run.cli`` builds the parser from them and reads what they give.
"""

from __future__ import annotations

from ppo_dict.interop.hyperparams import ZOO_ALGOS

#: rl-zoo's spellings (``rl_zoo3/train.py``) of the flags that mean the same here, after ours in ``--help``
ALIASES: dict[str, tuple[str, ...]] = {
    "total_timesteps": ("-n", "--n-timesteps"),
    "trained_agent": ("-i", "--trained-agent"),
    "eval_freq": ("--eval-freq",),
    "eval_episodes": ("--eval-episodes",),
    "save_freq": ("--save-freq",),
    "log_interval": ("--log-interval",),
    "tensorboard_log": ("-tb", "--tensorboard-log"),
    "gym_packages": ("--gym-packages",),
    "env_kwargs": ("--env-kwargs",),
    "hyperparams": ("-params", "-conf", "--conf-file"),
    "project": ("--wandb-project-name",),
    "entity": ("--wandb-entity",),
    "group": ("--wandb-group",),
    "tags": ("-tags", "--wandb-tags"),
}
#: the flags that are the command line's own, not settings (not saved with a run): ``{name: help}``
DRY_RUN_HELP = (
    "check the config (every problem, the machine's resources included), print the run plan and exit "
    "without starting any process (0: the run would start; 2: it would be refused)"
)
ALGO_HELP = (
    f"rl-zoo's --algo: {' or '.join(ZOO_ALGOS)} (sb3-contrib's RecurrentPPO: a recurrent --model, mlp_lstm unless "
    f"the hyperparameter entry or a flag names one); ppo_dict trains PPO only (MaskablePPO: --action_masks True)"
)
COMMAND_LINE_FLAGS = {"dry_run": DRY_RUN_HELP, "algo": ALGO_HELP}
#: rl-zoo's ``train.py`` flags that are no setting here: ``{name: (spellings, help, default shown)}``, read by
#: :func:`ppo_dict.run.zoo_flags.rl_zoo_flags`
ZOO_FLAGS = {
    "log_folder": (
        ("-f", "--log-folder"),
        "rl-zoo's log folder: the run directory is <folder>/<algo>/<env>_<n>, n one more than the highest there "
        "(as rl-zoo's train.py numbers its runs; --run_dir typed wins)",
        "None: --run_dir's default",
    ),
    "track": (
        ("--track",),
        "rl-zoo's --track: log to wandb, project 'sb3' unless --project (rl-zoo's --wandb-project-name) is typed",
        "False",
    ),
    "vec_env": (
        ("--vec-env",),
        "rl-zoo's VecEnv class: dummy steps every env in this process (--num_workers 0), subproc every env in a "
        "worker process (--main_steps_envs False); the numbers are the same either way",
        "None: the layout's",
    ),
    "num_threads": (
        ("--num-threads",),
        "rl-zoo's --num-threads: N > 0 sets --torch_threads N; 0 or less (rl-zoo's -1) leaves torch its own "
        "count, as rl-zoo does: --torch_threads becomes torch.get_num_threads() (--torch_threads typed wins)",
        "None: --torch_threads' default",
    ),
    "n_eval_envs": (
        ("--n-eval-envs",),
        "rl-zoo's evaluation envs: ppo_dict evaluates in one env (1 only; --eval_episodes sets the episodes)",
        "1",
    ),
}
