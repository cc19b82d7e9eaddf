"""How a model answers under each prompt format: the share of completions that tag an answer
and the share right (the task's own check, the node's lenient rule), greedy and sampled, on
the same questions. Run through `scripts/bench_prompt_format.py`."""

from __future__ import annotations

import json
import time
from pathlib import Path

FORMATS = ("system prompt only", "worked examples")


def measure(model: str, questions: int, max_new_tokens: int, seed: int) -> dict:
    import torch

    from swarm.policy.generator import SamplingParams, TransformersGenerator
    from swarm.policy.model import load_policy
    from swarm.policy.prompts import (
        ARITHMETIC_EXAMPLES,
        DEFAULT_SYSTEM_PROMPT,
        PromptFormat,
        build_prompt,
    )
    from swarm.tasks import EASY_MIX, build_task, extract_answer, is_correct, sample_specs

    torch.manual_seed(seed)
    policy = load_policy(model, device="cpu", dtype="float32")
    generator = TransformersGenerator(policy.model, policy.tokenizer, policy.stop_token_ids)
    tasks = [build_task(s) for s in sample_specs(EASY_MIX, seed, 0, questions)]
    forms = {
        FORMATS[0]: PromptFormat(DEFAULT_SYSTEM_PROMPT),
        FORMATS[1]: PromptFormat(DEFAULT_SYSTEM_PROMPT, ARITHMETIC_EXAMPLES),
    }
    rows = []
    for name, form in forms.items():
        prompts = [build_prompt(policy.tokenizer, t.question, form) for t in tasks]
        for temperature in (0.0, 1.0):
            params = SamplingParams(temperature=temperature, max_new_tokens=max_new_tokens)
            started = time.perf_counter()
            texts = [g[0].text for g in generator.generate(prompts, 1, params)]
            rows.append({
                "format": name,
                "temperature": temperature,
                "tagged": sum(extract_answer(t)[1] for t in texts) / len(texts),
                "correct": sum(is_correct(k, t) for k, t in zip(tasks, texts)) / len(texts),
                "seconds": time.perf_counter() - started,
                "first": texts[0],
            })  # fmt: skip
    return {"model": policy.model_id, "questions": questions, "seed": seed,
            "max_new_tokens": max_new_tokens, "rows": rows}  # fmt: skip


def main(model: str, questions: int, max_new_tokens: int, seed: int, out: Path) -> int:
    result = measure(model, questions, max_new_tokens, seed)
    print(f"{result['model']}, {questions} questions of the easy mix, {max_new_tokens} new tokens")
    print(f"{'format':<20} {'T':>4} {'tagged':>7} {'correct':>8}  first completion")
    for r in result["rows"]:
        print(f"{r['format']:<20} {r['temperature']:>4.1f} {r['tagged']:>7.0%} "
              f"{r['correct']:>8.0%}  {r['first'][:50]!r}")  # fmt: skip
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1))
    print(f"wrote {out}")
    return 0
