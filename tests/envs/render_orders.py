"""Rendering envs created, rendered, closed and collected in many orders, in one process: does every
remaining env still draw its own frames? Run under one GL backend per process (MuJoCo picks it at
import): ``MUJOCO_GL=egl python -m tests.envs.render_orders``. Prints one JSON object, per order the
frames compared, those that differ from the same env run alone, and those uniformly one colour.

Each order is a generator: the envs it watches step (with fixed actions) at each ``yield``, while
other renderers come and go around them. The watched envs' frames are compared, ``==``, with those
of each watched env run alone, first, in this process. ``tests/envs/test_render_teardown.py`` runs
this on every backend the host has.
"""

from __future__ import annotations

import gc
import json
import sys
from typing import Any, Callable, Iterator

import gymnasium as gym
import numpy as np

from ppo_dict.envs import PixelOptions, make_env, resolve_env_name
from ppo_dict.envs.pixels import PIXELS
from ppo_dict.envs.render import render_frame

SIZE = 48
STEPS = 8  # each watched env steps this often per order (a frame each), plus its reset frame
ACTIONS = np.random.default_rng(0).uniform(-1, 1, (STEPS, 2))
SPEC = resolve_env_name("gym_Reacher-v5", pixel=PixelOptions(image_size=SIZE))


class Watched:
    """An env whose frames are recorded: one of ppo_dict's pixel envs, or a user's gymnasium env
    rendered through ``render_frame`` (evaluation and ``--video`` render so)."""

    def __init__(self, kind: str, seed: int):
        self.kind, self.seed, self.t = kind, seed, 0
        self.env = (
            make_env(SPEC) if kind == "pixel" else gym.make("Reacher-v5", render_mode="rgb_array", width=SIZE, height=SIZE)
        )
        obs, _ = self.env.reset(seed=seed)
        self.frames = [self._frame(obs)]

    def _frame(self, obs: Any) -> np.ndarray:
        return obs[PIXELS].copy() if self.kind == "pixel" else render_frame(self.env).copy()

    def step(self) -> None:
        if self.t < STEPS:
            obs, *_ = self.env.step(ACTIONS[self.t])
            self.frames.append(self._frame(obs))
            self.t += 1


def user_env(seed: int) -> gym.Env:
    """A user's (or sb3's) rendering env, rendered once by gymnasium itself."""
    env = gym.make("Reacher-v5", render_mode="rgb_array", width=SIZE, height=SIZE)
    env.reset(seed=seed)
    env.render()
    return env


def ours(seed: int) -> gym.Env:
    env = make_env(SPEC)
    env.reset(seed=seed)
    return env


def free_gl_context_first(env: gym.Env) -> None:
    """What the garbage collector may do to a cycle: the GL context's own ``__del__`` runs before
    its viewer's, so the viewer's MuJoCo context is left without its GL context."""
    env.unwrapped.mujoco_renderer.viewer.opengl_context.free()


# ---------------------------------------------------------------- the orders
def closed(make: Callable[[int], gym.Env]) -> Callable[[], Iterator[None]]:
    def order() -> Iterator[None]:
        for seed in range(10, 13):
            other = make(seed)
            yield  # the watched envs draw: one of theirs is current now
            other.close()
            del other
            yield

    return order


def collected(make: Callable[[int], gym.Env], context_first: bool = False) -> Callable[[], Iterator[None]]:
    def order() -> Iterator[None]:
        for seed in range(20, 23):
            other = make(seed)
            yield
            if context_first:
                free_gl_context_first(other)
            loop = [other]
            loop.append(loop)  # a reference cycle: only the collector frees it
            del other, loop
            gc.collect()
            yield

    return order


def several_in_reverse() -> Iterator[None]:
    others = [user_env(30), ours(31), user_env(32)]
    yield
    for other in reversed(others[1:]):
        other.close()
        yield
    del others
    gc.collect()  # the first one, never closed
    yield


