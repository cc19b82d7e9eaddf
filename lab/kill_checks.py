"""The kill loop's checks of a killed node's ledger: which phase the kill hit (from the marks
file), every committed row before and after, `PRAGMA integrity_check`, rows lost or changed
(but for the columns a resume may update), rows recorded twice.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

PHASES = ("delta fetch", "ledger write", "round", "start")
# Columns a resume may legitimately change in a committed row.
MUTABLE = {
    "rounds": {"superseded"},
    "updates": {"superseded"},
    "evals": {"superseded"},
    "group_uses": {"superseded"},
    "peers": {"last_seen", "addrs", "model"},
    "meta": {"value"},
}


def phase_of(marks: bytes) -> str:
    """Which phase the marks of a killed life end in."""
    if marks.rfind(b"F") > marks.rfind(b"f"):
        return "delta fetch"
    if marks.rfind(b"L") > marks.rfind(b"l"):
        return "ledger write"
    return "round" if b"S" in marks else "start"


def snapshot(path: Path) -> dict:
    """Every committed row: (table, rowid) -> {column: value}."""
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=30)
    try:
        tables = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        rows = {}
        for table in tables:
            cursor = db.execute(f'SELECT rowid, * FROM "{table}"')
            names = [d[0] for d in cursor.description][1:]
            for rowid, *values in cursor:
                rows[(table, rowid)] = dict(zip(names, values, strict=True))
        return rows
    finally:
        db.close()


def integrity(path: Path) -> str:
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=30)
    try:
        return db.execute("PRAGMA integrity_check").fetchone()[0]
    finally:
        db.close()


def stable(table: str, row: dict) -> dict:
    return {k: v for k, v in row.items() if k not in MUTABLE.get(table, ())}


def lost(before: dict, after: dict) -> list[str]:
    """Rows of `before` missing or changed in `after` (a superseded row never revives)."""
    out = []
    for key, row in before.items():
        now = after.get(key)
        if now is None or stable(key[0], now) != stable(key[0], row):
            out.append(f"{key} {'gone' if now is None else 'changed'}")
        elif row.get("superseded") and not now.get("superseded"):
            out.append(f"{key} came back to life")
    return out


def duplicated(rows: dict) -> list[str]:
    """What a node recorded twice: live rounds, updates, evaluations or group uses of one
    round, or one group sent or accepted twice (a group's row is its content hash)."""
    out = []
    keys = {
        "rounds": ("round",),
        "updates": ("round",),
        "evals": ("round",),
        "group_uses": ("group_id", "round"),
    }
    for table, fields in keys.items():
        live = [
            tuple(r[f] for f in fields)
            for (t, _), r in rows.items()
            if t == table and not r["superseded"]
        ]
        if len(live) != len(set(live)):
            out.append(f"live {table} repeat a {'/'.join(fields)}")
    rounds = sorted(
        r["round"] for (t, _), r in rows.items() if t == "rounds" and not r["superseded"]
    )
    if rounds != list(range(len(rounds))):
        out.append(f"live rounds are not 0..n-1: ...{rounds[-10:]}")
    groups = [
        (r["content_hash"], r["direction"])
        for (t, _), r in rows.items()
        if t == "rollout_groups" and r["status"] in ("sent", "accepted")
    ]
    if len(groups) != len(set(groups)):
        out.append("a group is recorded as sent or accepted twice")
    return out
