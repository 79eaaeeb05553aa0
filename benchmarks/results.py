"""Returns reached on standard tasks with rl-zoo's PPO settings: ppo_dict beside sb3, for the results page.

Each run trains one env id as rl-zoo trains it (``benchmarks/zoo_setup.py``: the installed rl_zoo3's ``ppo.yml``
entry through the command line's parser; its ``n_envs``, ``n_timesteps``, schedules, ``policy_kwargs``,
``normalize``, ``env_wrapper`` and ``frame_stack``; another version's entry where rl_zoo3 has none of the id's
own, named), with ``stable_baselines3.PPO`` and ``make_vec_env`` or with ``ppo_dict.PPO`` and ``make_vec_env``:
the imports changed, nothing else. It records ``rollout/ep_rew_mean`` after every rollout, then evaluates the
final policy as rl-zoo's benchmark does (deterministic, stochastic on Atari; as many episodes as rl-zoo's
published row counted, else ``--eval_episodes``) with sb3's ``evaluate_policy`` on a fresh env normalised
with the run's final statistics.

Rows go to ``--out`` (default ``benchmarks/results/learning/``): ``final.csv`` (one row a run) and ``curves.csv``
(one row a rollout), each row with the commit and host that made it. A run writes a checkpoint to ``--work``
every ``--checkpoint_every`` seconds; ``--resume`` skips the runs ``final.csv`` holds and continues a stopped one
from its checkpoint (its row says where: the envs restart there, cutting the episodes in flight).

    python benchmarks/results.py --envs Pendulum-v1 --seeds 0,1,2 --libs ppo_dict,sb3
    python benchmarks/results.py --envs HalfCheetah-v5 --seeds 0 --libs sb3 --steps 200000 --eval_episodes 0
    python benchmarks/results.py --envs all --dry_run        # every ppo.yml entry: reproduced, or why not
    python benchmarks/results.py --check                     # sb3's and ppo_dict's curves, seed by seed
    python benchmarks/results.py --plot                      # docs/img/results.png
    python benchmarks/results.py --merge runs/other/out      # another --out folder's runs, into --out's CSVs
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
import time
from typing import Any, Optional

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from benchmarks.zoo_setup import ZooEntryError, ZooSetup, make_envs, published, zoo_entries, zoo_setup  # noqa: E402
from benchmarks.results_rows import read_rows, write_both  # noqa: E402

OUT = os.path.join(ROOT, "benchmarks", "results", "learning")
WORK = os.path.join(ROOT, "runs", "results")
FINAL_FIELDS = [
    "env",
    "zoo_entry",
    "lib",
    "seed",
    "planned",
    "timesteps",
    "budget",
    "eval_mean",
    "eval_std",
    "eval_episodes",
    "eval_mode",
    "last_ep_rew_mean",
    "wall_s",
    "resumed_at",
    "commit",
    "host",
    "date",
    "run",
]
CURVE_FIELDS = ["env", "lib", "seed", "commit", "timesteps", "ep_rew_mean", "run"]
LIBS = ("ppo_dict", "sb3")


def commit() -> str:
    """The repository's commit, with ``+`` when tracked files have changes; ``BENCH_COMMIT`` where the code runs from
    a copy of a commit's tree outside git (as the benchmarks take it), so that edits beside a long run do not touch it."""
    if os.environ.get("BENCH_COMMIT"):
        return os.environ["BENCH_COMMIT"]
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT, capture_output=True, text=True
    ).stdout
    return head + ("+" if dirty.strip() else "")


def host() -> str:
    """The CPU's model name and count (the wall times' context)."""
    from benchmarks.harness import cpu_name

    return f"{cpu_name()}, {os.cpu_count()} cpus"


def libraries(lib: str) -> tuple[Any, Any]:
    """``(PPO, make_vec_env)`` of ``lib``: the one import a script changes."""
    if lib == "sb3":
        from stable_baselines3 import PPO
        from stable_baselines3.common.env_util import make_vec_env
    else:
        from ppo_dict import PPO, make_vec_env
    return PPO, make_vec_env


