"""The results page's parts, from ``benchmarks/results.py``'s CSVs: the tables (the docs build draws them), the
check that sb3's and ppo_dict's curves are the same numbers seed by seed, and the figure of the curves.

Each function takes the rows as ``csv.DictReader`` reads ``final.csv`` and ``curves.csv``; where one
``(env, library, seed, planned steps)`` was run more than once, the last row in the file counts.
"""

from __future__ import annotations

import os
import statistics
import sys
from dataclasses import dataclass
from typing import Optional

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from benchmarks.zoo_setup import BENCHMARK_COMMIT, published  # noqa: E402

PLOT = os.path.join(ROOT, "docs", "img", "results.png")
Row = dict[str, str]


def latest(final: list[Row]) -> list[Row]:
    """One row per ``(env, lib, seed, planned)``: the last in the file, in the order the envs first appear."""
    rows: dict[tuple[str, str, str, str], Row] = {}
    for row in final:
        rows[(row["env"], row["lib"], row["seed"], row["planned"])] = row
    return list(rows.values())


def full(row: Row) -> bool:
    """Whether the run trained rl-zoo's whole budget."""
    return row["planned"] == row["budget"]


def curve_of(row: Row, curves: list[Row]) -> list[tuple[int, str]]:
    """``[(timesteps, ep_rew_mean as written)]`` of ``row``'s run."""
    return [(int(c["timesteps"]), c["ep_rew_mean"]) for c in curves if c["run"] == row["run"]]


def first_resume(row: Row) -> Optional[int]:
    return min(int(step) for step in row["resumed_at"].split(";")) if row["resumed_at"] else None


@dataclass
class PairCheck:
    """sb3's run beside ppo_dict's with the same env and seed: ``compared`` rollouts up to step ``to`` (both
    uninterrupted there), ``difference`` the first rollout where the logged ``ep_rew_mean`` differs (None: none)."""

    env: str
    seed: str
    sb3_run: str
    ppo_dict_run: str
    compared: int
    to: int
    difference: Optional[tuple[int, int, str, str]]

    def text(self) -> str:
        where = f"{self.env} seed {self.seed}"
        if self.difference is not None:
            k, step, sb3, ours = self.difference
            return (
                f"{where}: DIFFERENT at rollout {k} (step {step:,}): sb3 {sb3}, ppo_dict {ours} (runs {self.sb3_run}, "
                f"{self.ppo_dict_run})"
            )
        return f"{where}: ep_rew_mean the same number at all {self.compared} rollouts to step {self.to:,}"


def pair_checks(final: list[Row], curves: list[Row]) -> list[PairCheck]:
    """For each sb3 run, the comparison with ppo_dict's run of the same env and seed (its full-budget run if any),
    up to the first point where either was resumed."""
    rows = latest(final)
    checks = []
    for sb3 in (row for row in rows if row["lib"] == "sb3"):
        ours = [row for row in rows if row["lib"] == "ppo_dict" and row["env"] == sb3["env"] and row["seed"] == sb3["seed"]]
        if not ours:
            continue
        ppo = max(ours, key=lambda row: (full(row), int(row["timesteps"])))
        cuts = [step for step in (first_resume(sb3), first_resume(ppo)) if step is not None]
        a, b = curve_of(sb3, curves), curve_of(ppo, curves)
        compared, to, difference = 0, 0, None
        for k, ((step_a, value_a), (step_b, value_b)) in enumerate(zip(a, b), 1):
            if cuts and max(step_a, step_b) > min(cuts):
                break
            if step_a != step_b or float(value_a) != float(value_b):
                difference = (k, step_a, value_a, value_b)
                break
            compared, to = k, step_a
        checks.append(PairCheck(sb3["env"], sb3["seed"], sb3["run"], ppo["run"], compared, to, difference))
    return checks


def check_text(final: list[Row], curves: list[Row]) -> tuple[str, bool]:
    """``(one line per pair, whether any pair differs)``."""
    checks = pair_checks(final, curves)
    return "".join(check.text() + "\n" for check in checks), any(check.difference for check in checks)


def steps_text(steps: int) -> str:
    return f"{steps / 1e6:g}M" if steps >= 1_000_000 else f"{steps / 1e3:g}k"


def seed_text(row: Row) -> str:
    """``"score (seed N)"``, saying where the run was resumed, and its steps where it trained part of the budget."""
    resumed = (
        f", resumed at {', '.join(steps_text(int(s)) for s in row['resumed_at'].split(';'))}" if row["resumed_at"] else ""
    )
    part = "" if full(row) else f", {steps_text(int(row['planned']))} of {steps_text(int(row['budget']))} steps"
    return f"{float(row['eval_mean']):g} (seed {row['seed']}{resumed}{part})"


