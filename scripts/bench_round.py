"""Where a round's time goes: generate, score, train and everything else, plus token rates.

Runs a real solo node (the same `Node` as `swarm-node join`) for a few rounds in a fresh
temporary run folder, reads the per-round timings back from its ledger, and reports medians,
tokens generated and trained per second, and the process's peak memory. Prints a table and
writes JSON.

    python scripts/bench_round.py                      # solo-cpu preset, 20 rounds
    python scripts/bench_round.py --rounds 5 --set generation.questions_per_round=8
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from lab.round_time import run

ROOT = Path(__file__).resolve().parents[1]


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--config",
        default=str(ROOT / "node_config" / "solo-cpu.toml"),
        help="node config to benchmark",
    )
    parser.add_argument(
        "--rounds", type=int, default=20, help="rounds to time (after one warm-up round)"
    )
    parser.add_argument(
        "--set", dest="sets", action="append", default=[], help="config override, section.key=value"
    )
    parser.add_argument(
        "--out", default="runs/bench_round.json", help="where to write the JSON results"
    )
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    return run(args.config, args.rounds, args.sets, Path(args.out))


if __name__ == "__main__":
    sys.exit(main())
