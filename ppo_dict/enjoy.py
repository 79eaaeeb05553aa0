"""Replay a trained run: ``python -m ppo_dict.enjoy RUN_DIR [--video] [--episodes 5]``, or as rl-zoo's enjoy finds
a run: ``python -m ppo_dict.enjoy --algo ppo --env CartPole-v1 -f logs`` (a run trained with ``-f logs``).

Loads ``best_model.pt`` (if the run evaluated), else the newest checkpoint, else ``model.pt``; in rl-zoo's own
run folder, its sb3 zip (``best_model.zip``, else ``<env>.zip``) and ``<env>/vecnormalize.pkl``, read as data;
plays deterministic episodes with the saved normalisation statistics frozen (as rl-zoo's
``enjoy`` does with ``vecnormalize.pkl``), prints each return and a JSON line last. Ctrl-C / SIGTERM
ends it cleanly at any point (``ppo_dict.run.startup``: exit 130 / 143, one line, no traceback, no
video left half-written).
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any, Optional

from ppo_dict.run import startup

#: what a stop signal does to a replay (``ppo_dict.run.startup``)
STOPPED = "while replaying: stopped; nothing was written"

if __name__ == "__main__":  # before the imports below take their seconds: a stop signal then ends the start cleanly
    startup.exit_on_stop_signals(STOPPED)

import numpy as np  # noqa: E402 (after the start-up signal handlers)
import torch

from ppo_dict.algo.model import Model, gym_env_spec, saved_config, saved_env
from ppo_dict.core.errors import CheckpointError
from ppo_dict.core.file_effects import announce
from ppo_dict.core.files import load_model_state
from ppo_dict.envs.make import prepare_video
from ppo_dict.run.checkpoint import model_file
from ppo_dict.run.evaluation import VideoWriter, render_spec, run_episodes


def enjoy(
    path: str,
    episodes: int,
    video: bool,
    seed: Optional[int],
    video_dir: Optional[str] = None,
    deterministic: Optional[bool] = None,
) -> dict[str, Any]:
    """Play ``episodes`` with the model in ``path``; returns returns, lengths and the video path.

    ``deterministic`` None: rl-zoo's ``enjoy`` default, stochastic for Atari games and
    deterministic otherwise. Atari episodes are whole games with unclipped rewards
    (``evaluation.run_episodes``).
    """
    if path.endswith(".zip"):  # an sb3 zip (rl-zoo's folders): read as data, its vecnormalize.pkl beside it too
        cfg, make_model, steps = zoo_model(path)
    else:
        state = load_model_state(path)
        cfg, steps = saved_config(state, path), int(state["num_timesteps"])
        make_model = lambda env: Model.from_state(state, env.observation_space, env.action_space, path)  # noqa: E731
    announce(path, cfg, typed=(), dry_run=False)  # what its config imports or launches, said before it is
    if video:
        prepare_video(cfg.env)  # MuJoCo's headless GL backend, pygame without a display
    spec = gym_env_spec(cfg, path)
    env = saved_env(render_spec(spec) if video else spec, path)
    writer = None
    try:
        model = make_model(env)
        if video:
            out = video_dir or os.path.join(os.path.dirname(os.path.abspath(path)), "videos")
            writer = VideoWriter(os.path.join(out, f"enjoy-{steps:012d}.mp4"), env.metadata.get("render_fps", 30))
        if deterministic is None:
            deterministic = not spec.is_atari
        returns, lengths = run_episodes(model, env, episodes, seed, writer, cfg.video_length, deterministic)
        video_path = writer.close() if writer is not None else None
    finally:
        if writer is not None:
            writer.discard()  # a video the replay did not finish (an error, a stop signal): no file is left
        env.close()
    return {
        "model": path,
        "env": cfg.env,
        "num_timesteps": steps,
        "returns": returns,
        "lengths": lengths,
        "mean_reward": float(np.mean(returns)),
        "video": video_path,
    }


def zoo_model(path: str) -> tuple[Any, Any, int]:
    """``(config, the model for an env, timesteps trained)`` of an sb3 PPO zip in rl-zoo's run folder
    ``<folder>/<algo>/<env>_<n>/<env>.zip``: the zip and its ``<env>/vecnormalize.pkl`` read as data, as
    ``--trained_agent`` reads them (``ppo_dict.interop.trained_agent``); the statistics frozen, rewards unnormalised,
    as rl-zoo's enjoy sets its VecNormalize (``training=False``, ``norm_reward=False``)."""
    from ppo_dict.algo.model import build_normalizer
    from ppo_dict.algo.networks.recurrent_policy import build_policy
    from ppo_dict.interop.trained_agent import read_trained_agent
    from ppo_dict.run.cli import read_config

    env_id = zoo_env_of(path)
    agent = read_trained_agent(path, env_id)
    cfg, unreadable = read_config({"env": env_id}, base=agent.saved, pinned=agent.pinned)
    if unreadable:
        raise CheckpointError(f"{path}: its settings do not read as ppo_dict's: {'; '.join(unreadable.values())}")

    def make(env: Any) -> Model:
        policy = build_policy(cfg, env.observation_space, env.action_space)
        model = Model(
            cfg, policy, build_normalizer(cfg, env.observation_space, 1), env.observation_space, env.action_space, agent.steps
        )
        model.load(agent.policy_state, agent.normalizer_state, path)
        policy.eval()
        return model

    return cfg, make, agent.steps