def vec_normalize(env: Any) -> Any:
    """The ``VecNormalize`` in ``env``'s wrapper chain, or None."""
    from stable_baselines3.common.vec_env import VecNormalize

    while env is not None and not isinstance(env, VecNormalize):
        env = getattr(env, "venv", None)
    return env


class Checkpoint:
    """A run's files under ``--work``: ``state.json`` (the commit point: counters, curve, the last 100 episodes,
    wall time, resume points) naming the model zip and the ``VecNormalize`` statistics written before it."""

    def __init__(self, work: str, env: str, lib: str, seed: int, planned: int):
        self.dir = os.path.join(work, env, f"{lib}-seed{seed}-{planned}")

    def state(self) -> Optional[dict[str, Any]]:
        path = os.path.join(self.dir, "state.json")
        if not os.path.exists(path):
            return None
        with open(path) as f:
            return json.load(f)

    def save(self, model: Any, state: dict[str, Any]) -> None:
        """Write the model and statistics under new names, then ``state.json`` (atomically), then drop the old files."""
        import numpy as np

        os.makedirs(self.dir, exist_ok=True)
        steps = state["timesteps"]
        model.save(os.path.join(self.dir, f"model-{steps}.zip"))
        norm = vec_normalize(model.get_env())
        if norm is not None:
            np.savez(
                os.path.join(self.dir, f"vecnormalize-{steps}.npz"),
                obs_mean=norm.obs_rms.mean,
                obs_var=norm.obs_rms.var,
                obs_count=norm.obs_rms.count,
                ret_mean=norm.ret_rms.mean,
                ret_var=norm.ret_rms.var,
                ret_count=norm.ret_rms.count,
            )
        tmp = os.path.join(self.dir, "state.json.tmp")
        with open(tmp, "w") as f:
            json.dump(state, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, os.path.join(self.dir, "state.json"))
        for name in os.listdir(self.dir):
            if name.split("-")[0] in ("model", "vecnormalize") and name.rsplit("-", 1)[1].split(".")[0] != str(steps):
                os.remove(os.path.join(self.dir, name))

    def restore_statistics(self, env: Any, steps: int) -> None:
        """Put the saved ``VecNormalize`` statistics into ``env``'s."""
        import numpy as np

        norm = vec_normalize(env)
        if norm is None:
            return
        with np.load(os.path.join(self.dir, f"vecnormalize-{steps}.npz"), allow_pickle=False) as saved:
            for rms, prefix in ((norm.obs_rms, "obs"), (norm.ret_rms, "ret")):
                rms.mean, rms.var, rms.count = (
                    saved[f"{prefix}_mean"].copy(),
                    saved[f"{prefix}_var"].copy(),
                    float(saved[f"{prefix}_count"]),
                )

    def remove(self) -> None:
        import shutil

        shutil.rmtree(self.dir, ignore_errors=True)


def progress_callback(state: dict[str, Any], planned: int, budget: int, checkpoint: Checkpoint, every: float) -> Any:
    """sb3's callback (for either library) that records ``ep_rew_mean`` after each rollout into ``state``, stops
    training once ``planned`` steps are done (the schedules still those of rl-zoo's whole budget), writes a
    checkpoint every ``every`` seconds (0: never) between rollouts, and puts a resumed run's episodes back."""
    import numpy as np
    from stable_baselines3.common.callbacks import BaseCallback

    class Progress(BaseCallback):
        def _on_training_start(self) -> None:
            self.saved_at = time.perf_counter()
            if state["episodes"]:  # a resumed run: the last 100 episodes before the stop, as ep_rew_mean saw them
                buffer = self.model.ep_info_buffer
                buffer.clear()
                buffer.extend({"r": r, "l": length, "t": t} for r, length, t in state["episodes"])

        def _on_step(self) -> bool:
            # A part of the budget: the first step after the rollout that reached the target ends learn (that
            # step's rollout dropped). The whole budget: learn ends as sb3's does, after the rollout that passes it.
            return planned >= budget or state["timesteps"] < planned

        def _on_rollout_start(self) -> None:
            if every and self.num_timesteps > state["saved"] and time.perf_counter() - self.saved_at >= every:
                state["wall_s"] += time.perf_counter() - self.saved_at
                self.saved_at = time.perf_counter()
                state["episodes"] = [[float(e["r"]), int(e["l"]), float(e["t"])] for e in self.model.ep_info_buffer]
                state["saved"] = self.num_timesteps
                checkpoint.save(self.model, state)

        def _on_rollout_end(self) -> None:
            state["timesteps"] = self.num_timesteps
            episodes = self.model.ep_info_buffer
            if episodes:
                state["curve"].append([self.num_timesteps, float(np.mean([e["r"] for e in episodes]))])

        def _on_training_end(self) -> None:
            state["wall_s"] += time.perf_counter() - self.saved_at

    return Progress()


