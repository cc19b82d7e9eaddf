"""Benchmark of the shared-prefix training forward against the plain one, with and without
gradient checkpointing: activation memory and time of one forward and backward pass.

Builds a randomly initialised Qwen2-shaped model (--shape qwen0.5b: Qwen2.5-0.5B's shapes,
494 M parameters; --shape small: 4 layers, hidden 256) with fp32 weights, and a batch of
`--group` completions for each of `--prompts` prompts, all of the given lengths. Four arms:
plain forward (as `swarm.policy.trainer`'s plain path) or shared prefix
(`swarm.policy.prefix`), Hugging Face gradient checkpointing (non-reentrant, as the trainer
enables it) on or off; on CUDA the forward runs under bf16 autocast, as the trainer runs a
bf16 model. The loss weighs each completion's log-probs by a random advantage. Each arm
makes a warm-up pass, whose gradients stay allocated, then the measured one.

On CUDA, per arm: `held_mib`, memory allocated at the end of the forward pass (what is kept
for the backward pass), and `peak_mib`, the allocator's peak over forward and backward, both
above what was allocated before (weights and gradients). On a CPU only times are reported.

What it is not: a test. Each arm's loss and gradient norm are printed so that arms can be
seen to compute the same thing (within bf16 rounding under autocast).

`scripts/bench_prefix_memory.py` runs it.
"""

from __future__ import annotations

import json
import random
import time
from typing import Any

import torch

from swarm.policy.prefix import (
    hidden_logprobs,
    pack_prefix_batch,
    prefix_hidden,
    supports_shared_prefix,
)
from swarm.policy.trainer import TrainSample, enable_gradient_checkpointing, pack_batch

SHAPES: dict[str, dict[str, Any]] = {
    "small": dict(
        vocab_size=8192,
        hidden_size=256,
        intermediate_size=1024,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
    ),
    "qwen0.5b": dict(
        vocab_size=151936,
        hidden_size=896,
        intermediate_size=4864,
        num_hidden_layers=24,
        num_attention_heads=14,
        num_key_value_heads=2,
    ),
}
ARMS = [(False, True), (True, True), (False, False), (True, False)]  # (shared, checkpointing)


def build_model(shape: str, device: str):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    config = Qwen2Config(**SHAPES[shape], max_position_embeddings=4096, tie_word_embeddings=True)
    model = Qwen2ForCausalLM(config)
    torch.nn.Module.to(model, device)  # in place
    return model


def build_samples(vocab: int, args) -> list[TrainSample]:
    rng = random.Random(0)
    samples = []
    for _ in range(args.prompts):
        prompt = tuple(rng.randrange(1, vocab) for _ in range(args.prompt))
        for _ in range(args.group):
            completion = tuple(rng.randrange(1, vocab) for _ in range(args.completion))
            samples.append(TrainSample(prompt, completion, rng.uniform(-1.5, 1.5)))
    return samples


def run_arm(shape: str, device: str, shared: bool, checkpointing: bool, args) -> dict:
    """One warm-up and one measured forward and backward; the measured one's numbers."""
    model = build_model(shape, device)
    if checkpointing:
        enable_gradient_checkpointing(model)
    model.train()
    samples = build_samples(model.config.vocab_size, args)
    used = shared and supports_shared_prefix(model)
    forward_backward(model, samples, used, device)  # gradients allocated, kept from here on
    model.zero_grad(set_to_none=False)
    _synchronize(device)
    before = torch.cuda.memory_allocated() if device == "cuda" else 0
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    loss, held = forward_backward(model, samples, used, device)
    _synchronize(device)
    seconds = time.perf_counter() - start
    peak = torch.cuda.max_memory_allocated() - before if device == "cuda" else None
    grad_norm = torch.norm(torch.stack([p.grad.norm() for p in model.parameters()]))
    return dict(
        shared_prefix=shared,
        shared_prefix_used=used,
        gradient_checkpointing=checkpointing,
        held_mib=None if held is None else round((held - before) / 2**20, 1),
        peak_mib=None if peak is None else round(peak / 2**20, 1),
        seconds=round(seconds, 3),
        loss=float(loss),
        grad_norm=float(grad_norm),
    )


def forward_backward(model, samples: list[TrainSample], shared: bool, device: str):
    """An advantage-weighted log-prob loss and its backward pass, under bf16 autocast on CUDA.

    Returns the loss and the memory allocated between forward and backward (CUDA only)."""
    autocast = torch.autocast(device, dtype=torch.bfloat16, enabled=device == "cuda")
    with autocast:
        logprobs, mask = (shared_logprobs if shared else plain_logprobs)(model, samples, device)
    advantages = torch.tensor([s.advantage for s in samples], device=device).unsqueeze(-1)
    loss = -(logprobs * mask * advantages).sum() / mask.sum()
    held = torch.cuda.memory_allocated() if device == "cuda" else None
    loss.backward()
    return loss.detach(), held


def shared_logprobs(model, samples: list[TrainSample], device: str):
    """The shared-prefix path: each distinct prompt once, its completions on its cache."""
    packed = pack_prefix_batch(
        [s.prompt_ids for s in samples], [s.completion_ids for s in samples], 0, device
    )
    hidden = prefix_hidden(model, packed)
    return hidden_logprobs(model, hidden, packed.completion_ids), packed.mask


def plain_logprobs(model, samples: list[TrainSample], device: str):
    """The trainer's plain path: prompt + completion per row, left-padded prompts."""
    input_ids, attention, mask = pack_batch(samples, 0, device)
    positions = (attention.cumsum(-1) - 1).clamp(min=0)
    hidden = model.base_model(
        input_ids=input_ids, attention_mask=attention, position_ids=positions, use_cache=False
    ).last_hidden_state
    completion_len = mask.shape[1]
    hidden = hidden[:, -completion_len - 1 : -1, :]
    return hidden_logprobs(model, hidden, input_ids[:, -completion_len:]), mask


def _synchronize(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def run(args) -> None:
    """Every arm in turn, one JSON line each; the report to `args.out` where it is set.

    `args` holds shape, prompt, completion, prompts, group and out (the script's options)."""
    device = "cuda" if torch.cuda.is_available() else "cpu"
    rows = []
    for shared, checkpointing in ARMS:
        row = run_arm(args.shape, device, shared, checkpointing, args)
        if device == "cuda":
            torch.cuda.empty_cache()
        print(json.dumps(row), flush=True)
        rows.append(row)
    report = dict(device=device, **vars(args), arms=rows)
    if args.out:
        with open(args.out, "w") as out:
            json.dump(report, out, indent=1)
