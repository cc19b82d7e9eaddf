"""Benchmark of the shared-prefix training forward against the plain one, with and without
gradient checkpointing: activation memory and time of one forward and backward pass.

Four arms (plain or shared-prefix forward, gradient checkpointing on or off) on a randomly
initialised Qwen2-shaped model; on CUDA the memory held for backward and the peak, on a CPU
times only. What it measures, exactly: `lab.prefix_memory`.

    python scripts/bench_prefix_memory.py [--shape small|qwen0.5b] [--prompt 300 --completion 200]
        [--prompts 4 --group 8] [--out runs/bench_prefix_memory.json]
"""

from __future__ import annotations

import argparse

from lab.prefix_memory import SHAPES, run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", choices=sorted(SHAPES), default="small")
    parser.add_argument("--prompt", type=int, default=300, help="prompt tokens")
    parser.add_argument("--completion", type=int, default=200, help="tokens per completion")
    parser.add_argument("--prompts", type=int, default=4, help="distinct prompts")
    parser.add_argument("--group", type=int, default=8, help="completions per prompt")
    parser.add_argument("--out", default="")
    run(parser.parse_args())


if __name__ == "__main__":
    main()