def train(
    setup: ZooSetup, lib: str, seed: int, planned: int, checkpoint: Checkpoint, every: float
) -> tuple[Any, dict[str, Any]]:
    """Train (or continue) one run to ``planned`` steps; ``(model, state)``."""
    import torch

    PPO, make_vec_env = libraries(lib)
    torch.set_num_threads(1)  # both libraries on one thread: the same arithmetic, and kind to a shared machine
    state = checkpoint.state()
    env = make_envs(setup, make_vec_env, setup.n_envs, seed)
    if state is None:
        state = {
            "timesteps": 0,
            "saved": 0,
            "curve": [],
            "episodes": [],
            "wall_s": 0.0,
            "resumed_at": [],
            "commit": commit(),
            "run": f"{setup.env}-{lib}-s{seed}-{time.strftime('%Y%m%dT%H%M%S')}",
        }
        model = PPO(setup.policy, env, seed=seed, verbose=0, **setup.ppo_kwargs)
    else:
        print(f"resuming {state['run']} at {state['timesteps']:,} steps", flush=True)
        state["resumed_at"].append(state["timesteps"])
        checkpoint.restore_statistics(env, state["timesteps"])
        schedules = {
            name: setup.ppo_kwargs[name]
            for name in ("learning_rate", "clip_range", "clip_range_vf")
            if name in setup.ppo_kwargs
        }
        model = PPO.load(
            os.path.join(checkpoint.dir, f"model-{state['timesteps']}.zip"),
            env=env,
            custom_objects={**schedules, "lr_schedule": schedules.get("learning_rate", 3e-4)},
        )
    if state["timesteps"] < planned:
        model.learn(
            setup.n_timesteps - state["timesteps"],
            callback=progress_callback(state, planned, setup.n_timesteps, checkpoint, every),
            reset_num_timesteps=not state["resumed_at"],
        )
    return model, state


def evaluate(setup: ZooSetup, model: Any, seed: int, episodes: int) -> tuple[float, float]:
    """rl-zoo's benchmark evaluation: ``episodes`` episodes on one fresh env (seed ``10_000 + seed``) built as the
    training env, normalised with the model's final statistics (sb3's ``sync_envs_normalization``)."""
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.evaluation import evaluate_policy
    from stable_baselines3.common.vec_env import sync_envs_normalization

    eval_env = make_envs(setup, make_vec_env, 1, 10_000 + seed, evaluation=True)
    sync_envs_normalization(model.get_env(), eval_env)
    mean, std = evaluate_policy(model, eval_env, n_eval_episodes=episodes, deterministic=setup.deterministic)
    eval_env.close()
    return round(float(mean), 3), round(float(std), 3)


def eval_episodes(setup: ZooSetup, asked: Optional[int]) -> int:
    """``asked``, else as many episodes as rl-zoo's published row counted, else 10."""
    if asked is not None:
        return asked
    row = published(setup.env)
    return row.eval_episodes if row else 10


