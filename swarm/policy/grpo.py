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


def joint_advantages(
    shared: Sequence[float], own: Sequence[float], scale_by_std: bool = True, eps: float = 1e-6
) -> tuple[list[float], list[float]]:
    """Advantages of a peer's completions and the receiver's own on the same task, over both.

    The receiver generated `own` for a task a peer shared with rewards `shared` (re-scored);
    one baseline for all of them (LUFFY's mixed-policy normalisation). Where the peer's
    completions share something the receiver's lack (the answer tag, the right kind of
    answer), the peer's mean exceeds the joint mean, so that feature gets a positive net
    push: sum(shared advantages) = n_shared * (mean(shared) - joint mean) / std.
    """
    advantages = group_advantages([*shared, *own], scale_by_std, eps)
    return advantages[: len(shared)], advantages[len(shared) :]


def receiver_advantages(rewards: Sequence[float], baseline: float) -> list[float]:
    """A shared completion's advantage against the receiver's own expectation on its family.

    `baseline` is the receiver's recent mean reward on the task's family (no extra
    generation). A peer's group that is all right where the receiver is usually wrong gets
    all-positive advantages (1 - baseline each), which GRPO's own baseline would zero.
    """
    return [r - baseline for r in rewards]


def part_weights(own_tokens: int, shared_tokens: int, shared_weight: float) -> tuple[float, float]:
    """Per-token loss weights (own, shared) that fix the shared part's share of the loss.

    With the trainer's normaliser N = own_tokens + shared_tokens, the returned weights make
    the loss sum(own)/own_tokens + shared_weight * sum(shared)/shared_tokens: own tokens keep
    the same total weight whatever the number of shared tokens, and the shared part weighs
    `shared_weight` times the own part (a part with no tokens gets weight 0).
    """
    total = own_tokens + shared_tokens
    own = total / own_tokens if own_tokens else 0.0
    shared = shared_weight * total / shared_tokens if shared_tokens else 0.0
    return own, shared


def shaped_weight(prob: float, gamma: float) -> float:
    """The factor policy shaping puts on d log p: d/dθ [p/(p+γ)] = γ p/(p+γ)^2 · d log p.

    LUFFY (arXiv 2504.14945) replaces the off-policy importance ratio p/1 by f(p) = p/(p+γ).
    Against plain importance weighting (factor p) its factor is larger by γ/(p+γ)^2, which
    exceeds 1 wherever p < sqrt(γ) - γ and tends to 1/γ for small p: a token the receiver
    finds unlikely is not ignored. Against SAPO's ratio 1 (factor 1) it is at most 1/4 (at
    p = γ) and γ/(1+γ)^2 for a token the receiver already predicts (p = 1).
    """
    return gamma * prob / (prob + gamma) ** 2


def has_signal(rewards: Sequence[float], eps: float = 1e-6) -> bool:
    """Whether a group's rewards differ, i.e. whether GRPO can learn anything from it."""
    return bool(rewards) and (max(rewards) - min(rewards)) > eps


def truncated_importance_weights(
    trainer_logprobs: torch.Tensor,
    sampler_logprobs: torch.Tensor,
    mask: torch.Tensor,
    cap: float,
) -> torch.Tensor:
    """Per-token weights min(π_trainer / π_sampler, cap) for completions another engine sampled.

    A generator (vLLM's kernels, a paged cache, another precision) and the trainer give the
    same tokens slightly different log-probs, so the completions are slightly off-policy for
    the trainer; weighting each token's loss by the ratio corrects for it, and truncating the
    ratio at `cap` bounds the variance a rare token would add (truncated importance
    sampling). All [batch, tokens]; a token the sampler gave no log-prob for (NaN) and a
    padding position weigh 1. No gradient flows through the weights.
    """
    import torch

    with torch.no_grad():
        ratio = torch.exp(trainer_logprobs.float() - sampler_logprobs.float())
        ratio = torch.where(torch.isnan(ratio), torch.ones_like(ratio), ratio).clamp(max=cap)
        return torch.where(mask.bool(), ratio, torch.ones_like(ratio))


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
    weights: torch.Tensor | None = None,
    shaping: torch.Tensor | None = None,
    token_weights: torch.Tensor | None = None,
) -> LossParts:
    """Token-level clipped policy-gradient loss (PPO/GRPO), asymmetric clip, optional KL.

    Shapes: `logprobs`, `old_logprobs`, `mask` and `ref_logprobs` are [batch, tokens];
    `advantages` is [batch] (one advantage per completion, shared by its tokens).
    The loss is summed over valid tokens and divided by `normalizer` (default: the number of
    valid tokens), so micro-batches of one step share one normalizer and add up exactly.
    KL to the reference uses the non-negative k3 estimator exp(r - p) - (r - p) - 1.

    `weights` ([batch], default 1) multiplies each completion's token losses (`part_weights`).
    `shaping` ([batch], default 0) is policy shaping's γ per completion: where it is positive
    the token loss is -A·p/(p+γ) with p = exp(logprob), unclipped (LUFFY's regularised
    importance weight for off-policy tokens, `shaped_weight`); 0 keeps the clipped ratio.
    `token_weights` ([batch, tokens], default 1) multiplies each token's policy loss (the
    truncated importance weights of `truncated_importance_weights`), not the KL term.
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
    if shaping is not None and bool((shaping > 0).any()):
        gamma = shaping.to(logprobs.dtype).unsqueeze(-1)
        prob = torch.exp(logprobs)
        shaped = -adv * prob / (prob + gamma.clamp(min=1e-12))
        per_token = torch.where(gamma > 0, shaped, per_token)
    if token_weights is not None:
        per_token = per_token * token_weights.to(logprobs.dtype)
    kl_value = 0.0
    if ref_logprobs is not None and kl_coef > 0:
        diff = ref_logprobs - logprobs
        kl_tokens = torch.exp(diff) - diff - 1.0
        per_token = per_token + kl_coef * kl_tokens
        kl_value = float((kl_tokens * mask).sum().item() / max(float(mask.sum().item()), 1.0))
    if weights is not None:
        per_token = per_token * weights.to(logprobs.dtype).unsqueeze(-1)
    loss = (per_token * mask).sum() / tokens
    with torch.no_grad():
        was_clipped = ((ratio < 1.0 - clip_low) | (ratio > 1.0 + clip_high)).to(mask.dtype)
        clip_fraction = float(
            (was_clipped * mask).sum().item() / max(float(mask.sum().item()), 1.0)
        )
    return LossParts(loss=loss, clip_fraction=clip_fraction, kl=kl_value)
