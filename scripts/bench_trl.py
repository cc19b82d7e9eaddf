"""A GRPO round three ways, side by side in one process: shared prefix, plain, and TRL.

Each arm makes the same round: Q questions x G completions sampled at temperature 1, scored,
group-relative advantages, one optimizer step on the whole batch (fp32, constant lr, AdamW
betas 0.9/0.99, gradient clipping at 1, no KL, no activation checkpointing):

- `shared`: this project's generator and trainer as a node runs them (each prompt prefilled
  once for generation and encoded once per micro-batch for training);
- `plain`: the same with `shared_prefill` / `shared_prefix` off (every completion runs its
  prompt again, as before the shared prefix existed);
- `trl`: TRL's `GRPOTrainer` set up as fast as it goes: one `generate` of the whole batch,
  no activation checkpointing, fp32, constant lr, `loss_type="dapo"` (token-level sum over
  the batch's tokens, as here), `beta=0`.

The arms alternate within each repeat (after one warm-up repeat each), so a busy machine
slows them alike. Each arm keeps what it builds across repeats (ours their generator and
trainer, TRL's one `GRPOTrainer` and its optimizer), so the warm-up repeat warms all three
alike and no timed round pays for building a trainer. Shapes: `tiny` is the built-in model on the project's own questions and
reward, 32 x 8, 8 new tokens; `qwen2-reduced` is a random Qwen2-shaped model (grouped-query
attention, q/k/v biases, untied head; reduced width and depth so it runs on a CPU) with
300-token prompts and exactly 200-token completions (its stop token lies outside the
model's vocabulary) and a synthetic reward (a hash of the text), 2 x 8; `smollm2` is the
real SmolLM2-135M-Instruct (`smollm2-135m`) with node_config/smollm2-cpu.toml's prompts
(worked examples) and round, 8 x 8, 32 new tokens, on the project's own reward. Needs TRL
(`pip install -e './lab[trl]'`; `scripts/setup.sh` installs it).

    python scripts/bench_trl.py --shape tiny --repeats 5
    python scripts/bench_trl.py --shape qwen2-reduced --repeats 3
    python scripts/bench_trl.py --shape smollm2 --repeats 3
    python scripts/bench_trl.py --shape qwen2-reduced --train-only --repeats 3
    python scripts/bench_trl.py --shape tiny --repeats 2 --cpu-time   # CPU seconds, 1 thread
"""

from __future__ import annotations

import argparse
import sys

from lab.trl_arms import SHAPES
from lab.trl_bench import run


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--shape", choices=sorted(SHAPES), default="tiny")
    parser.add_argument("--repeats", type=int, default=5, help="timed rounds per arm")
    parser.add_argument(
        "--cpu-time",
        action="store_true",
        help="time rounds in this process's CPU seconds with one torch thread (a busy machine)",
    )
    parser.add_argument(
        "--train-only",
        action="store_true",
        help="time the training pass alone, shared prefix on and off (no TRL, no generation)",
    )
    parser.add_argument("--out", default="", help="JSON path (default results/trl/<shape>.json)")
    return parser.parse_args(argv)


def main(argv=None) -> int:
    return run(parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
