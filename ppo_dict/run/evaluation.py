"""Evaluation: deterministic episodes on a separate env, frozen normalisation, best model, videos.

As rl-zoo's ``EvalCallback`` setup: the eval env is its own (in this process), observations are
normalised with the training statistics without updating them, rewards are reported raw; Atari
games are played stochastically through the training wrappers and scored by whole games. An
evaluation draws nothing from the training RNG streams: their states are saved before and put
back after (see :func:`preserved_rng`), so a run with evaluation trains bit for bit as without.
"""

from __future__ import annotations

import dataclasses
import os
import tempfile
from typing import TYPE_CHECKING, Any, Callable, Optional

import numpy as np
import torch

from ppo_dict.algo.model import Model
from ppo_dict.core.files import atomic_write
from ppo_dict.core.logger import STDERR
from ppo_dict.core.reading import MiB, entry_kind, npz_arrays
from ppo_dict.core.seeding import preserved_rng
from ppo_dict.data.episodes import EpisodeBook
from ppo_dict.data.masking import env_masks
from ppo_dict.envs import EnvSpec, make_env
from ppo_dict.envs.render import render_frame
from ppo_dict.run.checkpoint import BEST_MODEL, write_model_file
from ppo_dict.vec.in_main import call_in_main
from ppo_dict.vec.watchdog import Owner

if TYPE_CHECKING:
    from ppo_dict.algo.ppo import PPO

#: offset of the eval env's seed from the training seed (rl-zoo seeds its eval env differently too)
EVAL_SEED_OFFSET = 1_000_000
EVALUATIONS = "evaluations.npz"
#: seconds the eval env's constructor may take (the pools' start timeout)
BUILD_TIMEOUT = 120.0


#: the most bytes an ``evaluations.npz`` holds: a float and an int per episode (a million evaluations of 16 episodes)
MAX_EVALUATIONS_BYTES = 256 * MiB


def read_evaluations(path: str) -> dict[str, np.ndarray]:
    """A run's ``evaluations.npz`` (read without following a link, capped, no pickles), checked to be what
    :meth:`Evaluator.evaluate` writes: ``timesteps: int[n]`` (not negative), ``results: float[n, episodes]`` finite,
    ``ep_lengths: int[n, episodes]`` (not negative), ``successes: [m <= n, episodes]`` where kept.
    Raises ``ValueError`` (an ``OSError`` for a file that is not read) naming what is wrong."""
    data = npz_arrays(path, MAX_EVALUATIONS_BYTES, "an evaluations.npz", follow=False)
    missing = [k for k in ("timesteps", "results", "ep_lengths") if k not in data]
    if missing:
        raise ValueError(f"{path}: no {', '.join(missing)}")
    timesteps, results, lengths = data["timesteps"], data["results"], data["ep_lengths"]
    successes = data.get("successes", np.zeros((0, results.shape[-1] if results.ndim else 0)))
    if not (timesteps.ndim == 1 and timesteps.dtype.kind in "iu" and (timesteps >= 0).all()):
        raise ValueError(f"{path}: timesteps {timesteps.dtype}{list(timesteps.shape)} is not an array of steps")
    if not (
        results.ndim == 2 and len(results) == len(timesteps) and results.dtype.kind in "iuf" and np.isfinite(results).all()
    ):
        raise ValueError(f"{path}: results {results.dtype}{list(results.shape)} is not finite returns, a row per evaluation")
    if not (lengths.shape == results.shape and lengths.dtype.kind in "iu" and (lengths >= 0).all()):
        raise ValueError(
            f"{path}: ep_lengths {lengths.dtype}{list(lengths.shape)} is not episode lengths of the results' shape"
        )
    if not (
        successes.ndim == 2
        and len(successes) <= len(timesteps)
        and successes.dtype.kind in "biuf"
        and np.isfinite(successes).all()
    ):
        raise ValueError(f"{path}: successes {successes.dtype}{list(successes.shape)} is not an evaluation's successes")
    return data


