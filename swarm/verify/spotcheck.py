"""Spot check: could the claimed model have sampled these tokens? A light proof of inference.

A peer that declares our model, our base weights and our policy version claims, in effect,
that it sampled its completions from the distribution we can compute ourselves. For a few
of its completions we run one forward pass over its own token ids and flag any token the
declared sampler could not have drawn: outside top-k, outside the top-p nucleus, not the
argmax under greedy decoding, or simply less likely than `min_prob`. We also check that the
token ids spell the completion text, so honest tokens cannot cover a forged text.

It is a spot check, not a proof: peers' weights at the same version number can differ
(every trainer applies its own updates) and their prompt may differ from ours, so the
bounds are deliberately loose; they catch text that was written, not sampled (hand-made
answers, another model's output, tampered tokens), not subtle shifts.

`implausible_tokens` is pure (tensors in, positions out); `SpotChecker` is the shell that
runs the model. Deliberately not here: deciding which peers to check (the node does).
"""

from __future__ import annotations

import hashlib
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from swarm.config import VerifySection
from swarm.core.errors import RejectedMessage
from swarm.core.reasons import Reason
from swarm.wire import RolloutGroup, Sampling


@dataclass(frozen=True)
class SpotCheckSettings:
    """How a spot check judges tokens (`verify.spot_check_completions` and
    `spot_check_min_prob`, defaults the config's; the slacks are no config keys)."""

    completions: int = VerifySection().spot_check_completions  # per group (0: off)
    # a token less likely than this under the declared sampler is implausible
    min_prob: float = VerifySection().spot_check_min_prob
    nucleus_slack: float = (
        0.02  # extra top-p mass allowed, for numeric differences between backends
    )
    greedy_slack: float = (
        0.05  # logit margin within which a greedy token may differ from the argmax
    )

    @classmethod
    def from_config(cls, config) -> SpotCheckSettings:
        v = config.verify
        return cls(completions=v.spot_check_completions, min_prob=v.spot_check_min_prob)


def implausible_tokens(
    logits: torch.Tensor, tokens: Sequence[int], sampling: Sampling, settings: SpotCheckSettings
) -> list[tuple[int, str]]:
    """(position, why) for each token the declared sampler could not plausibly have drawn.

    `logits[t]` are the raw model logits that predict `tokens[t]` ([T, V], T == len(tokens)).
    The sampler is modelled as Hugging Face's: temperature, then top-k, then top-p.
    """
    if logits.shape[0] != len(tokens):
        raise ValueError(f"{logits.shape[0]} logit rows for {len(tokens)} tokens")
    logits = logits.float()
    vocab = logits.shape[-1]
    out: list[tuple[int, str]] = []
    for t, token in enumerate(tokens):
        row = logits[t]
        if not 0 <= token < vocab:
            out.append((t, f"token id {token} outside the vocabulary"))
            continue
        if sampling.temperature <= 0:
            if row[token] < row.max() - settings.greedy_slack:
                out.append((t, "not the greedy token"))
            continue
        scaled = row / sampling.temperature
        if sampling.top_k > 0:
            rank = int((scaled > scaled[token]).sum())
            if rank >= sampling.top_k:
                out.append((t, f"rank {rank} outside top_k={sampling.top_k}"))
                continue
            kth = torch.topk(scaled, min(sampling.top_k, vocab)).values[-1]
            scaled = scaled.masked_fill(scaled < kth, -math.inf)
        probs = torch.softmax(scaled, dim=-1)
        p = float(probs[token])
        if sampling.top_p < 1.0:
            mass_before = float(probs[probs > p].sum())
            if mass_before > sampling.top_p + settings.nucleus_slack:
                out.append(
                    (
                        t,
                        f"outside the top_p={sampling.top_p} nucleus ({mass_before:.3f} of the mass ranks above it)",
                    )
                )
                continue
        if p < settings.min_prob:
            out.append((t, f"probability {p:.2e} below {settings.min_prob:.0e}"))
    return out


def chosen_completions(group: RolloutGroup, content_hash: str, count: int) -> list[int]:
    """Which completions to check: a fixed draw seeded by the group's hash (reproducible offline)."""
    candidates = [i for i, text in enumerate(group.completions) if text]
    rng = random.Random(hashlib.sha256(content_hash.encode()).digest())
    return sorted(rng.sample(candidates, min(count, len(candidates))))


class SpotChecker:
    """Runs the spot check on groups with our model (the node decides which groups qualify)."""

    def __init__(self, model, tokenizer, settings: SpotCheckSettings):
        self.model = model
        self.tokenizer = tokenizer
        self.settings = settings
        self.checked = 0  # completions checked, for reports and benchmarks

    def check(self, group: RolloutGroup, content_hash: str, prompt: str) -> None:
        """Raise `RejectedMessage(implausible_tokens)` if a checked completion fails."""
        if self.settings.completions <= 0:
            return
        if len(group.token_ids) != len(group.completions):
            raise RejectedMessage(
                Reason.IMPLAUSIBLE_TOKENS,
                "declares our model and version but carries no token ids to check",
            )
        prompt_ids = self.tokenizer(prompt, add_special_tokens=False)["input_ids"]
        for i in chosen_completions(group, content_hash, self.settings.completions):
            tokens = list(group.token_ids[i])
            if self.tokenizer.decode(tokens, skip_special_tokens=False) != group.completions[i]:
                raise RejectedMessage(
                    Reason.IMPLAUSIBLE_TOKENS,
                    f"completion {i}: its token ids do not spell its text",
                )
            if not tokens:
                continue
            logits = self.logits(prompt_ids, tokens)
            bad = implausible_tokens(logits, tokens, group.sampling, self.settings)
            self.checked += 1
            if bad:
                position, why = bad[0]
                raise RejectedMessage(
                    Reason.IMPLAUSIBLE_TOKENS,
                    f"completion {i}, token {position}: {why} ({len(bad)} of {len(tokens)} tokens)",
                )

    @torch.no_grad()
    def logits(self, prompt_ids: list[int], tokens: list[int]) -> torch.Tensor:
        """Our model's logits that predict each of `tokens` after the prompt ([T, V])."""
        device = next(self.model.parameters()).device
        vocab = self.model.get_input_embeddings().num_embeddings
        safe = [
            t if 0 <= t < vocab else 0 for t in tokens
        ]  # out-of-range ids are flagged, not embedded
        ids = torch.tensor([prompt_ids + safe], device=device)
        was_training = self.model.training
        self.model.eval()
        try:
            logits = self.model(input_ids=ids).logits[0]
        finally:
            self.model.train(was_training)
        # The logits at position j predict token j + 1.
        return logits[len(prompt_ids) - 1 : len(prompt_ids) - 1 + len(tokens)]