def returns_table(rows: list[Row]) -> list[str]:
    """One line per env: ppo_dict's seeds, sb3's, rl-zoo's published score."""
    out = [
        "| env (rl_zoo3 entry) | steps | ppo_dict: mean +/- std over seeds | ppo_dict per seed | sb3 | "
        f"rl-zoo's published score (benchmark.md at {BENCHMARK_COMMIT}) | evaluation |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for env in dict.fromkeys(row["env"] for row in rows):
        runs = [row for row in rows if row["env"] == env]
        ours = sorted(
            (row for row in runs if row["lib"] == "ppo_dict" and full(row) and row["eval_mean"]),
            key=lambda row: int(row["seed"]),
        )
        sb3 = sorted((row for row in runs if row["lib"] == "sb3"), key=lambda row: int(row["seed"]))
        scores = [float(row["eval_mean"]) for row in ours]
        mean = (
            (
                f"**{statistics.fmean(scores):.1f} +/- {statistics.pstdev(scores):.1f}** ({len(scores)} "
                f"seed{'s' * (len(scores) != 1)})"
            )
            if scores
            else "-"
        )
        sb3_text = (
            "; ".join(
                seed_text(row)
                if full(row) and row["eval_mean"]
                else f"first {steps_text(int(row['timesteps']))} steps, seed {row['seed']}: curve only"
                for row in sb3
            )
            or "-"
        )
        zoo = published(env)
        zoo_text = (
            f"{zoo.mean:g} +/- {zoo.std:g} ({zoo.env}, {zoo.n_timesteps} steps, {zoo.eval_episodes} episodes)"
            if zoo
            else "none published"
        )
        entry = runs[0]["zoo_entry"]
        name = env if entry == env else f"{env} ({entry})"
        # without a run of the whole budget, those of part of it (as far as the machines allowed): each said so, in no mean
        part = (
            []
            if ours
            else sorted(
                (row for row in runs if row["lib"] == "ppo_dict" and row["eval_mean"]), key=lambda row: int(row["seed"])
            )
        )
        shown = ours + part
        evaluation = f"{shown[0]['eval_episodes']} episodes, {shown[0]['eval_mode']}" if shown else "-"
        out.append(
            f"| {name} | {steps_text(int(runs[0]['budget']))} | {mean} | {', '.join(map(seed_text, shown)) or '-'} | "
            f"{sb3_text} | {zoo_text} | {evaluation} |"
        )
    return out


def runs_table(rows: list[Row], checks: list[PairCheck]) -> list[str]:
    """One line per run: steps, wall time, resume points, the sb3 comparison, commit, host and date."""
    out = [
        "| env | library | seed | steps trained | wall time | sb3's ep_rew_mean against ppo_dict's | commit | host, date |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for row in rows:
        check = next((c for c in checks if row["run"] in (c.sb3_run, c.ppo_dict_run)), None)
        compared = "-" if check is None else check.text().split(": ", 1)[1]
        steps = f"{int(row['timesteps']):,}" + ("" if full(row) else f" of {int(row['budget']):,}")
        if row["resumed_at"]:
            steps += f" (resumed at {', '.join(f'{int(s):,}' for s in row['resumed_at'].split(';'))})"
        out.append(
            f"| {row['env']} | {row['lib']} | {row['seed']} | {steps} | {float(row['wall_s']) / 60:.0f} min | "
            f"{compared} | {row['commit']} | {row['host']}, {row['date']} |"
        )
    return out


def table_markdown(final: list[Row], curves: list[Row]) -> str:
    """The results page's two tables: returns per env, then every run."""
    rows = latest(final)
    return "\n".join(returns_table(rows) + ["", "Every run:", ""] + runs_table(rows, pair_checks(final, curves)))


def plot(curves: list[Row], final: list[Row], path: str = PLOT) -> None:
    """One panel per env: each run's ``ep_rew_mean`` (ppo_dict thin and solid, sb3 wide and pale beneath it, so
    that the same numbers show as one line), resume points marked, rl-zoo's published score dotted."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = latest(final)
    envs = list(dict.fromkeys(row["env"] for row in rows))
    columns = min(3, len(envs))
    fig, axes = plt.subplots(
        (len(envs) + columns - 1) // columns,
        columns,
        figsize=(5.2 * columns, 3.6 * ((len(envs) + columns - 1) // columns)),
        squeeze=False,
    )
    for ax, env in zip(axes.flat, envs):
        for row in sorted((row for row in rows if row["env"] == env), key=lambda row: (row["lib"] != "sb3", int(row["seed"]))):
            points = curve_of(row, curves)
            if not points:
                continue
            xs, ys = [p[0] for p in points], [float(p[1]) for p in points]
            sb3 = row["lib"] == "sb3"
            (line,) = ax.plot(
                xs,
                ys,
                linewidth=4 if sb3 else 1.2,
                alpha=0.35 if sb3 else 0.9,
                color=None if not sb3 else "C7",
                label=f"{row['lib']}, seed {row['seed']}",
            )
            for step in (int(s) for s in row["resumed_at"].split(";") if s):
                ax.plot([step], [ys[min(range(len(xs)), key=lambda i: abs(xs[i] - step))]], "x", color=line.get_color())
        zoo = published(env)
        if zoo is not None:
            ax.axhline(zoo.mean, color="gray", linestyle=":", label=f"rl-zoo, {zoo.env}, {zoo.n_timesteps}")
        ax.set_title(env)
        ax.set_xlabel("env steps")
        ax.set_ylabel("rollout/ep_rew_mean")
        ax.legend(fontsize=7)
    for ax in list(axes.flat)[len(envs) :]:
        ax.set_visible(False)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    print(f"wrote {path}")