def zoo_env_of(path: str) -> str:
    """The env id of a zip in rl-zoo's run folder (``.../<env>_<n>/<env>.zip`` or ``best_model.zip``): its folder's name
    less ``_<n>``."""
    return os.path.basename(os.path.dirname(os.path.abspath(path))).rpartition("_")[0]


def zoo_zip(run_dir: str, which: str) -> Optional[str]:
    """rl-zoo's model in ``run_dir`` where it holds no ppo_dict model: ``best_model.zip`` (``best``, where the run evaluated),
    else ``<env>.zip``, the final model rl-zoo's enjoy loads by default; None when there is none."""
    if which not in ("best", "last"):
        return None
    names = (["best_model.zip"] if which == "best" else []) + [
        f"{os.path.basename(os.path.normpath(run_dir)).rpartition('_')[0]}.zip"
    ]
    return next((os.path.join(run_dir, name) for name in names if os.path.isfile(os.path.join(run_dir, name))), None)


def zoo_run_dir(parser: Any, args: Any) -> str:
    """The run rl-zoo's ``enjoy.py --algo A --env ID -f FOLDER [--exp-id N]`` means: ``FOLDER/A/ID_N``, the latest
    ``N`` where 0; one argparse error (exit 2) for what does not name one."""
    from ppo_dict.run.zoo_flags import latest_run_id, zoo_env_name

    if args.env is None or args.folder is None:
        parser.error("give the run directory, or rl-zoo's --env ID -f FOLDER (--algo ppo, --exp-id N)")
    env, folder = zoo_env_name(args.env), os.path.join(args.folder, args.algo)
    exp_id = args.exp_id or latest_run_id(folder, env)
    if exp_id <= 0 or not os.path.isdir(os.path.join(folder, f"{env}_{exp_id}")):
        parser.error(f"no run {env}_{exp_id if exp_id > 0 else '<n>'} in {folder}")
    return os.path.join(folder, f"{env}_{exp_id}")