class WatchedCalls:
    """The eval env's calls, made in this process under the watchdog (``ppo_dict.vec.watchdog``) as
    the main process's training envs are: one that raises is an :class:`EnvWorkerError` naming the
    eval env and the call, one that does not return within ``timeout`` seconds an
    :class:`EnvTimeoutError` (where the watchdog runs: the command line starts it)."""

    def __init__(self, label: str, timeout: float):
        self.owner = Owner(f"{label}, evaluation", self)
        self.timeout = timeout
        self.active: tuple[int, str] = (-1, "")  # read by the watchdog's messages, as a runner's

    def __call__(self, command: str, call: Callable[[], Any], detail: Any, timeout: Optional[float] = None) -> Any:
        self.active = (0, command)
        return call_in_main(self.owner, command, call, detail, self.timeout if timeout is None else timeout, _nothing_to_stop)


def _nothing_to_stop(error: BaseException) -> None:
    """The eval env is closed with the run (``Evaluator.close``); no worker is its own."""


def _direct(command: str, call: Callable[[], Any], detail: Any) -> Any:
    """Env calls made as they are (no deadline): :func:`run_episodes` outside a run."""
    return call()


def render_spec(spec: EnvSpec) -> EnvSpec:
    """The same env, rendering ``rgb_array`` frames (state envs; pixel envs render already)."""
    if spec.pixel is not None or "render_mode" in spec.kwargs:
        return spec
    return dataclasses.replace(spec, kwargs={**spec.kwargs, "render_mode": "rgb_array"})


class VideoWriter:
    """RGB frames ``uint8[H, W, 3]`` -> an mp4 (OpenCV, codec mp4v), renamed into place when closed.

    OpenCV's writer takes only a path and follows a symbolic link there: a predictable temp name beside the
    video (``.eval-<step>.mp4.tmp.mp4``) let anyone who can write the folder plant a link and have the video
    written over the file it names. So the frames go to a private folder made with ``mkdtemp`` (mode 0700, a
    new name) beside the video, on its file system, and the finished file is renamed over ``path`` (a link
    there is replaced, not followed)."""

    def __init__(self, path: str, fps: float):
        self.path, self.fps = path, fps
        self.folder: Optional[str] = None
        self.tmp = ""
        self._writer: Any = None
        self.frames = 0

    def add(self, frame: np.ndarray) -> None:
        import cv2  # opencv-python-headless, a dependency; imported only when recording

        if self._writer is None:
            os.makedirs(os.path.dirname(self.path) or ".", exist_ok=True)
            self.folder = tempfile.mkdtemp(prefix=f".{os.path.basename(self.path)}.", dir=os.path.dirname(self.path) or ".")
            self.tmp = os.path.join(self.folder, "video.mp4")
            height, width = frame.shape[:2]
            self._writer = cv2.VideoWriter(self.tmp, cv2.VideoWriter_fourcc(*"mp4v"), self.fps, (width, height))
        self._writer.write(np.ascontiguousarray(frame[..., ::-1]))  # OpenCV wants BGR
        self.frames += 1

    def close(self) -> Optional[str]:
        """Finish the file; returns its path, or None when no frame was written."""
        if self._writer is None:
            return None
        self._writer.release()
        self._writer = None
        os.replace(self.tmp, self.path)
        self._remove_folder()
        return self.path

    def discard(self) -> None:
        """Drop an unfinished file (nothing after :meth:`close`)."""
        if self._writer is not None:
            self._writer.release()
            self._writer = None
            if os.path.lexists(self.tmp):
                os.remove(self.tmp)
            self._remove_folder()

    def _remove_folder(self) -> None:
        if self.folder is not None:
            os.rmdir(self.folder)
            self.folder = None


