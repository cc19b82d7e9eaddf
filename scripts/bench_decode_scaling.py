"""Benchmark of decode seconds per generated token against the number of sequences decoding
together (1 to 256) on a CPU: plain `generate`, the continuous backend (its paged engine)
and transformers' own continuous batching (sdpa over a dense mask). What it measures,
exactly: `lab.decode_scaling`.

    python scripts/bench_decode_scaling.py [--sizes 1,2,4,...,256] [--prompt 64 --new 192]
        [--arms generate,continuous,transformers-sdpa] [--threads 1]
        [--out results/decode_scaling/decode_scaling.json]

Writes the JSON and a PNG of the curves beside it (same name, .png).
"""

from __future__ import annotations

import argparse

from lab.decode_scaling import ARMS, SIZES, run


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--sizes", type=_ints, default=list(SIZES), help="sequences, comma-separated"
    )
    parser.add_argument("--arms", type=lambda s: s.split(","), default=list(ARMS))
    parser.add_argument("--prompt", type=int, default=64, help="prompt tokens")
    parser.add_argument("--new", type=int, default=192, help="new tokens per sequence")
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    parser.add_argument("--out", default="results/decode_scaling/decode_scaling.json")
    args = parser.parse_args()
    unknown = set(args.arms) - set(ARMS)
    if unknown:
        parser.error(f"unknown arms {sorted(unknown)}: choose from {list(ARMS)}")
    run(args)


if __name__ == "__main__":
    main()
