"""Benchmark of `swarm.policy.delta`: delta size and speed on a model-sized weight set.

Builds synthetic bf16 weights with the shapes of Qwen2.5-0.5B (494M parameters, tied
embedding; --quick: a ~30M-parameter model of the same structure), makes RL-like steps
(random positions, each changed weight nudged by 1 or 2 ulp, as a small-lr Adam step
does to bf16 weights) at several densities and reports, per density: delta bytes against
dense bf16 and against raw new values + int32 indices, encode and decode+apply
throughput in dense-bf16 MB/s, and peak RSS. Also times a full anchor.

`bench_real_deltas(pairs)` runs the same measurement on real (old, new) state dicts;
`tiny_training_pairs` makes such pairs from real GRPO updates of the built-in tiny model
(a solo node's rounds: generate, score, update), at its own learning rate and at an
RL-sized one. `bench_transfer` times `fetch_blob` of a payload between two libp2p
transports on 127.0.0.1 (the stream protocol followers fetch deltas with).

What it is not: a test (it asserts only bit-exactness of what it measures) or a model of
network time. Timings are wall-clock on whatever else the machine is doing; the JSON
records the load average so a noisy run can be recognised.

    python scripts/bench_delta.py [--quick] [--no-real] [--no-transfer] [--out runs/bench_delta.json]
"""

from __future__ import annotations

import argparse
import sys

from lab.delta_bench import run


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="~30M-parameter model instead of 494M")
    parser.add_argument("--out", default="runs/bench_delta.json", help="JSON output path")
    parser.add_argument("--densities", default="0.001,0.01,0.05", help="comma-separated shares")
    parser.add_argument("--repeat", type=int, default=3, help="timed runs per case (best kept)")
    parser.add_argument("--threads", type=int, default=None, help="worker threads (default: all)")
    parser.add_argument(
        "--no-real", action="store_true", help="skip the tiny model's real training deltas"
    )
    parser.add_argument(
        "--no-transfer", action="store_true", help="skip the libp2p transfer timing"
    )
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
