"""Two simulated days of accepted groups: retention of accepted bodies bounds the ledger to
about its window of bytes plus the rows, which are all kept."""

from __future__ import annotations

from swarm.ledger.retention import Retention
from swarm.ledger.simulate import FillSettings, fill_week

PER_HOUR = 18
FILL = FillSettings(days=2, groups_per_s=PER_HOUR / 3600, body_bytes=20_000)


def test_retention_of_accepted_bodies_bounds_a_filling_ledger(tmp_path):
    kept = fill_week(f"sqlite:///{tmp_path / 'all.sqlite'}", FILL, Retention())
    bounded = fill_week(
        f"sqlite:///{tmp_path / 'bounded.sqlite'}",
        FILL,
        Retention(keep_bodies_days=0.5, protect_s=3600.0),
    )
    total = 48 * PER_HOUR
    assert kept["groups_written"] == bounded["groups_written"] == total
    assert kept["final"]["rows"] == bounded["final"]["rows"] == total  # rows all kept
    assert kept["final"]["used_mb"] > total * 0.02  # every body kept, 20 KB each
    # about 12 hours of bodies (216 of 20 KB = 4.3 MB) plus the rows
    assert bounded["final"]["used_mb"] < 6.0
    assert bounded["pruned"]["accepted bodies"] >= total - 13 * PER_HOUR
    day1, day2 = bounded["daily"][0]["used_mb"], bounded["daily"][1]["used_mb"]
    assert day2 < day1 * 1.2  # steady, not growing with the days