@torch.no_grad()
def run_episodes(
    model: Model,
    env: Any,
    n_episodes: int,
    seed: Optional[int],
    video: Optional[VideoWriter] = None,
    video_length: int = 1000,
    deterministic: bool = True,
    successes: Optional[list[Any]] = None,
    calls: Callable[[str, Callable[[], Any], Any], Any] = _direct,
) -> tuple[list[float], list[int]]:
    """Play ``n_episodes``; returns ``(returns, lengths)`` (raw rewards, summed in float64, not
    rounded: sb3's ``evaluate_policy`` on an env without a Monitor). ``successes`` gets the
    ``info["is_success"]`` of every episode end that has one (sb3 ``EvalCallback``'s success buffer).

    The first reset uses ``seed``; later episodes continue the env's own RNG. The actions are
    ``model.predict``'s (observations normalised with its statistics, which are not updated); a recurrent
    model's LSTM states go from each step to the next and are zeroed where an episode starts (after every
    reset, a lost life's too: sb3's ``evaluate_policy`` passes ``episode_start=done``). The first episode's
    frames go to ``video`` (at most ``video_length``). A masked policy acts on the env's
    ``action_masks()`` of each step (sb3-contrib's masked ``evaluate_policy``).

    An env with training-only wrappers (``envs.monitor.is_monitored``: Atari's lost lives and clipped rewards) is played
    through them, as the policy was trained, and its episodes are the monitor's beneath them: whole games, unclipped
    rewards, emulator frames. That is sb3's ``evaluate_policy`` on rl-zoo's Atari eval env (AtariWrapper, ``Monitor``
    beneath it). The counting is the trainer's :class:`~ppo_dict.data.episodes.EpisodeBook`'s.

    Every env call goes through ``calls(command, call, detail)`` (the :class:`Evaluator`'s
    :class:`WatchedCalls`: a hang or a raise ends the run naming the eval env, the call and the step).
    """
    book = EpisodeBook.alone(rounded=False)
    book.watch(0, env)
    returns: list[float] = []
    lengths: list[int] = []
    obs, _ = calls("reset", lambda: env.reset(seed=seed), [seed])
    state, episode_start = None, np.array([True])  # a recurrent model's LSTM states, carried from step to step
    read_masks = (
        calls("action_masks", lambda: env_masks(env, model.action_space), "before evaluation") if model.policy.masked else None
    )
    while len(returns) < n_episodes:
        at = f"at evaluation step {book.lengths[0]} of episode {len(returns) + 1}"
        if video is not None and not returns and video.frames < video_length:
            frame = calls("render", lambda: render_frame(env), at)
            if frame is not None:
                video.add(np.asarray(frame, dtype=np.uint8))
        masks = None if read_masks is None else calls("action_masks", lambda: read_masks(at), at)
        action, state = model.predict(obs, state, episode_start, deterministic, action_masks=masks)
        obs, reward, terminated, truncated, info = calls("step", lambda: env.step(action), at)
        episode_start = np.array([terminated or truncated])
        book.returns[0] += float(reward)
        book.lengths[0] += 1
        if terminated or truncated:
            count_end(book, info, returns, lengths, successes)
            obs, _ = calls("reset", env.reset, None)
    return returns, lengths


def count_end(
    book: EpisodeBook, info: dict[str, Any], returns: list[float], lengths: list[int], successes: Optional[list[Any]]
) -> None:
    """An episode end of :func:`run_episodes`' env, counted by ``book``: the episode it closes into ``returns`` and
    ``lengths`` (none where a lost life ends a training episode only), its ``is_success`` into ``successes``."""
    book.end(0, info)
    episode, success = book.read(0)
    if episode is not None:  # None: a lost life, the game goes on after the reset
        returns.append(episode["r"])
        lengths.append(episode["l"])
    if success is not None and successes is not None:
        successes.append(success)


