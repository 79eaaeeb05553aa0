"""A rollout's policy step replayed as a CUDA graph (``--cuda_graphs``): one launch instead of dozens.

A small MLP's policy step on a GPU is launch-bound: each of its few dozen kernels (the trunks'
matmuls and activations, the heads, the noise, the sample, its log-prob) takes a few microseconds
to launch and less to run. :class:`GraphedStep` captures one :class:`~ppo_dict.algo.rollout.rollout_step.PolicyStep`
call per batch shape with ``torch.cuda.CUDAGraph`` and replays it, as torch's documentation on CUDA
graphs describes (``torch.cuda.graph``): warm-up calls on a side stream (lazy initialisations,
cuBLAS workspaces), the capture, then per step a copy of the observations into the graph's static
input and ``replay()``; the outputs are the graph's static tensors, read (copied to pinned memory)
before the next replay.

* **Randomness.** The noise is drawn by ``normal_`` / ``multinomial`` with torch's default CUDA
  generator, which ``torch.cuda.graph`` registers with the capture: each replay advances its Philox
  offset, so each step draws new noise (and a seed still reproduces a run). A generator of one's
  own would have to be registered with the graph (``CUDAGraph.register_generator_state``).
* **Parameters.** The graph reads the parameters' memory: the optimizer and ``load_state_dict``
  update them in place, so a replay sees the current weights. What ``refresh`` recomputes once per
  rollout (the Gaussian's scale) is made as new tensors, so a refresh captures again at the next
  call (a few eager calls and a capture per rollout).
* **Scope.** Feed-forward policies whose action space has a lean sampler, without gSDE (its
  exploration matrices are new tensors at sb3's cadence); the config refuses the rest
  (``Config.check``). On a CPU device the step runs eagerly, and says so once.
"""

from __future__ import annotations

import sys
from typing import Any, Optional

import torch

from ppo_dict.algo.rollout.rollout_step import Out, PolicyStep
from ppo_dict.data.storage import TensorObs

#: Eager calls before a capture (torch's examples use 3: lazy initialisations happen outside the graph).
WARMUP_CALLS = 3


def _clone(obs: TensorObs) -> TensorObs:
    """A contiguous copy on the same device: the graph's static input."""
    return (
        {k: v.clone(memory_format=torch.contiguous_format) for k, v in obs.items()}
        if isinstance(obs, dict)
        else obs.clone(memory_format=torch.contiguous_format)
    )


def _copy_into(static: TensorObs, obs: TensorObs) -> None:
    if isinstance(static, dict):
        for key, tensor in static.items():
            tensor.copy_(obs[key], non_blocking=True)
    else:
        static.copy_(obs, non_blocking=True)


class GraphedStep:
    """``step`` (a :class:`PolicyStep` of one batch size) replayed as a CUDA graph; eager off CUDA.

    Called as the step is (with ``out``, the CPU's storage rows, eagerly; ``rows`` matter only to gSDE,
    which ``--cuda_graphs`` refuses: on a GPU the outputs come back through the collector's pinned
    buffers); every other attribute
    (``value``, ``critic``, ...) is the step's own, run eagerly.
    """

    #: Whether the eager fallback's line was printed (once per process).
    said_why = False

    def __init__(self, step: PolicyStep):
        self.step = step
        device = step.policy.value_net.weight.device
        self.eager_reason: Optional[str] = None
        if device.type != "cuda":
            self.eager_reason = (
                f"note: --cuda_graphs: the policy runs on {device}, and CUDA graphs need a CUDA device: "
                f"policy steps run eagerly"
            )
        elif step.sampler is None:  # ActorCritic.forward's distribution objects (unmasked MultiBinary): not captured
            self.eager_reason = (
                "note: --cuda_graphs: this action space is sampled through the distribution objects, not "
                "captured: policy steps run eagerly"
            )
        self.graph: Optional[Any] = None  # torch.cuda.CUDAGraph, once captured
        self.static_obs: Optional[TensorObs] = None
        self.static_masks: Optional[torch.Tensor] = None
        self.static_out: Optional[tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self.step, name)

    def refresh(self) -> None:
        """The step's refresh (new tensors for the sampler's scale): the graph is captured again at the next call."""
        self.step.refresh()
        self.graph = None

    def __call__(
        self, obs: TensorObs, out: Optional[Out] = None, rows: Optional[slice] = None, masks: Optional[torch.Tensor] = None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        if self.eager_reason is not None or out is not None:  # rows: gSDE's alone, which --cuda_graphs refuses
            if self.eager_reason is not None and not GraphedStep.said_why:
                GraphedStep.said_why = True
                print(self.eager_reason, file=sys.stderr, flush=True)
            return self.step(obs, out=out, rows=rows, masks=masks)
        if self.graph is None:
            self._capture(obs, masks)
        _copy_into(self.static_obs, obs)
        if masks is not None:
            self.static_masks.copy_(masks, non_blocking=True)
        self.graph.replay()
        return self.static_out

    def _capture(self, obs: TensorObs, masks: Optional[torch.Tensor]) -> None:
        """Warm up on a side stream, then capture one call on the static inputs (torch.cuda.graph's recipe)."""
        self.graph = None
        self.static_obs = _clone(obs)
        self.static_masks = None if masks is None else masks.clone()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(WARMUP_CALLS):
                self.step(self.static_obs, masks=self.static_masks)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            self.static_out = self.step(self.static_obs, masks=self.static_masks)
        self.graph = graph
