"""The PPO update at ``make train``'s settings: what each part of a minibatch costs, and this tree's
``ppo_update`` against an earlier commit's, in interleaved rounds.

Reacher-v5, 8 envs, n_steps 256, minibatches of 256, 10 epochs, normalised observations, one thread.
One rollout is collected (after a first update, so Adam's state exists), then every timed update
starts from the same snapshot (parameters, Adam, numpy RNG). Rows:
  * per minibatch, CPU microseconds of each part, this tree's loop and the commit's: the rows
    gathered, forward and loss (with the logged figures), zero_grad, backward, clip_grad_norm_,
    the finite check, Adam;
  * this tree's update against ``--against`` (a commit; its ``ppo_dict/algo/training/update.py`` is loaded beside
    this one, the rest of the package shared): both must leave the same parameters, Adam state
    and logs, bit for bit; the ratio of CPU seconds and of wall seconds per round, medians.

    python benchmarks/bench_update.py [--against COMMIT] [--rounds 15] [--no_log]
"""

from __future__ import annotations

import argparse
import copy
import importlib.util
import inspect
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from collections import defaultdict
from pathlib import Path
from types import ModuleType

import numpy as np
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from benchmarks.harness import Table, add_log_flags, log_path, machine_times  # noqa: E402
from ppo_dict.algo.training import update  # noqa: E402
from ppo_dict.algo.ppo import PPO  # noqa: E402
from ppo_dict.core.config import Config  # noqa: E402
from ppo_dict.core.seeding import same_values  # noqa: E402
from ppo_dict.run.run_plan import build_env_pool

SETTING = "Reacher-v5, 8 envs, n_steps 256, batch 256, 10 epochs, --normalize, MLP 64x64, 1 thread"
CFG = Config(
    env="gym_Reacher-v5",
    n_envs=8,
    num_workers=0,
    n_steps=256,
    batch_size=256,
    n_epochs=10,
    normalize=True,
    gamma=0.9,
    gae_lambda=0.95,
    learning_rate=3e-4,
    seed=0,
    verbose=0,
    total_timesteps=10**9,
    update_threads=1,
)
MINIBATCHES = CFG.n_epochs * CFG.n_steps * CFG.n_envs // CFG.batch_size