def enjoy_parser() -> Any:
    """The command line's parser: the run and how to replay it, then rl-zoo's enjoy flags (:func:`add_zoo_flags`)."""
    from ppo_dict.run.cli import Option, add_option, command_parser

    parser = command_parser(
        "python -m ppo_dict.enjoy",
        __doc__,
        [
            Option(
                ("run_dir",),
                "the run directory to replay from (or rl-zoo's --env ID -f FOLDER)",
                kwargs={"metavar": "RUN_DIR", "nargs": "?"},
            ),
            Option(
                ("--model",),
                "best | last | a model or checkpoint file (best: best_model.pt where the run evaluated, else the "
                "newest checkpoint, else model.pt)",
                "best",
            ),
            Option(("--episodes",), "episodes to play", 5, kwargs={"type": int}),
            Option(("--seed",), "seed of the first reset", 0, kwargs={"type": int}),
            Option(
                ("--video",),
                "record the first episode to RUN_DIR/videos/enjoy-<steps>.mp4",
                False,
                kwargs={"action": "store_true"},
            ),
        ],
    )
    mode = parser.add_mutually_exclusive_group()  # rl-zoo's enjoy flags; neither: stochastic for Atari only
    add_option(
        mode,
        Option(
            ("--deterministic",),
            "take the most likely action",
            None,
            "None: deterministic except for Atari games, as rl-zoo's enjoy",
            {"dest": "deterministic", "action": "store_const", "const": True},
        ),
    )
    add_option(
        mode,
        Option(
            ("--stochastic",),
            "sample actions",
            None,
            "None: stochastic for Atari games only, as rl-zoo's enjoy",
            {"dest": "deterministic", "action": "store_const", "const": False},
        ),
    )
    add_zoo_flags(parser)
    return parser


def add_zoo_flags(parser: Any) -> None:
    """rl-zoo's ``enjoy.py`` flags, which name the run as rl-zoo finds it (:func:`zoo_run_dir`)."""
    from ppo_dict.run.cli import Option, add_option

    zoo = parser.add_argument_group("rl-zoo's enjoy.py flags: the run <folder>/<algo>/<env>_<exp-id>, as rl-zoo finds it")
    add_option(zoo, Option(("--algo",), "rl-zoo's algorithm folder", "ppo", kwargs={"choices": ["ppo", "ppo_lstm"]}))
    add_option(zoo, Option(("--env",), "the env id of the run", None))
    add_option(
        zoo, Option(("-f", "--folder"), "rl-zoo's log folder (-f of train: python -m ppo_dict.main_ppo ... -f FOLDER)", None)
    )
    add_option(zoo, Option(("--exp-id",), "the run's number n (0: the latest)", 0, kwargs={"type": int}))
    add_option(
        zoo,
        Option(
            ("--no-render",),
            "accepted: nothing is shown on screen here (--video records)",
            False,
            kwargs={"action": "store_true"},
        ),
    )
    add_option(
        zoo,
        Option(
            ("-n", "--n-timesteps"), "rl-zoo's steps to play: refused, as ppo_dict plays whole episodes (--episodes)", None
        ),
    )


def main(argv: Optional[list[str]] = None) -> int:
    parser = enjoy_parser()
    startup.imported()
    args = parser.parse_args(argv)
    if args.n_timesteps is not None:
        parser.error(f"-n {args.n_timesteps}: rl-zoo's enjoy counts timesteps; ppo_dict's plays whole episodes: --episodes N")
    args.run_dir = args.run_dir or zoo_run_dir(parser, args)
    if args.seed < 0 or args.episodes < 1:  # gymnasium refuses a negative seed only at the first reset
        parser.error(f"--seed {args.seed}: must be >= 0" if args.seed < 0 else f"--episodes {args.episodes}: must be >= 1")
    torch.set_num_threads(1)
    try:
        try:
            path = model_file(args.run_dir, args.model)
        except CheckpointError:  # rl-zoo's own folder: its sb3 zip
            path = zoo_zip(args.run_dir, args.model)
            if path is None:
                raise
        result = enjoy(path, args.episodes, args.video, args.seed, os.path.join(args.run_dir, "videos"), args.deterministic)
    except CheckpointError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for i, (ret, length) in enumerate(zip(result["returns"], result["lengths"])):
        print(f"episode {i}: return {ret:.3f}, length {length}")
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
