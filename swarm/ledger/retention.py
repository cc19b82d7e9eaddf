"""Keeping a ledger within what its operator allows: its size, and pruning by age and size.

A node writes a row per group it sends, per group it accepts, per rejected group within each peer's quota, and a
counter per (peer, reason, window) beyond (`swarm.node.rejection_log`). Two settings bound
what stays (`ledger.keep_days`, `ledger.max_mb`; both off by default):

- rows older than `keep_days`: rejected groups, rejected deltas, rejection counters and
  this node's own sent groups are deleted;
- while the ledger's data (SQLite pages in use) exceed `max_mb`, the oldest of those go
  first, in this order: rejected groups and deltas, counters, then sent groups.

Accepted groups keep their rows and figures (sender, task, rewards, round, uses) for ever;
their signed bytes (`body`, `signature`), by far the largest part of a busy swarm's ledger,
are dropped once older than `ledger.keep_bodies_days`, and, while the ledger is still over
`max_mb` once everything above is gone, oldest first. Never those of the last
`verify.max_age_s` (a restarted node reads them back for duplicates and nonces); `swarm-node
replay` counts a group without its bytes as `body_pruned` (not a failure).

Never pruned: rounds, updates, evaluations, accepted groups' rows and their uses, bans and
peers: what `export`, `status` and the contribution reports read. A ledger still over
`max_mb` once nothing prunable is left is reported (`Pruned.over_bytes`), not cut further. Deletion runs in batches (short
transactions, the node keeps writing); freed pages are given back to the file system on a
ledger created with incremental auto-vacuum (every ledger this version creates), and
reused by later rows otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from sqlalchemy import delete, func, insert, inspect, select, text

from swarm.core.reasons import Direction, Status
from swarm.ledger.database import Ledger
from swarm.ledger.schema import Base, DeltaRow, GroupRow, RejectionCountRow

BATCH = 2000  # rows deleted per transaction
ROW_OVERHEAD = 200  # bytes of a row besides a group's signed body (an estimate)
DAY_S = 86_400.0
BODIES = "accepted bodies"  # a kind of `Pruned.rows`: signed bytes dropped, rows kept


@dataclass(frozen=True)
class Retention:
    keep_days: float = 0.0  # 0: no age limit
    max_mb: int = 0  # 0: no size cap
    keep_bodies_days: float = 0.0  # accepted groups' signed bytes; 0: kept
    protect_s: float = 3600.0  # accepted bodies younger than this are never dropped

    @classmethod
    def from_config(cls, config) -> Retention:
        max_age = config.verify.max_age_s
        return cls(
            config.ledger.keep_days,
            config.ledger.max_mb,
            config.ledger.keep_bodies_days,
            protect_s=max_age if max_age > 0 else DAY_S,
        )

    @property
    def active(self) -> bool:
        return self.keep_days > 0 or self.max_mb > 0 or self.keep_bodies_days > 0


@dataclass(frozen=True)
class LedgerSize:
    file_bytes: int | None  # the SQLite file and its WAL on disk (None: not a file ledger)
    used_bytes: int | None  # pages in use, free pages left out (None: not SQLite)
    rows: dict[str, int]  # per table


@dataclass
class Pruned:
    rows: dict[str, int] = field(default_factory=dict)  # deleted, by kind
    over_bytes: int = 0  # still over max_mb with nothing prunable left (0: within it)

    @property
    def total(self) -> int:
        return sum(self.rows.values())


def sqlite_path(url: str) -> Path | None:
    prefix = "sqlite:///"
    return Path(url[len(prefix) :]) if url.startswith(prefix) and len(url) > len(prefix) else None


def used_bytes(ledger: Ledger) -> int | None:
    """Bytes of the ledger's pages in use (SQLite); None for other databases."""
    if ledger.engine.dialect.name != "sqlite":
        return None
    with ledger.engine.connect() as conn:
        size = conn.execute(text("PRAGMA page_size")).scalar_one()
        pages = conn.execute(text("PRAGMA page_count")).scalar_one()
        free = conn.execute(text("PRAGMA freelist_count")).scalar_one()
    return int(size) * (int(pages) - int(free))


def ledger_size(ledger: Ledger, on_disk: str | None = None) -> LedgerSize:
    """How big a ledger is: on disk (`on_disk`: the URL whose file to measure, by default its
    own), in pages used, and in rows per table."""
    path = sqlite_path(on_disk or ledger.url)
    file_bytes = None
    if path is not None and path.is_file():
        wal = Path(f"{path}-wal")
        file_bytes = path.stat().st_size + (wal.stat().st_size if wal.is_file() else 0)
    with ledger.reader() as session:
        present = set(inspect(session.get_bind()).get_table_names())
        rows = {
            name: int(session.scalar(select(func.count()).select_from(table)) or 0)
            for name, table in Base.metadata.tables.items()
            if name in present
        }
    return LedgerSize(file_bytes, used_bytes(ledger), rows)


def _prunable(cutoff: float | None):
    """(kind, table, delete condition, age column) of what may be pruned, first to go first."""
    rejected = GroupRow.direction == Direction.RECEIVED, GroupRow.status == Status.REJECTED
    sent = GroupRow.direction == Direction.SENT, GroupRow.status == Status.SENT
    kinds = [
        ("rejected groups", GroupRow, rejected, GroupRow.recorded_at),
        ("rejected deltas", DeltaRow, (DeltaRow.status == Status.REJECTED,), DeltaRow.recorded_at),
        ("rejection counters", RejectionCountRow, (), RejectionCountRow.last_at),
        ("sent groups", GroupRow, sent, GroupRow.recorded_at),
    ]
    if cutoff is None:
        return kinds
    return [(kind, table, (*where, age < cutoff), age) for kind, table, where, age in kinds]


