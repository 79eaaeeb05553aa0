"""The machine's side of the config check: whether a run's processes, threads, open files and memory
fit what this machine has (:class:`~ppo_dict.core.machine.Machine`), judged before anything starts.

:func:`run_needs` works out what a checked config will ask of the machine (from the probed env's
spaces and the policy measured on torch's meta device, where nothing is allocated, its activations by one pass);
:func:`resource_problems` compares it with the machine. The estimates are deliberately rough (the
constants below say where they come from): they exist to refuse a run that cannot fit, with a
message saying what to change, instead of a SIGBUS, an OOM kill or a fork failure half-way.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

import numpy as np
import torch
from gymnasium import spaces

from ppo_dict.algo.networks.recurrent_policy import build_policy
from ppo_dict.core.config import Config
from ppo_dict.core.machine import Machine
from ppo_dict.data.storage import channel_last_keys, obs_layout, policy_view, stage_keys_of
from ppo_dict.vec.backend import EnvBackend
from ppo_dict.vec.shared_memory import plan_layout, shared_memory_problem

#: More worker processes or torch threads than this many per CPU this process may run on is refused without --oversubscribe.
CORES_FACTOR = 4
MB = 2**20
#: Memory one worker adds, by start method. Measured with CartPole, Reacher (MuJoCo) and test_dummy
#: workers (2 x 2 envs, /proc/PID/smaps_rollup): a forked worker's private memory was 9-26 MB (the
#: interpreter, torch and gymnasium are shared with the forkserver), a spawned one imports them
#: afresh (160-230 MB resident). Rounded up for envs heavier than these.
WORKER_BYTES = {"forkserver": 64 * MB, "fork": 64 * MB, "spawn": 320 * MB}
#: The forkserver itself: an interpreter with torch, gymnasium and ppo_dict imported (230 MB resident).
FORKSERVER_BYTES = 256 * MB
#: Tasks (processes and threads) besides the workers and torch's threads: the forkserver, the
#: resource tracker, the watchdog's guard process and thread, this process's main thread.
HELPER_TASKS = 5
#: Tasks per worker: its process, and room for a thread of its envs (a renderer's).
TASKS_PER_WORKER = 2
#: Descriptors the main process holds per worker (measured: 3; a pipe, the process sentinel and
#: the forkserver's), and spare ones for the run's own files (logs, checkpoints, envs in this process).
FILES_PER_WORKER, FILES_SPARE = 4, 64


@dataclass(frozen=True)
class Needs:
    """What a run will ask of the machine.

    Attributes:
        workers: worker processes; ``threads``: torch threads of this process (the larger of
            rollout and update); ``tasks``: processes and threads in all; ``files``: descriptors this
            process adds.
        shared: bytes of rollout storage in shared memory (0 in-process); ``private``: the rest of
            the storage (in-process: all of it) and the update's copy of the rollout, in this process.
        model: bytes of the policy's parameters, gradients and Adam's two moments (0 off the CPU);
            ``activations``: bytes of the largest forward/backward pass (the update's minibatch or
            a rollout step's batch), 0 off the CPU or where the policy could not be measured.
        worker_memory: bytes the worker processes add (the forkserver included).
        parameters: the policy's parameter count (None: not measured).
    """

    workers: int
    threads: int
    tasks: int
    files: int
    shared: int
    private: int
    model: int
    activations: int
    worker_memory: int
    parameters: Optional[int]


#: A policy of up to this many parameters is run once on the CPU to count its activations (built again there, its random
#: numbers drawn from a forked generator: a few milliseconds, under 0.2 s for Atari's CNN); a larger one on torch's
#: meta device, which allocates nothing but whose Python kernels import torch._dynamo (2 s of CPU, which a refused
#: config or a dry run would otherwise pay for nothing: a training run imports it anyway, with its Adam).
CPU_PASS_PARAMETERS = 4_000_000


def policy_size(cfg: Config, observation_space: spaces.Space, action_space: spaces.Space) -> tuple[int, int]:
    """``(parameters, activation floats per sample)`` of the policy ``cfg`` describes: counted on torch's meta
    device (shapes only: nothing allocated, no random number drawn), its activations by one pass of a zero sample
    (on the CPU where the policy is small: :data:`CPU_PASS_PARAMETERS`). Raises what building it raises."""
    parameters = sum(p.numel() for p in built_policy(cfg, observation_space, action_space, "meta").parameters())
    device = "cpu" if parameters <= CPU_PASS_PARAMETERS else "meta"
    with torch.random.fork_rng(devices=[]):  # the CPU's policy draws its weights: the run's random numbers stay as they were
        policy = built_policy(cfg, observation_space, action_space, device)
    floats: list[int] = []
    for module in policy.modules():
        if not list(module.children()):
            module.register_forward_hook(lambda m, i, out: floats.append(out.numel() if isinstance(out, torch.Tensor) else 0))
    with torch.device(device), torch.no_grad():
        batch = {
            k: torch.zeros((1, *shape), dtype=torch.from_numpy(np.zeros(0, dtype)).dtype)
            for k, (shape, dtype) in obs_layout(observation_space).items()
        }
        try:  # the critic's pass; the actor's is about as large
            policy.predict_values(
                policy_view(batch, channel_last_keys(observation_space), isinstance(observation_space, spaces.Dict))
            )
        except Exception:  # noqa: BLE001 (an op without a meta kernel: the activations stay unmeasured)
            floats.clear()
    return parameters, 2 * sum(floats)


def built_policy(cfg: Config, observation_space: spaces.Space, action_space: spaces.Space, device: str) -> torch.nn.Module:
    """The policy ``cfg`` describes, built on ``device``, the distributions' value checks off (meta tensors have no values)."""
    validate_args = torch.distributions.Distribution._validate_args
    torch.distributions.Distribution.set_default_validate_args(False)
    try:
        with torch.device(device):
            return build_policy(cfg, observation_space, action_space)
    finally:
        torch.distributions.Distribution.set_default_validate_args(validate_args)


def run_needs(
    cfg: Config, backend: EnvBackend, device: torch.device, parameters: Optional[int], activation_floats: int
) -> Needs:
    """:class:`Needs` of a checked config on its probed env (``parameters``, ``activation_floats``:
    :func:`policy_size`). Raises ``ValueError`` for a rollout too large to lay out at all."""
    layout = cfg.layout(backend.unit)
    n_envs, T, workers = layout.n_envs, cfg.n_steps, layout.processes
    threads = max(cfg.torch_threads, cfg.update_threads or 1)
    # the storage (the normalised stage and the policy's outputs with it: processes stepping envs write them)
    stage = stage_keys_of(backend.observation_space, cfg.normalize, cfg.norm_obs)
    layout_bytes = plan_layout(backend.observation_space, backend.action_space, T, n_envs, cfg.info_keywords, stage).nbytes
    obs_row = sum(
        math.prod(shape) * np.dtype(dtype).itemsize for shape, dtype in obs_layout(backend.observation_space).values()
    )
    learner = (T + 1) * n_envs * obs_row + T * n_envs * 64  # the update's flattened copies, advantages, returns
    if cfg.recurrent:  # each env's states at every step: (h, c) of the actor's and the critic's LSTMs (a GRU's h), float32
        lstm = cfg.lstm_settings
        learner += (
            (T + 1) * n_envs * lstm["n_lstm_layers"] * lstm["lstm_hidden_size"] * 4 * (2 if cfg.rnn_type == "gru" else 4)
        )
    on_cpu = device.type == "cpu"
    batch = max(cfg.minibatch_size, n_envs)
    return Needs(
        workers=workers,
        threads=threads,
        tasks=workers * TASKS_PER_WORKER + HELPER_TASKS + threads,
        files=workers * FILES_PER_WORKER + FILES_SPARE,
        shared=layout_bytes if workers else 0,
        private=learner + (0 if workers else layout_bytes),
        model=16 * (parameters or 0) if on_cpu else 0,
        activations=4 * batch * activation_floats if on_cpu else 0,
        worker_memory=workers * WORKER_BYTES.get(cfg.mp_method, WORKER_BYTES["spawn"])
        + (FORKSERVER_BYTES if workers and cfg.mp_method == "forkserver" else 0),
        parameters=parameters,
    )


def resource_problems(cfg: Config, needs: Needs, machine: Machine) -> list[str]:
    """Every way ``needs`` does not fit ``machine``, one line each naming the setting to change."""
    problems = core_problems(cfg, machine)
    cause = (
        f"num_workers={cfg.num_workers}"
        if needs.workers * TASKS_PER_WORKER >= needs.threads
        else f"torch_threads={cfg.torch_threads}"
    )
    if machine.task_room is not None and needs.tasks > machine.task_room:
        problems.append(
            f"{cause}: the run needs about {needs.tasks} processes and threads ({needs.workers} workers, "
            f"{needs.threads} torch threads), the kernel can create {machine.task_room} more (pid_max, "
            f"threads-max); use fewer"
        )
    if machine.nproc_limit is not None and machine.user_tasks + needs.tasks > machine.nproc_limit:
        problems.append(
            f"{cause}: the run needs about {needs.tasks} processes and threads ({needs.workers} workers, "
            f"{needs.threads} torch threads), this user runs {machine.user_tasks} of the {machine.nproc_limit} "
            f"that ulimit -u allows; use fewer, or raise ulimit -u"
        )
    files = machine.open_files + needs.files
    if machine.nofile_limit is not None and files > machine.nofile_limit:
        problems.append(
            f"num_workers={cfg.num_workers}: {needs.workers} workers need about {files} open files, ulimit -n "
            f"allows {machine.nofile_limit}; raise it (ulimit -n {2 ** math.ceil(math.log2(files))}), or use "
            f"fewer workers"
        )
    return problems + memory_problems(cfg, needs, machine)


def core_problems(cfg: Config, machine: Machine) -> list[str]:
    """More workers or torch threads than :data:`CORES_FACTOR` per CPU this process may run on, without ``--oversubscribe``."""
    most = CORES_FACTOR * machine.cpus
    if cfg.oversubscribe:
        return []
    asked = {
        "num_workers": cfg.num_workers or 0,
        "torch_threads": cfg.torch_threads,
        "update_threads": cfg.update_threads or 0,
    }
    return [
        f"{name}={count}: more than {CORES_FACTOR}x the {machine.cpus} CPUs this process may run on ({most}); use at most "
        f"{most}, or --oversubscribe True if you mean it (slow envs, such as games, may want more workers than cores)"
        for name, count in asked.items()
        if count > most
    ]


def memory_problems(cfg: Config, needs: Needs, machine: Machine) -> list[str]:
    """The rollout storage against /dev/shm (and the temp dir), and everything against the memory available."""
    problems, rollout = [], f"n_steps x n_envs = {cfg.n_steps} x {cfg.num_envs}"
    in_shm = needs.shared
    if needs.shared:
        refusal, _ = shared_memory_problem(needs.shared, machine.shm_free, machine.tmp_free)
        if refusal:
            problems.append(f"{rollout}: {refusal}")
        if machine.shm_free is not None and needs.shared > machine.shm_free:
            in_shm = 0  # a file in the temp dir: page cache, not memory the run must have
    parts = {
        rollout: in_shm + needs.private,
        f"net_arch={cfg.net_arch}": needs.model,
        f"batch_size={cfg.minibatch_size}": needs.activations,
        f"num_workers={cfg.num_workers}": needs.worker_memory,
    }
    total = sum(parts.values())
    if machine.memory_available is not None and total > machine.memory_available:
        largest = max(parts, key=parts.__getitem__)
        detail = (
            f"rollout storage {parts[rollout] / MB:.0f} MB, the policy and Adam {needs.model / MB:.0f} MB, "
            f"the update's activations {needs.activations / MB:.0f} MB, {needs.workers} workers "
            f"{needs.worker_memory / MB:.0f} MB"
        )
        problems.append(
            f"{largest}: the run needs about {total / MB:.0f} MB of memory ({detail}), "
            f"{machine.memory_available / MB:.0f} MB are available; make the largest part smaller"
        )
    return problems
