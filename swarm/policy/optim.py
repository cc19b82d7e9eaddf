"""Adam and AdamW with their two moments stored in bf16: half the optimizer's memory.

A real model's AdamW state is twice its fp32 weights (SmolLM2-135M: 1.03 GB of a node's
~3.7 GB). Stored in bf16 the moments take half that, while every step still computes in
fp32: each parameter's moments are widened, updated, used for the step and rounded back
(round to nearest). bf16 keeps 8 bits of mantissa, a relative error of at most 2^-9 per
rounding; the decay of the second moment (beta2 = 0.99: 1 % a step) stays well above it.
`tests/unit/policy/test_optim.py` checks that the weights follow fp32 AdamW's closely.

The update is torch's: AdamW's decoupled weight decay, bias correction, eps added to the
square root of the corrected second moment. A state loaded from a checkpoint (torch casts a
loaded state to the parameter's dtype, fp32) is rounded back to bf16 at the next step.

Why not a library: torchao's low-precision optimizers compile their step with
`torch.compile` (on a CPU a C++ toolchain, and ~30 s before the first step), and
bitsandbytes' 8-bit ones target CUDA.
"""

from __future__ import annotations

import torch

STATE_DTYPE = torch.bfloat16


class Bf16StateAdam(torch.optim.Optimizer):
    """Adam (`weight_decay` 0) or AdamW (decoupled `weight_decay`) with bf16 moments."""

    def __init__(self, params, lr: float, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0):
        if lr < 0 or eps < 0 or weight_decay < 0:
            raise ValueError("lr, eps and weight_decay must not be negative")
        if not all(0.0 <= b < 1.0 for b in betas):
            raise ValueError(f"betas must lie in [0, 1): {betas}")
        defaults = {"lr": lr, "betas": tuple(betas), "eps": eps, "weight_decay": weight_decay}
        super().__init__(params, defaults)

    @torch.no_grad()
    def step(self, closure=None):
        """One step over every parameter that has a gradient."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    self._update(p, p.grad, group)
        return loss

    def _update(self, p: torch.Tensor, grad: torch.Tensor, group: dict) -> None:
        state = self.state[p]
        if not state:
            state["step"] = torch.tensor(0.0)
            state["exp_avg"] = torch.zeros_like(p, dtype=STATE_DTYPE)
            state["exp_avg_sq"] = torch.zeros_like(p, dtype=STATE_DTYPE)
        beta1, beta2 = group["betas"]
        state["step"] += 1
        step = float(state["step"])
        grad = grad.float()
        exp_avg = state["exp_avg"].float().lerp_(grad, 1 - beta1)
        exp_avg_sq = state["exp_avg_sq"].float().mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
        state["exp_avg"] = exp_avg.to(STATE_DTYPE)
        state["exp_avg_sq"] = exp_avg_sq.to(STATE_DTYPE)
        if group["weight_decay"]:
            p.mul_(1 - group["lr"] * group["weight_decay"])
        denominator = (exp_avg_sq / (1 - beta2**step)).sqrt_().add_(group["eps"])
        p.addcdiv_(exp_avg, denominator, value=-group["lr"] / (1 - beta1**step))