def _delete_oldest(ledger: Ledger, table, where, age, limit: int) -> int:
    """Delete up to `limit` rows of `table` matching `where`, oldest first; how many went."""
    keys = list(table.__table__.primary_key.columns)
    with ledger.transaction() as session:
        oldest = select(*keys).where(*where).order_by(age).limit(limit)
        chosen = session.execute(oldest).all()
        if not chosen:
            return 0
        if len(keys) == 1:
            session.execute(delete(table).where(keys[0].in_([row[0] for row in chosen])))
        else:
            for row in chosen:
                session.execute(
                    delete(table).where(*(k == v for k, v in zip(keys, row, strict=True)))
                )
    return len(chosen)


def _accepted_with_body(cutoff: float) -> tuple:
    return (
        GroupRow.direction == Direction.RECEIVED,
        GroupRow.status == Status.ACCEPTED,
        GroupRow.body.is_not(None),
        GroupRow.recorded_at < cutoff,
    )


def _drop_oldest_bodies(ledger: Ledger, cutoff: float, limit: int) -> int:
    """Drop the signed bytes of up to `limit` accepted groups recorded before `cutoff`,
    oldest first (their rows stay, with the same ids); how many.

    Each row is deleted and written again without its bytes: an UPDATE would leave every
    row in the B-tree page its bytes once filled (SQLite rebalances pages on delete, not on
    a shrinking update), about 4 KB a row kept for ever; measured 4.3 KB a row that way,
    against the row's own few hundred bytes this way.
    """
    columns = [c for c in GroupRow.__table__.columns if c.name not in ("body", "signature")]
    with ledger.transaction() as session:
        oldest = (
            select(*columns)
            .where(*_accepted_with_body(cutoff))
            .order_by(GroupRow.recorded_at)
            .limit(limit)
        )
        rows = [dict(row._mapping) for row in session.execute(oldest)]
        if rows:
            session.execute(delete(GroupRow).where(GroupRow.id.in_([r["id"] for r in rows])))
            session.execute(
                insert(GroupRow), [{**r, "body": None, "signature": None} for r in rows]
            )
    return len(rows)


def _row_bytes(ledger: Ledger, table, where) -> int:
    """About how many bytes one prunable row of `table` holds (its signed body and the rest)."""
    if table is not GroupRow:
        return ROW_OVERHEAD
    with ledger.reader() as session:
        body = session.scalar(select(func.avg(func.length(GroupRow.body))).where(*where))
    return ROW_OVERHEAD + int(body or 0)


def prune(ledger: Ledger, retention: Retention, now: float) -> Pruned:
    """Apply `retention` to `ledger` (see the module docstring); what was deleted."""
    pruned = Pruned()
    if retention.keep_days > 0:
        for kind, table, where, age in _prunable(now - retention.keep_days * DAY_S):
            while (n := _delete_oldest(ledger, table, where, age, BATCH)) > 0:
                pruned.rows[kind] = pruned.rows.get(kind, 0) + n
    newest_droppable = now - retention.protect_s
    if retention.keep_bodies_days > 0:
        cutoff = min(newest_droppable, now - retention.keep_bodies_days * DAY_S)
        while (n := _drop_oldest_bodies(ledger, cutoff, BATCH)) > 0:
            pruned.rows[BODIES] = pruned.rows.get(BODIES, 0) + n
    cap = retention.max_mb << 20
    if cap > 0 and (used := used_bytes(ledger)) is not None:
        for kind, table, where, age in _prunable(None):
            while used > cap:
                limit = min(BATCH, 1 + (used - cap) // _row_bytes(ledger, table, where))
                if (n := _delete_oldest(ledger, table, where, age, limit)) == 0:
                    break
                pruned.rows[kind] = pruned.rows.get(kind, 0) + n
                used = used_bytes(ledger) or 0
        while used > cap:
            body = _row_bytes(ledger, GroupRow, _accepted_with_body(newest_droppable))
            limit = min(BATCH, 1 + (used - cap) // max(1, body - ROW_OVERHEAD))
            if (n := _drop_oldest_bodies(ledger, newest_droppable, limit)) == 0:
                break
            pruned.rows[BODIES] = pruned.rows.get(BODIES, 0) + n
            used = used_bytes(ledger) or 0
        pruned.over_bytes = max(0, used - cap)
    if pruned.total:
        give_back_free_pages(ledger)
    return pruned


def give_back_free_pages(ledger: Ledger) -> None:
    """Return a SQLite ledger's free pages to the file system (with incremental auto-vacuum),
    and empty its write-ahead log if no reader holds it (else it is reused as it is)."""
    if ledger.engine.dialect.name != "sqlite":
        return
    raw = ledger.engine.raw_connection()
    try:
        driver = raw.driver_connection
        assert driver is not None  # an open pysqlite connection
        # executescript steps the pragma to its end (execute() frees one page per step)
        driver.executescript("PRAGMA incremental_vacuum; PRAGMA wal_checkpoint(TRUNCATE);")
    finally:
        raw.close()


def describe(size: LedgerSize) -> str:
    """One line about a ledger's size, for `swarm-node doctor` and the node's log."""
    parts = []
    if size.file_bytes is not None:
        parts.append(f"{size.file_bytes / 1e6:.1f} MB on disk")
    if size.used_bytes is not None:
        parts.append(f"{size.used_bytes / 1e6:.1f} MB in use")
    groups = size.rows.get(GroupRow.__tablename__, 0)
    counters = size.rows.get(RejectionCountRow.__tablename__, 0)
    parts.append(
        f"{groups} group rows, {counters} rejection counters, {sum(size.rows.values())} rows in all"
    )
    return "; ".join(parts)
