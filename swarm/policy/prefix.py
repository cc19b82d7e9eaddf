"""Shared-prefix forward: each prompt encoded once, its completions attending to its keys/values.

A GRPO group is G completions of one prompt. The plain training forward (`pack_batch` in
`swarm.policy.trainer`) runs prompt + completion for every completion, so each prompt goes
through the model G times. Here a micro-batch's distinct prompts run once (left-padded, one
row each, with the cache on); the cache is then expanded over the completions (row i gets the
keys/values of its own prompt) and the completions run as a continuation of it, with the
positions and attention mask the plain forward would give them. Every hidden state of a
completion token is then the same function of the same inputs as in the plain forward, so
the log-probs, the loss and every gradient are equal within float tolerance (the test suite
checks this for the built-in model and for Llama- and Qwen2-shaped models). Gradients flow
into the prompt's pass through the expanded cache (indexing sums the G completions'
gradients back onto their prompt), as in Prefix Grouper (arXiv 2506.05433).

`prefix_hidden` returns the final hidden states that predict each completion token, so the
caller maps them to log-probs however it likes (in chunks, under autocast, ...).

Gradient checkpointing: the prompt keys/values travel in a cache that a layer replayed in
the backward pass cannot change (`swarm.policy.prefix_cache`), so both passes run under
non-reentrant checkpointing, layer by layer, as the plain forward does; gradients match it.

Limits: the model must be a Hugging Face causal LM whose decoder (`model.base_model`) takes
`past_key_values` (or `cache`), `position_ids` and a 2-D `attention_mask` (Llama, Qwen2,
Mistral, Gemma, Phi-3, ...), with every decoder layer attending through that cache (checked:
a layer that ignores it raises `ModelError`). Under reentrant checkpointing, or with a
transformers that drops the cache in every checkpointed layer, `supports_shared_prefix`
says no and the caller uses the plain forward.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.utils.checkpoint

from swarm.core.errors import ModelError


@dataclass(frozen=True)
class PrefixGroups:
    """Which prompt each row uses: `prompts` holds each distinct prompt once (first-seen order)
    and `rows[i]` is the index in `prompts` of row i's prompt."""

    prompts: tuple[tuple[int, ...], ...]
    rows: tuple[int, ...]


def group_prompts(prompts: Sequence[Sequence[int]]) -> PrefixGroups:
    """Distinct prompts (by token ids, first-seen order) and each row's index among them."""
    index: dict[tuple[int, ...], int] = {}
    rows = []
    for prompt in prompts:
        key = tuple(prompt)
        rows.append(index.setdefault(key, len(index)))
    return PrefixGroups(prompts=tuple(index), rows=tuple(rows))


@dataclass(frozen=True)
class PrefixBatch:
    """The tensors of one shared-prefix forward.

    prompt_ids, prompt_attention: [U, P], left-padded distinct prompts.
    rows: [B], each completion's prompt index.
    completion_ids: [B, C], right-padded with the pad id; mask: [B, C], 1.0 on real tokens.
    """

    prompt_ids: torch.Tensor
    prompt_attention: torch.Tensor
    rows: torch.Tensor
    completion_ids: torch.Tensor
    mask: torch.Tensor


def pack_prefix_batch(
    prompts: Sequence[Sequence[int]], completions: Sequence[Sequence[int]], pad_id: int, device
) -> PrefixBatch:
    """Pack (prompt, completion) pairs: each distinct prompt once, every completion once."""
    groups = group_prompts(prompts)
    prompt_len = max(len(p) for p in groups.prompts)
    completion_len = max(len(c) for c in completions)
    prompt_ids = torch.full((len(groups.prompts), prompt_len), pad_id, dtype=torch.long)
    prompt_attention = torch.zeros((len(groups.prompts), prompt_len), dtype=torch.long)
    for row, prompt in enumerate(groups.prompts):
        if prompt:
            prompt_ids[row, prompt_len - len(prompt) :] = torch.tensor(prompt, dtype=torch.long)
            prompt_attention[row, prompt_len - len(prompt) :] = 1
    completion_ids = torch.full((len(completions), completion_len), pad_id, dtype=torch.long)
    mask = torch.zeros((len(completions), completion_len), dtype=torch.float32)
    for row, completion in enumerate(completions):
        if completion:
            completion_ids[row, : len(completion)] = torch.tensor(completion, dtype=torch.long)
            mask[row, : len(completion)] = 1.0
    return PrefixBatch(
        prompt_ids=prompt_ids.to(device),
        prompt_attention=prompt_attention.to(device),
        rows=torch.tensor(groups.rows, dtype=torch.long).to(device),
        completion_ids=completion_ids.to(device),
        mask=mask.to(device),
    )