class Evaluator:
    """Evaluates a model on its own env; keeps ``best_model.pt`` and ``evaluations.npz``.

    ``evaluations.npz`` has sb3 ``EvalCallback``'s arrays: ``timesteps: int64[k]``,
    ``results: float64[k, eval_episodes]``, ``ep_lengths: int64[k, eval_episodes]``, and, once an
    evaluation's env reported ``is_success``, ``successes`` (one row per such evaluation: the flag of
    each episode end), whose mean is logged as ``eval/success_rate``.
    ``on_video(path, num_timesteps)`` is called for each recorded video (wandb uploads it).
    """

    def __init__(self, cfg: Any, spec: EnvSpec, run_dir: str, log: Any = STDERR):
        self.cfg, self.run_dir, self.log = cfg, run_dir, log
        self.video = cfg.video
        self.calls = WatchedCalls(cfg.env, cfg.step_timeout)
        self.env = self.calls(
            "constructor",
            lambda: make_env(render_spec(spec) if cfg.video else spec),
            "while the evaluation env was built",
            BUILD_TIMEOUT,
        )
        # rl-zoo evaluates Atari games stochastically (ExperimentManager.deterministic_eval)
        self.deterministic = not spec.is_atari
        self.seed = None if cfg.seed is None else cfg.seed + EVAL_SEED_OFFSET
        self.on_video: list[Callable[[str, int], None]] = []
        self.timesteps: list[int] = []
        self.results: list[list[float]] = []
        self.ep_lengths: list[list[int]] = []
        self.successes: list[list[Any]] = []
        self.best_mean_reward = -np.inf

    def load_history(self, up_to_step: int) -> None:
        """Continue a resumed run's ``evaluations.npz`` (rows after the checkpoint are dropped)."""
        path = os.path.join(self.run_dir, EVALUATIONS)
        if not entry_kind(path):
            return
        data = read_evaluations(path)  # checked before the run took its directory: this reads what was checked
        keep = data["timesteps"] <= up_to_step
        self.timesteps = data["timesteps"][keep].tolist()
        self.results = data["results"][keep].tolist()
        self.ep_lengths = data["ep_lengths"][keep].tolist()
        if "successes" in data:  # a row per evaluation that had successes (all of them, as runs go)
            self.successes = data["successes"][: len(self.timesteps)].tolist()
        if self.results:
            self.best_mean_reward = max(float(np.mean(r)) for r in self.results)

    def evaluate(self, ppo: "PPO") -> dict[str, float]:
        """Run the episodes, log ``eval/*`` and dump (as sb3's ``EvalCallback``), keep the best model."""
        step = ppo.num_timesteps
        writer = None
        if self.video:
            writer = VideoWriter(
                os.path.join(self.run_dir, "videos", f"eval-{step:012d}.mp4"), self.env.metadata.get("render_fps", 30)
            )
        successes: list[Any] = []
        with preserved_rng():
            returns, lengths = run_episodes(
                ppo.model,
                self.env,
                self.cfg.eval_episodes,
                self.seed,
                writer,
                self.cfg.video_length,
                self.deterministic,
                successes,
                self.calls,
            )
        mean_reward, mean_length = float(np.mean(returns)), float(np.mean(lengths))
        self.timesteps.append(step)
        self.results.append(returns)
        self.ep_lengths.append(lengths)
        if successes:  # sb3's EvalCallback: saved and logged only where the env reported them
            self.successes.append(successes)
        extra = {"successes": np.array(self.successes)} if self.successes else {}
        atomic_write(
            os.path.join(self.run_dir, EVALUATIONS),
            lambda f: np.savez(
                f,
                timesteps=np.array(self.timesteps, dtype=np.int64),
                results=np.array(self.results),
                ep_lengths=np.array(self.ep_lengths, dtype=np.int64),
                **extra,
            ),
        )
        ppo.logger.record("eval/mean_reward", mean_reward)
        ppo.logger.record("eval/mean_ep_length", mean_length)
        if successes:
            ppo.logger.record("eval/success_rate", np.mean(successes))
        if mean_reward > self.best_mean_reward:
            self.best_mean_reward = mean_reward
            write_model_file(ppo, os.path.join(self.run_dir, BEST_MODEL), envs=False)
            print(f"eval at {step} steps: new best mean reward {mean_reward:.3f}", file=self.log, flush=True)
        ppo.logger.dump(step=step)
        video_path = writer.close() if writer is not None else None
        if video_path is not None:
            for callback in self.on_video:
                callback(video_path, step)
        elif writer is not None:
            print(f"warning: {self.cfg.env} rendered no frame; no video written", file=self.log, flush=True)
        return {"eval/mean_reward": mean_reward, "eval/mean_ep_length": mean_length}

    def close(self) -> None:
        self.env.close()
