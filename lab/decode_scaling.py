"""Decode cost per generated token against the number of sequences decoding together, on a
CPU: plain `generate`, the continuous backend, and transformers' own continuous batching.

Arms, all over the same module:
- `generate`: `TransformersGenerator` (batched `generate`, left padding), one call of N rows;
- `continuous`: `ContinuousGenerator` as a node runs it, which on a CPU is the paged engine
  (`swarm.policy.paged`: each sequence attends over its own pages);
- `transformers-sdpa`: `ContinuousGenerator(attention="library")`, transformers'
  `generate_batch` with sdpa over a dense mask spanning every sequence of the step (what the
  continuous backend ran before the paged engine).

Shape: the built-in tiny model (a Llama: 4 layers, hidden 128, 4 heads, head dim 32, 0.87 M
weights, fp32), N distinct prompts of `prompt` tokens, `new` tokens each (no stop token, so
every sequence runs to the end), sampled at temperature 1, all N at once.

Decode cost per token = (T(new) - T(1)) / (tokens(new) - tokens(1)): a call with `new`
tokens less a call with 1 (the same prefill), over the tokens the second call lacks. T is
process CPU time (every thread; torch runs `threads` threads), so other work on shared cores
slows it less than wall time, which is recorded too. Each arm makes a warm-up call first.

`scripts/bench_decode_scaling.py` runs it.
"""

from __future__ import annotations

import json
import os
import platform
import time
from pathlib import Path

import torch

SIZES = (1, 2, 4, 8, 16, 32, 64, 128, 256)
ARMS = ("generate", "continuous", "transformers-sdpa")
GOAL_RANGE = (8, 256)  # the continuous arm's cost per token within GOAL_RATIO over this range
GOAL_RATIO = 1.5


def prompts(count: int, length: int) -> list[str]:
    """`count` distinct prompts of `length` characters (tokens, for the tiny model)."""
    return [(f"{i:05d} " * length)[:length] for i in range(count)]


def make_generator(arm: str, policy, rows: int):
    from swarm.policy.continuous import ContinuousGenerator
    from swarm.policy.generator import TransformersGenerator

    model, tokenizer = policy.model, policy.tokenizer
    if arm == "generate":
        return TransformersGenerator(model, tokenizer, set(), rows)
    attention = "library" if arm == "transformers-sdpa" else "auto"
    return ContinuousGenerator(model, tokenizer, set(), max_sequences=rows, attention=attention)


def timed_call(generator, texts: list[str], new: int) -> tuple[float, float, int]:
    """CPU seconds, wall seconds and tokens generated of one call."""
    from swarm.policy.generator import SamplingParams

    cpu, wall = time.process_time(), time.perf_counter()
    groups = generator.generate(texts, 1, SamplingParams(temperature=1.0, max_new_tokens=new))
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    tokens = sum(len(c.token_ids) + (c.stop_id is not None) for g in groups for c in g)
    return cpu, wall, tokens


def measure(arm: str, policy, rows: int, prompt: int, new: int) -> dict:
    generator = make_generator(arm, policy, rows)
    texts = prompts(rows, prompt)
    full_cpu, full_wall, full_tokens = timed_call(generator, texts, new)
    one_cpu, one_wall, one_tokens = timed_call(generator, texts, 1)
    decoded = max(1, full_tokens - one_tokens)
    return {
        "arm": arm,
        "sequences": rows,
        "tokens": full_tokens,
        "cpu_s": round(full_cpu, 4),
        "wall_s": round(full_wall, 4),
        "decode_cpu_ms_per_token": round(1e3 * (full_cpu - one_cpu) / decoded, 4),
        "decode_wall_ms_per_token": round(1e3 * (full_wall - one_wall) / decoded, 4),
    }