def evaluation_beside_training() -> Iterator[None]:
    """An evaluation env (a state env rendering video frames through render_frame, as ``--video``
    does) made, used and closed beside the training envs, twice."""
    for seed in (40, 41):
        evaluation = gym.make("Reacher-v5", render_mode="rgb_array", width=SIZE, height=SIZE)
        evaluation.reset(seed=seed)
        for _ in range(3):
            evaluation.step(evaluation.action_space.sample())
            render_frame(evaluation)
            yield
        evaluation.close()
        yield


ORDERS: dict[str, Callable[[], Iterator[None]]] = {
    "user_env_closed": closed(user_env),
    "pixel_env_closed": closed(ours),
    "user_env_collected": collected(user_env),
    "pixel_env_collected": collected(ours),
    "user_env_collected_gl_context_first": collected(user_env, context_first=True),
    "several_closed_in_reverse": several_in_reverse,
    "evaluation_beside_training": evaluation_beside_training,
}
WATCHED = (("pixel", 0), ("pixel", 1), ("user", 2))


def pool_beside_others(alone: dict[tuple[str, int], list[np.ndarray]]) -> dict[str, int]:
    """A worker pool whose main process steps a share of the pixel envs itself (the default layout)
    while other renderers in the main process are closed and collected around its steps."""
    from ppo_dict.vec import probe_env
    from ppo_dict.vec.shm_pool import ShmEnvPool

    pool = ShmEnvPool(probe_env(SPEC), num_workers=2, envs_per_worker=1, n_steps=STEPS, main_steps_envs=True)
    try:
        pool.reset(0)  # env i with seed i: envs 0 and 1 are the watched pixel envs' twins
        events = collected(user_env)()
        for t in range(STEPS):
            next(events, None)
            pool.storage.env_actions[:] = ACTIONS[t]
            pool.step(t)
        pixels = pool.storage.env_obs[PIXELS]
        frames = [(pixels[t, i].copy(), alone[("pixel", i)][t]) for i in range(2) for t in range(STEPS + 1)]
    finally:
        pool.close()
    return counts(frames)


def run(order: Callable[[], Iterator[None]], before: bool = False) -> list[Watched]:
    """The watched envs stepping through ``order``; ``before``: one more renderer exists before them
    and is closed once they have drawn."""
    early = user_env(50) if before else None
    watched = [Watched(kind, seed) for kind, seed in WATCHED]
    if early is not None:
        early.close()
        del early
    for _ in order():
        for env in watched:
            env.step()
    while any(env.t < STEPS for env in watched):
        for env in watched:
            env.step()
    return watched


def compare(alone: dict[tuple[str, int], list[np.ndarray]], watched: list[Watched]) -> dict[str, int]:
    return counts([(f, alone[(env.kind, env.seed)][i]) for env in watched for i, f in enumerate(env.frames)])


def counts(frames: list[tuple[np.ndarray, np.ndarray]]) -> dict[str, int]:
    """Of (got, alone) frame pairs: how many, how many differ, how many are one colour throughout."""
    return {
        "frames": len(frames),
        "differ": sum(int(not np.array_equal(got, want)) for got, want in frames),
        "one_colour": sum(int(got.min() == got.max()) for got, _ in frames),
    }


def main() -> None:
    alone = {}
    for kind, seed in WATCHED:  # each env alone, first: the reference
        env = Watched(kind, seed)
        while env.t < STEPS:
            env.step()
        alone[(kind, seed)] = env.frames
        env.env.close()
    results = {name: compare(alone, run(order)) for name, order in ORDERS.items()}
    results["closed_before_the_watched_drew"] = compare(alone, run(lambda: iter(()), before=True))
    results["worker_pool_beside_others"] = pool_beside_others(alone)
    json.dump(results, sys.stdout)
    print()


if __name__ == "__main__":
    main()
