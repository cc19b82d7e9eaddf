"""Peak resident memory of a real model's GRPO updates on a CPU, one child process a case.

Each case loads the model, builds the trainer as the preset does (gradient checkpointing,
AdamW's moments in bf16 or fp32), sets glibc's mmap threshold, and runs two updates on the
same synthetic batch (Q prompts of P random tokens, G completions of C tokens each, random
advantages of +-1): the second is the first with the optimizer's moments allocated, a
round's worst moment. Reported per update: resident memory after it and the process's peak
so far (VmHWM, MiB), and its seconds.

    python scripts/bench_update_memory.py                                  # SmolLM2, the preset's settings
    python scripts/bench_update_memory.py --case 8:512:1048576 --case 8:512:65536 \
        --out results/real_model/update-memory.json

A case is MICRO_BATCH:LOGPROB_CHUNK_TOKENS:MMAP_THRESHOLD_BYTES.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

CHILD = """
import json, random, sys, time
import torch
from lab.footprint import peak_mb, rss_mb
from swarm.node.heap import map_large_blocks
from swarm.policy import prefix
from swarm.policy.model import load_policy
from swarm.policy.trainer import GRPOTrainer, OptimizerState, TrainerSettings, TrainSample

args = json.loads(sys.argv[1])
assert map_large_blocks(args["threshold"])
torch.set_num_threads(1)
torch.manual_seed(0)
prefix.hidden_logprobs.__defaults__ = (args["chunk"],)
policy = load_policy(args["model"], device="cpu", dtype="float32")
settings = TrainerSettings(lr=1e-5, micro_batch_size=args["micro_batch"],
    gradient_checkpointing=True, optimizer_state=OptimizerState(args["moments"]))
trainer = GRPOTrainer(policy.model, policy.tokenizer.pad_token_id or 0, settings)
rng = random.Random(0)
vocab = policy.model.config.vocab_size
samples = []
for _ in range(args["questions"]):
    prompt = tuple(rng.randrange(1000, vocab) for _ in range(args["prompt"]))
    for _ in range(args["group"]):
        completion = tuple(rng.randrange(1000, vocab) for _ in range(args["completion"]))
        samples.append(TrainSample(prompt, completion, rng.choice([-1.0, 1.0])))
out = {"loaded_mib": round(rss_mb()), "updates": []}
for _ in range(2):
    began = time.perf_counter()
    trainer.update(samples)
    out["updates"].append({"rss_mib": round(rss_mb()), "peak_mib": round(peak_mb()),
                           "seconds": round(time.perf_counter() - began, 1)})
print(json.dumps(out))
"""


def parse_case(text: str) -> dict:
    try:
        micro, chunk, threshold = (int(x) for x in text.split(":"))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r}: expected MICRO_BATCH:CHUNK:THRESHOLD, e.g. 8:512:65536"
        ) from None
    return {"micro_batch": micro, "chunk": chunk, "threshold": threshold}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", default="smollm2-135m", help="policy.model to load")
    parser.add_argument(
        "--case",
        type=parse_case,
        action="append",
        help="MICRO_BATCH:LOGPROB_CHUNK_TOKENS:MMAP_THRESHOLD_BYTES (repeatable; "
        "default: 8:512:1048576 and 8:512:65536)",
    )
    parser.add_argument("--moments", choices=["bf16", "fp32"], default="bf16", help="AdamW's")
    parser.add_argument("--questions", type=int, default=8, help="Q: prompts in the batch")
    parser.add_argument("--group", type=int, default=8, help="G: completions per prompt")
    parser.add_argument("--prompt", type=int, default=110, help="P: tokens per prompt")
    parser.add_argument("--completion", type=int, default=32, help="C: tokens per completion")
    parser.add_argument("--out", default="", help="JSON to write (nothing written without)")
    args = parser.parse_args()
    cases = args.case or [parse_case("8:512:1048576"), parse_case("8:512:65536")]
    shared = {k: getattr(args, k) for k in ("model", "moments", "questions", "group")}
    shared.update(prompt=args.prompt, completion=args.completion)
    results = []
    print("micro  chunk  threshold  update  rss MiB  peak MiB  seconds")
    for case in cases:
        spec = {**shared, **case}
        done = subprocess.run(
            [sys.executable, "-c", CHILD, json.dumps(spec)], capture_output=True, text=True
        )
        if done.returncode != 0:
            sys.exit(f"case {case}: the child failed: {done.stderr.strip().splitlines()[-1]}")
        measured = json.loads(done.stdout.strip().splitlines()[-1])
        results.append({**spec, **measured})
        for i, u in enumerate(measured["updates"]):
            print(
                f"{case['micro_batch']:5d}  {case['chunk']:5d}  {case['threshold']:9d}  {i:6d}"
                f"  {u['rss_mib']:7d}  {u['peak_mib']:8d}  {u['seconds']:7.1f}"
            )
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        command = "python scripts/bench_update_memory.py " + " ".join(sys.argv[1:])
        Path(args.out).write_text(json.dumps({"command": command, "cases": results}, indent=1))
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