def goal(rows: list[dict], arm: str = "continuous") -> dict:
    """The continuous arm's decode cost per token over `GOAL_RANGE`: its largest over its
    smallest (the issue's "flat within 1.5x"), and the cost at the top over the bottom."""
    low, high = GOAL_RANGE
    cost = {
        r["sequences"]: r["decode_cpu_ms_per_token"]
        for r in rows
        if r["arm"] == arm and low <= r["sequences"] <= high
    }
    if low not in cost or high not in cost:
        return {}
    spread = max(cost.values()) / min(cost.values())
    growth = cost[high] / cost[low]
    return {
        "range": [low, high],
        "max_over_min": round(spread, 3),
        "top_over_bottom": round(growth, 3),
        "flat_within_1_5x": spread <= GOAL_RATIO,
        "grows_at_most_1_5x": growth <= GOAL_RATIO,
    }


def table(rows: list[dict]) -> str:
    """A markdown table: decode CPU ms per token (wall ms in brackets) by N and arm."""
    arms = [a for a in ARMS if any(r["arm"] == a for r in rows)]
    sizes = sorted({r["sequences"] for r in rows})
    cell = {(r["arm"], r["sequences"]): r for r in rows}
    lines = ["| sequences | " + " | ".join(arms) + " |", "|---:|" + "---:|" * len(arms)]
    for n in sizes:
        parts = []
        for arm in arms:
            r = cell.get((arm, n))
            parts.append(
                f"{r['decode_cpu_ms_per_token']:.3f} ({r['decode_wall_ms_per_token']:.3f})"
                if r
                else "-"
            )
        lines.append(f"| {n} | " + " | ".join(parts) + " |")
    return "\n".join(lines)


def plot(rows: list[dict], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for arm in ARMS:
        points = sorted(
            (r["sequences"], r["decode_cpu_ms_per_token"]) for r in rows if r["arm"] == arm
        )
        if points:
            ax.plot(*zip(*points, strict=True), marker="o", label=arm)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("sequences decoding together")
    ax.set_ylabel("decode CPU ms per generated token")
    ax.set_title(title, fontsize=9)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def run(args) -> dict:
    """The benchmark for `scripts/bench_decode_scaling.py`'s options (sizes, arms, prompt,
    new, threads, out)."""
    from swarm.policy.model import load_policy
    from swarm.policy.tiny import ensure_tiny_model

    torch.set_num_threads(args.threads)
    load_at_start = os.getloadavg()
    torch.manual_seed(0)
    policy = load_policy(str(ensure_tiny_model(quiet=True)), device="cpu", dtype="float32")
    policy.model.eval()
    rows, started = [], time.perf_counter()
    for arm in args.arms:
        timed_call(make_generator(arm, policy, 4), prompts(4, args.prompt), 4)  # warm-up
        for n in args.sizes:
            rows.append(measure(arm, policy, n, args.prompt, args.new))
            r = rows[-1]
            print(
                f"{arm:>18} N={n:<4} decode {r['decode_cpu_ms_per_token']:.3f} CPU ms/token "
                f"({r['decode_wall_ms_per_token']:.3f} wall), call {r['wall_s']:.1f} s, "
                f"load {os.getloadavg()[0]:.2f}",
                flush=True,
            )
    result = {
        "model": "swarm-tiny (Llama: 4 layers, hidden 128, 4 heads, 0.87 M weights, fp32)",
        "prompt_tokens": args.prompt,
        "new_tokens": args.new,
        "threads": args.threads,
        "rows": rows,
        "goal": goal(rows),
        "seconds": round(time.perf_counter() - started, 1),
        "torch": torch.__version__,
        "transformers": __import__("transformers").__version__,
        "machine": f"{platform.machine()}, {os.cpu_count()} cores",
        # CPU time is the measure; a load above the core count means shared cores
        "loadavg_at_start": load_at_start,
        "loadavg_at_end": os.getloadavg(),
    }
    print(table(rows))
    print("goal:", json.dumps(result["goal"]))
    if args.out:
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(result, indent=1) + "\n")
        title = (
            f"prompt {args.prompt} + {args.new} new tokens, tiny Llama, {args.threads} thread(s)"
        )
        plot(rows, out.with_suffix(".png"), title)
        print(f"wrote {out} and {out.with_suffix('.png')}")
    return result