def module_at(commit: str) -> ModuleType:
    """``ppo_dict/algo/training/update.py`` as it was at ``commit`` (``ppo_dict/update.py`` before the package
    layers), imported under another name; its imports of modules that have since moved into a
    package of ``ppo_dict/`` are pointed at where they are now."""
    shown = [
        subprocess.run(["git", "show", f"{commit}:{path}"], cwd=ROOT, capture_output=True, text=True)
        for path in ("ppo_dict/algo/training/update.py", "ppo_dict/update.py")
    ]
    found = [r.stdout for r in shown if r.returncode == 0]
    if not found:
        raise SystemExit(f"no ppo_dict/algo/training/update.py or ppo_dict/update.py at {commit}")
    moved = {p.stem: ".".join(p.relative_to(ROOT).with_suffix("").parts) for p in Path(ROOT, "ppo_dict").glob("*/*.py")}
    source = re.sub(r"\bppo_dict\.(\w+)\b", lambda m: moved.get(m.group(1), m.group(0)), found[0])
    path = os.path.join(tempfile.mkdtemp(), "update_at_commit.py")
    with open(path, "w") as f:
        f.write(source)
    spec = importlib.util.spec_from_file_location("update_at_commit", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


class Fixture:
    """A model with one collected rollout and a snapshot to start every timed update from."""

    def __init__(self) -> None:
        self.model = PPO(CFG, build_env_pool(CFG))
        self.model.start_envs()
        m = self.model
        m.collect_rollout()
        m.compute_advantages()
        m.train(0.95)  # Adam's state exists from here on, as in every update but a run's first
        m.storage.carry_over()
        m.collect_rollout()
        m.compute_advantages()
        self.snapshot = (copy.deepcopy(m.policy.state_dict()), copy.deepcopy(m.optimizer.state_dict()), np.random.get_state())
        self.settings = m._update_settings(0.9)

    def restore(self) -> None:
        m = self.model
        m.policy.load_state_dict(self.snapshot[0])
        m.optimizer.load_state_dict(copy.deepcopy(self.snapshot[1]))  # deep: Adam shares the step tensors it loads
        np.random.set_state(self.snapshot[2])

    def run(self, module: ModuleType) -> tuple[float, float, tuple]:
        """(CPU s, wall s, (parameters, Adam state, logs)) of one update by ``module.ppo_update``."""
        self.restore()
        m = self.model
        cpu, wall = time.thread_time(), time.perf_counter()
        logs, _ = module.ppo_update(m.policy, m.optimizer, m.storage, self.settings, 0, m.device)
        cpu, wall = time.thread_time() - cpu, time.perf_counter() - wall
        return cpu, wall, (copy.deepcopy(m.policy.state_dict()), copy.deepcopy(m.optimizer.state_dict()), logs)


class TorchCalls:
    """``zero_grad``, ``clip_grad_norm_`` and ``step`` as sb3 calls them (an update.py without ``GradientStep``)."""

    def __init__(self, policy: torch.nn.Module, optimizer: torch.optim.Optimizer):
        self.policy, self.optimizer = policy, optimizer

    def zero_grad(self) -> None:
        self.optimizer.zero_grad()

    def clip_grad_norm(self, max_norm: float) -> torch.Tensor:
        return torch.nn.utils.clip_grad_norm_(self.policy.parameters(), max_norm)

    def adam_step(self) -> None:
        self.optimizer.step()


def cast_argument(module: ModuleType, policy: torch.nn.Module) -> object:
    """``RolloutTensors``' second argument in ``module``: the action spec's cast (this tree), or the
    older ``discrete`` flag (False: Reacher's Box)."""
    takes_cast = "cast" in inspect.signature(module.RolloutTensors).parameters
    return policy.action_spec.to_training if takes_cast else False


def parts(fixture: Fixture, module: ModuleType, repeats: int) -> dict[str, float]:
    """CPU microseconds per minibatch of each part of ``module``'s update loop."""
    m, totals = fixture.model, defaultdict(float)
    stepper = getattr(module, "GradientStep", TorchCalls)
    takes_tensor = hasattr(module, "GradientStep")  # its take() gets the rows as a tensor
    for _ in range(repeats):
        fixture.restore()
        rollout = module.RolloutTensors(m.storage.flat_samples(), cast_argument(module, m.policy), m.device)
        step, log = stepper(m.policy, m.optimizer), module.UpdateLog()
        lean = {"evaluate": module.GaussianEvaluate.of(m.policy)} if hasattr(module, "GaussianEvaluate") else {}
        for _ in range(CFG.n_epochs):
            permutation = np.random.permutation(CFG.n_steps * CFG.n_envs)
            indices = torch.from_numpy(permutation) if takes_tensor else permutation
            for start in range(0, len(indices), CFG.batch_size):
                marks = [time.thread_time()]
                batch = rollout.take(indices[start : start + CFG.batch_size])
                marks.append(time.thread_time())
                loss = module.minibatch_loss(m.policy, batch, fixture.settings, log, **lean)[0]
                marks.append(time.thread_time())
                step.zero_grad()
                marks.append(time.thread_time())
                loss.backward()
                marks.append(time.thread_time())
                grad_norm = step.clip_grad_norm(fixture.settings.max_grad_norm)
                marks.append(time.thread_time())
                module._check_finite(0, 0, 0, loss=loss, grad_norm=grad_norm)
                marks.append(time.thread_time())
                step.adam_step()
                marks.append(time.thread_time())
                for name, a, b in zip(
                    ("rows", "forward + loss + logs", "zero_grad", "backward", "clip_grad_norm", "finite check", "Adam"),
                    marks,
                    marks[1:],
                ):
                    totals[name] += b - a
    return {name: seconds / repeats / MINIBATCHES * 1e6 for name, seconds in totals.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--against", default="f92d251", help="the commit whose update to compare with (default: before the overhead was cut)"
    )
    parser.add_argument("--rounds", type=int, default=15, help="interleaved rounds")
    add_log_flags(parser)
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)
    started, table, fixture = machine_times(), Table(), Fixture()
    before = module_at(args.against)
    a, b = fixture.run(before), fixture.run(update)
    if not same_values(a[2][:2], b[2][:2]) or repr(a[2][2]) != repr(b[2][2]):  # repr: exact floats, nan equal to nan
        raise SystemExit(f"this tree's update and {args.against}'s give different bits: not comparable")
    both: list[dict[str, float]] = []
    for _ in range(2):  # interleaved: this tree, then the commit's, twice; the medians of the two
        costs = [parts(fixture, update, 2), parts(fixture, before, 2)]
        both = costs if _ == 0 else [{k: statistics.median([a[k], b[k]]) for k in a} for a, b in zip(both, costs)]
    for name, costs in zip(("this tree", args.against), both):
        table.row(
            SETTING,
            f"CPU per minibatch of 256, by part ({name})",
            ", ".join(f"{k} {v:.0f} us" for k, v in costs.items()),
            f"total {sum(costs.values()):.0f} us",
            "",
        )
    old, new = [], []
    for r in range(args.rounds):
        for module, out in ((before, old), (update, new)) if r % 2 == 0 else ((update, new), (before, old)):
            out.append(fixture.run(module)[:2])
    cpu_ratios = [n[0] / o[0] for o, n in zip(old, new)]
    wall_ratios = [n[1] / o[1] for o, n in zip(old, new)]
    median = statistics.median
    table.row(
        SETTING,
        f"one update (80 minibatches), this tree vs {args.against}, same bits",
        f"CPU {median(n[0] for n in new) * 1e3:.0f} vs {median(o[0] for o in old) * 1e3:.0f} ms; "
        f"wall {median(n[1] for n in new) * 1e3:.0f} vs {median(o[1] for o in old) * 1e3:.0f} ms",
        f"ratio of CPU s per round {median(cpu_ratios):.2f} ({min(cpu_ratios):.2f}-{max(cpu_ratios):.2f}), "
        f"of wall s {median(wall_ratios):.2f} over {args.rounds} rounds",
        f"**{1 / median(cpu_ratios):.2f}x** less CPU; target 2x: {'met' if median(cpu_ratios) <= 0.5 else 'NOT met'}",
    )
    fixture.model.close()
    table.write(
        "bench_update",
        f"python benchmarks/bench_update.py --against {args.against} --rounds {args.rounds}",
        started,
        log=log_path(args),
    )


if __name__ == "__main__":
    main()
