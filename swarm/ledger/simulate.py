"""A ledger filled with days of synthetic accepted groups at a given rate, pruned the way a
node prunes it, to see what retention bounds: its size with and without it.

Each simulated hour adds `groups_per_s * 3600` accepted groups (rows with random signed
bytes of `body_bytes`, which SQLite stores as they are), then applies the retention at that
hour's clock, as a running node does between rounds. Sizes are the ledger's pages in use
and its file on disk. Used by `scripts/ledger_week.py` and its test.
"""

from __future__ import annotations

import hashlib
import os
import time
from dataclasses import dataclass

from sqlalchemy import insert

from swarm.core.reasons import Direction, Status
from swarm.ledger.database import Ledger
from swarm.ledger.retention import Retention, ledger_size, prune
from swarm.ledger.schema import GroupRow

HOUR_S = 3600.0


@dataclass(frozen=True)
class FillSettings:
    days: float = 7.0
    groups_per_s: float = 7.3  # accepted groups a second
    body_bytes: int = 9_300  # signed bytes of one group
    start: float = 1_700_000_000.0  # the simulated clock at the first hour


def _rows(first: int, count: int, at: float, body_bytes: int) -> list[dict]:
    out = []
    for i in range(first, first + count):
        body = os.urandom(body_bytes)
        out.append(
            {
                "content_hash": hashlib.sha256(body).hexdigest(),
                "direction": Direction.RECEIVED.value,
                "status": Status.ACCEPTED.value,
                "sender": f"peer{i % 32}",
                "source": f"peer{i % 32}",
                "dataset": "chain_sum",
                "completions": 8,
                "mean_reward": 0.5,
                "created_at": at,
                "recorded_at": at,
                "body": body,
                "signature": os.urandom(64),
            }
        )
    return out


def fill_week(url: str, fill: FillSettings, retention: Retention) -> dict:
    """Fill the ledger at `url` hour by hour, pruning with `retention` after each hour;
    its size every simulated day and at the end, and how long it took."""
    ledger = Ledger(url)
    began = time.perf_counter()
    per_hour = round(fill.groups_per_s * HOUR_S)
    hours = round(fill.days * 24)
    daily: list[dict] = []
    pruned_total: dict[str, int] = {}
    written = 0
    try:
        for hour in range(hours):
            now = fill.start + (hour + 1) * HOUR_S
            for at_batch in range(0, per_hour, 1000):
                n = min(1000, per_hour - at_batch)
                at = now - HOUR_S + (at_batch + n) * HOUR_S / max(1, per_hour)
                with ledger.transaction() as session:
                    session.execute(insert(GroupRow), _rows(written, n, at, fill.body_bytes))
                written += n
            if retention.active:
                for kind, n in prune(ledger, retention, now).rows.items():
                    pruned_total[kind] = pruned_total.get(kind, 0) + n
            if (hour + 1) % 24 == 0 or hour + 1 == hours:
                size = ledger_size(ledger)
                daily.append(
                    {
                        "day": round((hour + 1) / 24, 2),
                        "used_mb": round((size.used_bytes or 0) / 1e6, 1),
                        "file_mb": round((size.file_bytes or 0) / 1e6, 1),
                        "rows": size.rows.get(GroupRow.__tablename__, 0),
                    }
                )
    finally:
        ledger.close()
    return {
        "groups_written": written,
        "daily": daily,
        "final": daily[-1] if daily else {},
        "pruned": pruned_total,
        "seconds": round(time.perf_counter() - began, 1),
    }
