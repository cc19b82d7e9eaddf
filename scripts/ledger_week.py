"""A week of a busy swarm's accepted groups in a ledger, with and without retention.

    python scripts/ledger_week.py [--days 7] [--scale 0.01] [--keep-bodies-days 1]

The rate is a busy node's: 10 peer groups verified and accepted a round (the pull exchange,
docs/SCALE.md), at the tiny model's 1.36 s round (README), 7.3 groups a second, each of
9.3 KB of signed bytes (149 MB for 16,000 groups in the scale simulation). A full week at
that rate is 4.4 million groups and 41 GB, more than this machine should write for a check,
so `--scale` writes that fraction of the rate and the figures are also given multiplied
back (rows and bytes grow linearly with the rate; the retention window too). Each run
fills a fresh ledger hour by hour and prunes after each hour, as a node does. Prints a
table; writes results/ledger_week.json.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from lab.ledger_week import run

ROOT = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--days", type=float, default=7.0)
    parser.add_argument("--groups-per-s", type=float, default=7.3)
    parser.add_argument("--body-bytes", type=int, default=9_300)
    parser.add_argument("--scale", type=float, default=0.01, help="fraction of the rate written")
    parser.add_argument("--keep-bodies-days", type=float, default=1.0)
    parser.add_argument("--out", default=str(ROOT / "results" / "ledger_week.json"))
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
