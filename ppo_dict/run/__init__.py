"""The experiment services the command lines use: flags to a checked config (``cli``, ``checks``),
the run plan, checkpoints, evaluation, tracking (CSV, wandb, TensorBoard), progress and the Optuna
study behind sweeps. Imports everything below it; the command lines (``ppo_dict/*.py``) import it.
"""
