"""The GPU path end to end: a real model, vLLM (or the transformers generator), GRPO rounds.

Each round samples the SAPO tasks (or the testbed's skill families), scores them, makes one
GRPO update (fp32 weights, bf16 autocast, gradient checkpointing, chunked log-probs) and
pushes the weights into the running generator. After each push it samples a few completions
again and checks that the generator's log-probs of them match the trainer's within
`tolerance` (mean absolute difference per token). At the end it checks that the weights moved
and reports the peak GPU memory. `scripts/gpu_smoke.py` runs it; on a CPU, with the
transformers generator, the same steps make a dry run.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass


@dataclass(frozen=True)
class SmokeOptions:
    """What the smoke test runs (the script's options, with the same defaults)."""

    model: str = "Qwen/Qwen2.5-0.5B-Instruct"  # a name on the Hub or a local folder
    rounds: int = 5  # GRPO rounds
    questions: int = 8  # questions per round
    completions: int = 8  # completions per question
    max_new_tokens: int = 256
    lr: float = 1e-6  # AdamW learning rate
    micro_batch: int = 8  # sequences per forward and backward pass
    gpu_memory: float = 0.35  # share of GPU memory for vLLM, in [0.05, 0.95]
    tolerance: float = 0.05  # largest mean |generator - trainer| log-prob per token after a push
    generator: str = "vllm"  # vllm or transformers
    tasks: str = "sapo"  # sapo (the SAPO mix) or skills (the testbed models' four families)
    device: str = "cuda"  # cuda, or cpu for a dry run (transformers generator only)
    seed: int = 0


def positive(text: str) -> int:
    """An argparse type: an integer of at least 1."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def run(options: SmokeOptions) -> int:
    """Run the smoke test: 0 if every check held, 1 if one failed, 2 without a GPU or with a
    model that will not load (one line on stderr)."""
    import torch

    if options.device == "cuda" and not torch.cuda.is_available():
        print("error: gpu_smoke.py needs a CUDA GPU; none is visible here", file=sys.stderr)
        return 2
    from swarm.core.errors import SwarmError

    try:
        return smoke(options)
    except SwarmError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


def smoke(args: SmokeOptions) -> int:
    """The rounds and their checks: 0 when every check held, 1 when one failed."""
    import torch

    from swarm.node.shared_samples import own_samples
    from swarm.policy.generator import SamplingParams
    from swarm.policy.grpo import group_advantages
    from swarm.policy.model import load_policy
    from swarm.policy.prompts import build_prompt
    from swarm.policy.skills import SKILL_MIX
    from swarm.policy.trainer import GRPOTrainer, TrainerSettings
    from swarm.tasks import SAPO_MIX, build_task, sample_specs, score_completion

    torch.manual_seed(args.seed)
    policy = load_policy(args.model, args.device, "auto")
    print(
        f"model {args.model}: {sum(p.numel() for p in policy.model.parameters()):,} parameters, "
        f"loaded as {policy.dtype}; generator {args.generator}",
        flush=True,
    )
    generator = _generator(args, policy)
    mix = SAPO_MIX if args.tasks == "sapo" else SKILL_MIX
    settings = TrainerSettings(
        lr=args.lr,
        micro_batch_size=args.micro_batch,
        autocast_bf16=True,
        gradient_checkpointing=True,
    )
    trainer = GRPOTrainer(policy.model, policy.tokenizer.pad_token_id, settings)
    start = {n: p.detach().clone() for n, p in policy.model.named_parameters()}
    params = SamplingParams(temperature=1.0, max_new_tokens=args.max_new_tokens)
    eos = policy.tokenizer.eos_token_id
    failures = []
    for round_index in range(args.rounds):
        began = time.perf_counter()
        tasks = [build_task(s) for s in sample_specs(mix, args.seed, round_index, args.questions)]
        prompts = [build_prompt(policy.tokenizer, t.question) for t in tasks]
        groups = generator.generate(prompts, args.completions, params)
        samples, rewards = [], []
        for task, group in zip(tasks, groups, strict=True):
            scores = [score_completion(task, c.text, 0.1) for c in group]
            rewards += scores
            samples += own_samples(group, group_advantages(scores), eos)
        result = trainer.update(samples)
        generator.sync_weights(policy.model)
        gap, worst = _logprob_gap(generator, trainer, prompts[:2], params)
        if not gap <= args.tolerance:
            failures.append(f"round {round_index}: log-prob gap {gap:.4f} > {args.tolerance}")
        print(
            f"round {round_index}: reward {sum(rewards) / len(rewards):.3f}  "
            f"loss {result.loss:+.4f}  grad norm {result.grad_norm:.3f}  "
            f"generator vs trainer log-prob: mean |diff| {gap:.4f}, max {worst:.4f}  "
            f"peak {_peak_gib():.2f} GiB  "
            f"{time.perf_counter() - began:.1f} s",
            flush=True,
        )
    moved = _moved_share(policy.model, start)
    if moved < 0.5:
        failures.append(f"only {moved:.1%} of the weights changed")
    print(f"weights changed: {moved:.1%} of elements")
    if torch.cuda.is_available() and args.device == "cuda":
        free, total = torch.cuda.mem_get_info()
        print(
            f"peak GPU memory: {_peak_gib():.2f} GiB allocated by "
            f"PyTorch in this process; {(total - free) / 2**30:.2f} of {total / 2**30:.2f} GiB "
            f"in use on the card at the end ({torch.cuda.get_device_name()})"
        )
    for failure in failures:
        print(f"FAILED: {failure}")
    print("OK" if not failures else "FAILED")
    return 0 if not failures else 1


def _peak_gib() -> float:
    """The CUDA allocator's peak in GiB (0 on a CPU run)."""
    import torch

    return torch.cuda.max_memory_allocated() / 2**30 if torch.cuda.is_available() else 0.0


def _generator(args: SmokeOptions, policy):
    """The backend under test: vLLM in this process, or the transformers generator."""
    if args.generator == "transformers":
        from swarm.policy.generator import TransformersGenerator

        return TransformersGenerator(policy.model, policy.tokenizer, policy.stop_token_ids)
    from swarm.policy.vllm_generator import VLLMGenerator

    return VLLMGenerator(policy, gpu_memory_utilization=args.gpu_memory, seed=args.seed)


def _logprob_gap(generator, trainer, prompts, params) -> tuple[float, float]:
    """Sample again with the pushed weights; mean and max |generator - trainer| per token."""
    import torch

    from swarm.policy.trainer import TrainSample

    completions = [c for group in generator.generate(prompts, 2, params) for c in group]
    completions = [c for c in completions if c.token_ids]
    if not completions:
        return 0.0, 0.0
    samples = [TrainSample(c.prompt_ids, c.token_ids, 1.0) for c in completions]
    ours, mask = trainer.logprobs(samples)
    theirs = torch.zeros_like(ours)
    for row, c in enumerate(completions):
        theirs[row, : len(c.logprobs)] = torch.tensor(c.logprobs)
    diff = (ours - theirs).abs() * mask
    return float(diff.sum() / mask.sum()), float(diff.max())


def _moved_share(model, start: dict) -> float:
    """Share of weight elements that differ from `start`."""
    changed = total = 0
    for name, param in model.named_parameters():
        changed += int((param.detach() != start[name]).sum())
        total += param.numel()
    return changed / total
