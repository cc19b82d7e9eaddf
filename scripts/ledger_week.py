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
import json
import sys
import tempfile
from pathlib import Path

from swarm.ledger.retention import Retention
from swarm.ledger.simulate import FillSettings, fill_week

ROOT = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--days", type=float, default=7.0)
    parser.add_argument("--groups-per-s", type=float, default=7.3)
    parser.add_argument("--body-bytes", type=int, default=9_300)
    parser.add_argument("--scale", type=float, default=0.01, help="fraction of the rate written")
    parser.add_argument("--keep-bodies-days", type=float, default=1.0)
    parser.add_argument("--out", default=str(ROOT / "results" / "ledger_week.json"))
    args = parser.parse_args(argv)
    if not 0 < args.scale <= 1:
        print("--scale must be in (0, 1]", file=sys.stderr)
        return 2
    fill = FillSettings(args.days, args.groups_per_s * args.scale, args.body_bytes)
    runs = {
        "none": Retention(),
        f"keep_bodies_days={args.keep_bodies_days:g}": Retention(
            keep_bodies_days=args.keep_bodies_days
        ),
    }
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, retention in runs.items():
            results[name] = fill_week(f"sqlite:///{Path(tmp) / 'ledger.sqlite'}", fill, retention)
            (Path(tmp) / "ledger.sqlite").unlink()
            for extra in ("-wal", "-shm"):
                Path(tmp, f"ledger.sqlite{extra}").unlink(missing_ok=True)
    print(
        f"{args.days:g} days at {args.groups_per_s:g} accepted groups/s of {args.body_bytes} B, "
        f"written at {args.scale:g} of that rate"
    )
    print(f"{'retention':<22} {'rows':>9} {'MB in use':>10} {'x 1/scale: rows':>16} {'GB':>8}")
    for name, r in results.items():
        final = r["final"]
        print(
            f"{name:<22} {final['rows']:>9,} {final['used_mb']:>10.1f} "
            f"{final['rows'] / args.scale:>16,.0f} {final['used_mb'] / args.scale / 1000:>8.2f}"
        )
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"args": vars(args), "runs": results}, indent=2) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
