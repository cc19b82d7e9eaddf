"""GRPO, as pure functions: group-relative advantages and the clipped token-level loss.

No model, optimizer or data loading here; `swarm.policy.trainer` wires these to a model.
Advantages are plain Python over plain lists (property-tested); the loss works on tensors
of per-token log-probs so it is testable with hand-made numbers.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the pure advantage functions (used without a model) need no torch
    import torch


def group_advantages(
    rewards: Sequence[float], scale_by_std: bool = True, eps: float = 1e-6
) -> list[float]:
    """Each completion's reward minus its group's mean, optionally divided by the group's std.

    Sums to zero over a group (up to float rounding); a group whose rewards are all equal
    gets all zeros (it carries no learning signal and is dropped before sampling).
    """
    if not rewards:
        return []
    mean = math.fsum(rewards) / len(rewards)
    centered = [r - mean for r in rewards]
    if all(abs(c) <= eps for c in centered):
        return [0.0] * len(rewards)
    if not scale_by_std:
        return centered
    std = math.sqrt(math.fsum(c * c for c in centered) / len(rewards))
    return [c / (std + eps) for c in centered]


def has_signal(rewards: Sequence[float], eps: float = 1e-6) -> bool:
    """Whether a group's rewards differ, i.e. whether GRPO can learn anything from it."""
    return bool(rewards) and (max(rewards) - min(rewards)) > eps


@dataclass(frozen=True)
class LossParts:
    """The loss and the diagnostics worth logging from one (micro-)batch."""

    loss: torch.Tensor
    clip_fraction: float
    kl: float


def clipped_policy_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    clip_low: float = 0.2,
    clip_high: float = 0.28,
    ref_logprobs: torch.Tensor | None = None,
    kl_coef: float = 0.0,
    normalizer: float | None = None,
) -> LossParts:
    """Token-level clipped policy-gradient loss (PPO/GRPO), asymmetric clip, optional KL.

    Shapes: `logprobs`, `old_logprobs`, `mask` and `ref_logprobs` are [batch, tokens];
    `advantages` is [batch] (one advantage per completion, shared by its tokens).
    The loss is summed over valid tokens and divided by `normalizer` (default: the number of
    valid tokens), so micro-batches of one step share one normalizer and add up exactly.
    KL to the reference uses the non-negative k3 estimator exp(r - p) - (r - p) - 1.
    """
    import torch

    mask = mask.to(logprobs.dtype)
    tokens = float(mask.sum().item()) if normalizer is None else float(normalizer)
    tokens = max(tokens, 1.0)
    ratio = torch.exp(logprobs - old_logprobs)
    adv = advantages.unsqueeze(-1).to(logprobs.dtype)
    unclipped = ratio * adv
    clipped = torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high) * adv
    per_token = -torch.minimum(unclipped, clipped)
    kl_value = 0.0
    if ref_logprobs is not None and kl_coef > 0:
        diff = ref_logprobs - logprobs
        kl_tokens = torch.exp(diff) - diff - 1.0
        per_token = per_token + kl_coef * kl_tokens
        kl_value = float((kl_tokens * mask).sum().item() / max(float(mask.sum().item()), 1.0))
    loss = (per_token * mask).sum() / tokens
    with torch.no_grad():
        was_clipped = ((ratio < 1.0 - clip_low) | (ratio > 1.0 + clip_high)).to(mask.dtype)
        clip_fraction = float(
            (was_clipped * mask).sum().item() / max(float(mask.sum().item()), 1.0)
        )
    return LossParts(loss=loss, clip_fraction=clip_fraction, kl=kl_value)
