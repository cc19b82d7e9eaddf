"""A real pretrained model learning in a solo node: held-out accuracy after R rounds against
before, over seeds, with a 95 % CI; writes JSON and reward.png beside it. Resumable: finished
seeds are read back, unfinished ones resume from their checkpoints.

    python scripts/bench_real_learning.py                          # smollm2-cpu, seeds 0-2, 30 rounds
    python scripts/bench_real_learning.py --seeds 0 --rounds 2 --units /tmp/u --out /tmp/u/r.json
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from lab.real_learning import Plan, main

ROOT = Path(__file__).resolve().parents[1]


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--config",
        default=str(ROOT / "node_config" / "smollm2-cpu.toml"),
        help="the node preset each seed runs",
    )
    parser.add_argument(
        "--seeds", default="0,1,2", help="comma-separated node seeds, one unit each"
    )
    parser.add_argument("--rounds", type=int, default=30, help="rounds per seed")
    parser.add_argument("--parallel", type=int, default=3, help="units at once")
    parser.add_argument("--threads", type=int, default=1, help="torch threads per unit")
    parser.add_argument(
        "--set",
        dest="sets",
        action="append",
        default=[],
        help="config override for every unit, section.key=value",
    )
    parser.add_argument(
        "--units",
        default=str(ROOT / "runs" / "real_learning"),
        help="folder of the units' run folders and logs",
    )
    parser.add_argument(
        "--out",
        default=str(ROOT / "results" / "real_model" / "learning.json"),
        help="the JSON to write (reward.png goes beside it)",
    )
    return parser.parse_args(argv)


if __name__ == "__main__":
    args = parse_args()
    seeds = tuple(int(s) for s in args.seeds.split(","))
    plan = Plan(
        Path(args.config),
        seeds,
        args.rounds,
        Path(args.units),
        args.parallel,
        args.threads,
        tuple(args.sets),
    )
    sys.exit(main(plan, Path(args.out)))
