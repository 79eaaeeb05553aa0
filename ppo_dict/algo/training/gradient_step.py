"""sb3's ``zero_grad``, ``clip_grad_norm_`` and ``Adam.step`` of one minibatch, without their per-call overhead; the
check of a loaded optimizer's state."""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn
from torch.optim.adam import adam as adam_functional


class GradientStep:
    """sb3's ``zero_grad``, ``clip_grad_norm_`` and ``Adam.step`` of one minibatch without their
    per-call overhead: the same ATen operations in the same order on the same tensors, so every
    bit stays sb3's (tests/test_update.py compares them with torch's own calls).

    ``zero_grad`` sets the gradients to None as ``Optimizer.zero_grad`` does; the norm is
    ``clip_grad_norm_``'s foreach path (the one it takes on CPU and CUDA); Adam runs torch's
    multi-tensor (foreach) implementation, which on CPU calls the per-tensor kernels of the
    single-tensor loop sb3 gets by default: the same values, one Python call for all parameters.
    The param groups are left alone (no ``foreach`` flag is written), so the optimizer's
    ``state_dict`` stays what sb3 saves. Whatever the fast path does not cover (other optimizers
    or Adam settings, parameters without a gradient or without Adam state yet, hooks) goes
    through torch's own calls.
    """

    def __init__(self, policy: nn.Module, optimizer: torch.optim.Optimizer):
        self.optimizer = optimizer
        self.params = list(policy.parameters())
        self.adam_groups = [group for group in optimizer.param_groups if _plain_adam_group(optimizer, group)]
        if len(self.adam_groups) != len(optimizer.param_groups):
            self.adam_groups = []

    def zero_grad(self) -> None:
        """``optimizer.zero_grad()`` (set_to_none): every parameter's gradient dropped."""
        for param in self.params:
            param.grad = None

    def clip_grad_norm(self, max_norm: float) -> torch.Tensor:
        """``clip_grad_norm_(policy.parameters(), max_norm)``: scales the gradients in place, returns the total norm."""
        grads = [p.grad for p in self.params if p.grad is not None]
        if not grads or len({(g.device, g.dtype) for g in grads}) != 1 or type(grads[0]) is not torch.Tensor:
            return torch.nn.utils.clip_grad_norm_(self.params, max_norm)
        with torch.no_grad():  # torch's _get_total_norm and _clip_grads_with_norm_, expression for expression
            total_norm = torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads, 2.0)), 2.0)
            clip_coef = float(max_norm) / (total_norm + 1e-6)
            torch._foreach_mul_(grads, torch.clamp(clip_coef, max=1.0))
        return total_norm

    def adam_step(self) -> None:
        """``optimizer.step()``."""
        if not self.adam_groups or self.optimizer._optimizer_step_pre_hooks or self.optimizer._optimizer_step_post_hooks:
            self.optimizer.step()
            return
        state = self.optimizer.state
        lists = []
        for group in self.adam_groups:
            params = [p for p in group["params"] if p.grad is not None]
            if len(params) != len(group["params"]) or any(len(state[p]) != 3 for p in params):
                self.optimizer.step()  # the first step creates the state; a missing gradient skips its parameter
                return
            lists.append((group, params))
        with torch.no_grad():
            for group, params in lists:
                beta1, beta2 = group["betas"]
                adam_functional(
                    params,
                    [p.grad for p in params],
                    [state[p]["exp_avg"] for p in params],
                    [state[p]["exp_avg_sq"] for p in params],
                    [],
                    [state[p]["step"] for p in params],
                    foreach=True,
                    amsgrad=False,
                    beta1=beta1,
                    beta2=beta2,
                    lr=group["lr"],
                    weight_decay=group["weight_decay"],
                    eps=group["eps"],
                    maximize=group["maximize"],
                )


def _plain_adam_group(optimizer: torch.optim.Optimizer, group: dict[str, Any]) -> bool:
    """Whether ``group`` is one the foreach path runs with the single-tensor path's values: torch's
    Adam, float hyper-parameters, no amsgrad, capturable, differentiable, fused or complex parameters."""
    return (
        type(optimizer) is torch.optim.Adam
        and group.get("foreach") in (None, True)
        and not group.get("fused")
        and not group.get("amsgrad")
        and not group.get("capturable")
        and not group.get("differentiable")
        and not group.get("decoupled_weight_decay")
        and not any(isinstance(group[k], torch.Tensor) for k in ("lr", "eps", "weight_decay"))
        and not any(isinstance(b, torch.Tensor) for b in group["betas"])
        and not any(torch.is_complex(p) or type(p) is not nn.Parameter for p in group["params"])
    )


def optimizer_state_problem(optimizer: torch.optim.Optimizer) -> str:
    """Why a loaded optimizer's state does not fit its parameters (a moment of another shape, a hyperparameter
    that is not a finite number); ``""`` when it fits."""
    for group in optimizer.param_groups:
        for name, value in group.items():
            numbers = value if isinstance(value, (tuple, list)) and name != "params" else (value,) if name != "params" else ()
            if any(isinstance(v, (int, float)) and not isinstance(v, bool) and not math.isfinite(v) for v in numbers):
                return f"its {name} is {value!r}"
        for i, parameter in enumerate(group["params"]):
            for name, value in optimizer.state.get(parameter, {}).items():
                if isinstance(value, torch.Tensor) and value.dim() > 0 and value.shape != parameter.shape:
                    return (
                        f"the {name} of parameter {i} has the shape {tuple(value.shape)}, the parameter "
                        f"{tuple(parameter.shape)}"
                    )
    return ""