def run(
    setup: ZooSetup, lib: str, seed: int, planned: int, args: argparse.Namespace
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """One run, trained (or continued), evaluated; ``(final row, curve rows)``. Its checkpoint is removed after."""
    checkpoint = Checkpoint(args.work, setup.env, lib, seed, planned)
    if not args.resume:
        checkpoint.remove()  # a run started afresh: an earlier attempt's checkpoint is not continued
    model, state = train(setup, lib, seed, planned, checkpoint, args.checkpoint_every)
    episodes = eval_episodes(setup, args.eval_episodes)
    mean, std = evaluate(setup, model, seed, episodes) if episodes else ("", "")
    model.get_env().close()
    row = dict(
        env=setup.env,
        zoo_entry=setup.key,
        lib=lib,
        seed=seed,
        planned=planned,
        timesteps=state["timesteps"],
        budget=setup.n_timesteps,
        eval_mean=mean,
        eval_std=std,
        eval_episodes=episodes,
        eval_mode="deterministic" if setup.deterministic else "stochastic",
        last_ep_rew_mean=state["curve"][-1][1] if state["curve"] else "",
        wall_s=round(state["wall_s"], 1),
        resumed_at=";".join(map(str, state["resumed_at"])),
        commit=state["commit"],
        host=host(),
        date=time.strftime("%Y-%m-%d"),
        run=state["run"],
    )
    if commit() != state["commit"]:
        row["commit"] = f"{state['commit']}..{commit()}"  # a run continued on a later commit names both
    curve = [
        dict(env=setup.env, lib=lib, seed=seed, commit=row["commit"], timesteps=t, ep_rew_mean=repr(r), run=state["run"])
        for t, r in state["curve"]
    ]
    return row, curve


def append(path: str, fields: list[str], rows: list[dict[str, Any]]) -> None:
    """Append ``rows`` to the CSV at ``path`` (its header first, when the file is new)."""
    new = not os.path.exists(path)
    with open(path, "a", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields)
        if new:
            writer.writeheader()
        writer.writerows(rows)


def read(path: str) -> list[dict[str, str]]:
    """The rows of the CSV at ``path`` ([] where there is none), validated whole (``results_rows.read_rows``): a regular
    file of at most ``CSV_CAP`` bytes, every column ``results.py`` writes for its kind (``final.csv``, ``curves.csv``)."""
    return read_rows(path, CURVE_FIELDS if os.path.basename(path) == "curves.csv" else FINAL_FIELDS)


def merge(source: str, out: str) -> list[str]:
    """Append ``source``'s runs (``final.csv`` rows, and their ``curves.csv`` rows) that ``out``'s ``final.csv`` does
    not hold, in ``source``'s order; the names of the runs appended. Every row of the four files is validated
    first, then both of ``out``'s files are written, or neither (``results_rows.write_both``)."""
    final, curves = os.path.join(out, "final.csv"), os.path.join(out, "curves.csv")
    held_rows, held_curves = read(final), read(curves)
    source_rows, source_curves = read(os.path.join(source, "final.csv")), read(os.path.join(source, "curves.csv"))
    held = {row["run"] for row in held_rows}
    new = [row for row in source_rows if row["run"] not in held]
    runs = {row["run"] for row in new}
    if new:
        os.makedirs(out, exist_ok=True)
        write_both(
            [
                (final, FINAL_FIELDS, held_rows + new),
                (curves, CURVE_FIELDS, held_curves + [row for row in source_curves if row["run"] in runs]),
            ]
        )
    return [row["run"] for row in new]


def setups(names: list[str]) -> tuple[list[ZooSetup], list[str]]:
    """The setups of ``names`` (``all``: every env entry of ppo.yml) and the problem of each one refused."""
    entries = zoo_entries()
    if names == ["all"]:
        names = [key for key in entries if key not in ("atari", "default")]
    made, problems = [], []
    for name in names:
        try:
            made.append(zoo_setup(name, entries))
        except ZooEntryError as exc:
            problems.append(str(exc))
    return made, problems


def parse_args(argv: Optional[list[str]]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python benchmarks/results.py", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--envs", default="CartPole-v1", help="gymnasium ids, comma-separated (all: every env entry of rl_zoo3's ppo.yml)"
    )
    parser.add_argument("--seeds", default="0,1,2", help="seeds, comma-separated")
    parser.add_argument("--libs", default="ppo_dict,sb3", help="ppo_dict, sb3 or both, comma-separated")
    parser.add_argument(
        "--steps",
        type=int,
        default=None,
        help="stop after this many steps (the first rollout end at or past it), the schedules still those of "
        "rl-zoo's n_timesteps: the first part of a run",
    )
    parser.add_argument(
        "--eval_episodes",
        type=int,
        default=None,
        help="episodes of the final evaluation (default: as many as rl-zoo's published row; 10 without one; 0: none)",
    )
    parser.add_argument(
        "--resume", action="store_true", help="skip the runs final.csv holds; continue stopped ones from their checkpoint"
    )
    parser.add_argument("--checkpoint_every", type=float, default=600.0, help="seconds between checkpoints (0: none)")
    parser.add_argument("--out", default=OUT, help="where final.csv and curves.csv are appended")
    parser.add_argument("--work", default=WORK, help="where runs keep their checkpoints until they finish")
    parser.add_argument(
        "--dry_run", action="store_true", help="print each env's reproduced setup and the runs planned, then exit"
    )
    parser.add_argument(
        "--check", action="store_true", help="compare sb3's and ppo_dict's ep_rew_mean, seed by seed, then exit"
    )
    parser.add_argument("--plot", action="store_true", help="draw docs/img/results.png from --out's curves, then exit")
    parser.add_argument(
        "--merge",
        metavar="DIR",
        default=None,
        help="append the runs of another --out folder (another machine's, "
        "a run made again) that --out's final.csv does not hold, with their curves, then exit; "
        "the tables show the last row of each env, library and seed",
    )
    args = parser.parse_args(argv)
    bad = [lib for lib in args.libs.split(",") if lib not in LIBS]
    if bad:
        parser.error(f"--libs: {', '.join(bad)}: not one of {', '.join(LIBS)}")
    return args


def main(argv: Optional[list[str]] = None) -> int:
    from benchmarks.results_report import check_text, plot

    args = parse_args(argv)
    if args.merge is not None:
        if not os.path.exists(os.path.join(args.merge, "final.csv")):
            print(f"--merge {args.merge}: no final.csv there", file=sys.stderr)
            return 2
        try:
            merged = merge(args.merge, args.out)
        except (OSError, ValueError) as exc:  # a file not read, a row not valid: nothing was written
            print(f"--merge {args.merge}: {exc}; nothing merged", file=sys.stderr)
            return 2
        print("\n".join(f"merged {run}" for run in merged) or f"nothing to merge: {args.out} holds every run of {args.merge}")
        return 0
    if args.plot or args.check:
        try:
            read(os.path.join(args.out, "final.csv")), read(os.path.join(args.out, "curves.csv"))
        except (OSError, ValueError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        if args.plot:
            plot(read(os.path.join(args.out, "curves.csv")), read(os.path.join(args.out, "final.csv")))
        text, differ = check_text(read(os.path.join(args.out, "final.csv")), read(os.path.join(args.out, "curves.csv")))
        print(text if args.check else "", end="")
        return 1 if args.check and differ else 0
    made, problems = setups(args.envs.split(","))
    for problem in problems:
        print(f"cannot reproduce {problem}", file=sys.stderr)
    if args.dry_run:
        for setup in made:
            print(setup.describe())
    if problems or args.dry_run:
        return 1 if problems else 0
    os.makedirs(args.out, exist_ok=True)
    done = {(row["env"], row["lib"], row["seed"], row["planned"]) for row in read(os.path.join(args.out, "final.csv"))}
    for setup in made:
        planned = min(args.steps or setup.n_timesteps, setup.n_timesteps)
        for seed in (int(s) for s in args.seeds.split(",")):
            for lib in args.libs.split(","):
                if args.resume and (setup.env, lib, str(seed), str(planned)) in done:
                    print(f"{setup.env} {lib} seed {seed} ({planned:,} steps): in final.csv already", flush=True)
                    continue
                row, curve = run(setup, lib, seed, planned, args)
                print(", ".join(f"{k}={row[k]}" for k in FINAL_FIELDS), flush=True)
                append(os.path.join(args.out, "final.csv"), FINAL_FIELDS, [row])
                append(os.path.join(args.out, "curves.csv"), CURVE_FIELDS, curve)
                Checkpoint(args.work, setup.env, lib, seed, planned).remove()
    return 0


if __name__ == "__main__":
    sys.exit(main())
