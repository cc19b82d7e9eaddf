"""What each arm of the default study (docs/studies/3-default.md) costs a node on this machine.

Runs each arm alone, at the rate the verdict ran it, on the tuning seed, on both testbeds:
completions generated and trained on per node and round, seconds per round of the 8-node
swarm, reward per generated completion. Run it on an idle machine. Prints a table per
testbed and writes <out>/default-cost.json.

    python scripts/bench_default_cost.py                 # 20 rounds per arm
    python scripts/bench_default_cost.py --rounds 40
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from lab.default_cost import run


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=20, help="rounds per arm")
    parser.add_argument(
        "--eval-size", type=int, default=8, help="held-out questions per node (kept small)"
    )
    parser.add_argument(
        "--results", default="results/sapo", help="where the study's tuning units are"
    )
    parser.add_argument(
        "--out", default="results/sapo/default-cost", help="where the timed runs are written"
    )
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.rounds < 1 or args.eval_size < 1:
        raise SystemExit("error: --rounds and --eval-size must be at least 1")
    return run(Path(args.results), Path(args.out), args.rounds, args.eval_size)


if __name__ == "__main__":
    sys.exit(main())
