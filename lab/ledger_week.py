"""A week of a busy swarm's accepted groups in a ledger, with and without retention.

Each run fills a fresh ledger hour by hour and prunes after each hour, as a node does
(`swarm.ledger.simulate`), at `scale` of the given rate; the figures are also given
multiplied back (rows and bytes grow linearly with the rate; the retention window too).
`run` takes the options of `scripts/ledger_week.py` (days, groups_per_s, body_bytes, scale,
keep_bodies_days, out).
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

from swarm.ledger.retention import Retention
from swarm.ledger.simulate import FillSettings, fill_week


def show(args, results: dict) -> None:
    """The runs as a table: what was written, and multiplied back to the full rate."""
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


def run(args) -> int:
    """Fill a ledger without retention and with bodies kept `keep_bodies_days`; table, JSON."""
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
    show(args, results)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"args": vars(args), "runs": results}, indent=2) + "\n")
    print(f"wrote {out}")
    return 0
