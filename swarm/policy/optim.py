"""Adam and AdamW with their two moments stored in bf16: half the optimizer's memory.

A real model's AdamW state is twice its fp32 weights (SmolLM2-135M: 1.03 GB of a node's
~3.7 GB). Stored in bf16 the moments take half that, while every step still computes in
fp32: each parameter's moments are widened, updated, used for the step and rounded back
(round to nearest), `CHUNK` weights at a time so that the step's temporaries stay small.
bf16 keeps 8 bits of mantissa, a relative error of at most 2^-9 per rounding; the decay of
the second moment (beta2 = 0.99: 1 % a step) stays well above it.
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
# Weights stepped at once: the fp32 temporaries of a step stay ~4 x 16 MB, however large
# the tensor (SmolLM2's embedding alone is 28 M weights: 0.45 GB of temporaries in one go).
CHUNK = 1 << 22


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
        for key in ("exp_avg", "exp_avg_sq"):  # a loaded state comes back in fp32
            if state[key].dtype != STATE_DTYPE:
                state[key] = state[key].to(STATE_DTYPE)
        state["step"] += 1
        step = float(state["step"])
        views = [t.reshape(-1) for t in (p, grad, state["exp_avg"], state["exp_avg_sq"])]
        if any(v.data_ptr() != t.data_ptr() for v, t in zip(views, (p, grad), strict=False)):
            raise ValueError("Bf16StateAdam needs contiguous parameters and gradients")
        weights, grads, means, squares = views
        for start in range(0, p.numel(), CHUNK):
            part = slice(start, start + CHUNK)
            _step_chunk(weights[part], grads[part], means[part], squares[part], group, step)


def _step_chunk(p, grad, exp_avg, exp_avg_sq, group: dict, step: float) -> None:
    """One step of `CHUNK` weights at most: their moments widened to fp32, updated, rounded
    back, and the weights moved."""
    beta1, beta2 = group["betas"]
    grad = grad.float()
    m = exp_avg.float().lerp_(grad, 1 - beta1)
    v = exp_avg_sq.float().mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
    exp_avg.copy_(m)
    exp_avg_sq.copy_(v)
    if group["weight_decay"]:
        p.mul_(1 - group["lr"] * group["weight_decay"])
    denominator = v.div_(1 - beta2**step).sqrt_().add_(group["eps"])
    p.addcdiv_(m, denominator, value=-group["lr"] / (1 - beta1**step))