def supports_shared_prefix(model: torch.nn.Module) -> bool:
    """Whether `prefix_hidden` can run on `model` in its current state.

    Yes unless gradient checkpointing is on in a way a replayed layer could not keep the
    prompt cache: reentrant checkpointing, or a transformers too old to let a layer keep it
    (`swarm.policy.prefix_cache.replays_safely`). Such a model takes the plain path.
    """
    from swarm.policy.prefix_cache import replays_safely

    return replays_safely(model)


def prefix_hidden(model: Any, batch: PrefixBatch) -> torch.Tensor:
    """Final hidden states [B, C, H] whose row i, column j predicts completion i's token j.

    Column 0 comes from the prompt's last position, columns 1.. from the completion pass.
    Positions count real tokens only, as `generate` and the plain forward number them.
    Needs at least one completion token (C >= 1); the prompt must not be empty.
    Under gradient checkpointing both passes are checkpointed, layer by layer, like the
    plain forward (`swarm.policy.prefix_cache` makes the cache safe to replay).
    """
    from swarm.policy.prefix_cache import PrefixCache, cache_kept_under_checkpointing

    if not supports_shared_prefix(model):
        raise ModelError("this model's gradient checkpointing cannot keep the prompt cache")
    decoder = model.base_model
    cache_argument = _cache_argument(decoder)
    prompt_cache = PrefixCache.empty(decoder.config.num_hidden_layers)
    prompt_positions = (batch.prompt_attention.cumsum(-1) - 1).clamp(min=0)
    completion_len = batch.completion_ids.shape[1]
    prompt_lengths = batch.prompt_attention.sum(-1)[batch.rows]
    steps = torch.arange(completion_len, device=batch.completion_ids.device)
    attention = torch.cat(
        [batch.prompt_attention[batch.rows], batch.mask.to(batch.prompt_attention.dtype)], dim=-1
    )
    with cache_kept_under_checkpointing(model):
        prompt_out = decoder(
            input_ids=batch.prompt_ids,
            attention_mask=batch.prompt_attention,
            position_ids=prompt_positions,
            use_cache=False,
            **{cache_argument: prompt_cache},
        )
        cache = prompt_cache.continuation(batch.rows)  # row i: its prompt's keys/values
        completion_out = decoder(
            input_ids=batch.completion_ids,
            attention_mask=attention,
            position_ids=prompt_lengths.unsqueeze(-1) + steps,
            use_cache=False,
            **{cache_argument: cache},
        )
    cache.check_all_read()
    first = prompt_out.last_hidden_state[:, -1:, :][batch.rows]
    rest = completion_out.last_hidden_state[:, :-1, :]
    return torch.cat([first, rest], dim=1)


def output_cache(output: Any):
    """A model output's cache: `cache` in newer transformers, `past_key_values` before."""
    cache = getattr(output, "cache", None)
    return cache if cache is not None else getattr(output, "past_key_values", None)


def _cache_argument(decoder: Any) -> str:
    """The keyword a decoder takes its cache by: `cache` in newer transformers, else the old name."""
    parameters = inspect.signature(decoder.forward).parameters
    return "cache" if "cache" in parameters else "past_key_values"


LOGPROB_CHUNK_TOKENS = 512  # tokens whose logits exist at once: 311 MB fp32 at a 151,936 vocab


def hidden_logprobs(
    model: Any, hidden: torch.Tensor, targets: torch.Tensor, chunk: int = LOGPROB_CHUNK_TOKENS
) -> torch.Tensor:
    """Log-probs [B, C] of `targets` under the model's output head applied to `hidden`, in fp32.

    The head runs on `chunk` tokens at a time, and with gradients each chunk is recomputed in
    the backward pass (activation checkpointing), so no full [B, C, vocab] logits tensor is
    ever held: only one chunk's, forward or backward.
    """
    head = model.get_output_embeddings()
    flat, wanted = hidden.reshape(-1, hidden.shape[-1]), targets.reshape(-1)
    checkpoint = torch.is_grad_enabled() and hidden.requires_grad
    parts = []
    for start in range(0, flat.shape[0], chunk):
        args = (head, flat[start : start + chunk], wanted[start : start + chunk])
        if checkpoint:
            parts.append(
                torch.utils.checkpoint.checkpoint(_head_logprobs, *args, use_reentrant=False)
            )
        else:
            parts.append(_head_logprobs(*args))
    if not parts:
        return hidden.new_zeros(targets.shape, dtype=torch.float32)
    return torch.cat(parts).reshape(targets.shape)


def _head_logprobs(head, hidden: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Log-prob of each target under `head(hidden)`, in fp32: logit minus log-sum-exp."""
    logits = head(hidden).float()
    return logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1) - logits.logsumexp(-1)
