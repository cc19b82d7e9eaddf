"""The ledger: a local SQL record of everything a node did and received.

SQLAlchemy models over SQLite in WAL mode by default (any SQLAlchemy URL works). The node
writes one transaction per round, so a kill at any moment leaves every committed round
intact and no half-written one. Queries are plain functions that take a `Session`.

Resuming from a checkpoint older than the ledger's last round does not delete history: the
rounds after the checkpoint are marked `superseded` (they happened, but their model state was
lost) and the round is run again as a new row.

Deliberately not here: deciding what to record (the node does) or presenting it (the CLI).
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import cast

from sqlalchemy import (
    Boolean,
    CursorResult,
    Float,
    Integer,
    LargeBinary,
    String,
    create_engine,
    event,
    func,
    select,
    update,
)
from sqlalchemy.exc import OperationalError, SQLAlchemyError
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column, sessionmaker

from swarm.core.errors import LedgerError
from swarm.core.reasons import Direction, Reason, Status

SCHEMA_VERSION = 3


class Base(DeclarativeBase):
    pass


class Meta(Base):
    """Key-value facts about this ledger (schema version, node id, model)."""

    __tablename__ = "meta"
    key: Mapped[str] = mapped_column(String, primary_key=True)
    value: Mapped[str] = mapped_column(String)


class RoundRow(Base):
    """One round of the node: what it generated, how well, and where the time went."""

    __tablename__ = "rounds"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    round: Mapped[int] = mapped_column(Integer, index=True)
    policy_version: Mapped[int] = mapped_column(Integer)  # version after this round's update
    started_at: Mapped[float] = mapped_column(Float)
    questions: Mapped[int] = mapped_column(Integer)
    completions: Mapped[int] = mapped_column(Integer)
    mean_reward: Mapped[float] = mapped_column(Float)
    accuracy: Mapped[float] = mapped_column(Float)  # share of sampled completions fully correct
    tokens_generated: Mapped[int] = mapped_column(Integer)
    generate_s: Mapped[float] = mapped_column(Float)
    score_s: Mapped[float] = mapped_column(Float)
    train_s: Mapped[float] = mapped_column(Float)
    other_s: Mapped[float] = mapped_column(Float)
    total_s: Mapped[float] = mapped_column(Float)
    superseded: Mapped[bool] = mapped_column(Boolean, default=False)


class UpdateRow(Base):
    """One attempted GRPO update, including skipped ones and why."""

    __tablename__ = "updates"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    round: Mapped[int] = mapped_column(Integer, index=True)
    version_before: Mapped[int] = mapped_column(Integer)
    version_after: Mapped[int] = mapped_column(Integer)
    skipped: Mapped[bool] = mapped_column(Boolean)
    skip_reason: Mapped[str] = mapped_column(String, default="")
    local_groups: Mapped[int] = mapped_column(Integer)
    shared_groups: Mapped[int] = mapped_column(Integer)
    samples: Mapped[int] = mapped_column(Integer)
    tokens: Mapped[int] = mapped_column(Integer)
    mean_reward: Mapped[float] = mapped_column(Float)
    loss: Mapped[float] = mapped_column(Float)
    grad_norm: Mapped[float] = mapped_column(Float)
    clip_fraction: Mapped[float] = mapped_column(Float)
    kl: Mapped[float] = mapped_column(Float)
    seconds: Mapped[float] = mapped_column(Float)
    created_at: Mapped[float] = mapped_column(Float)
    superseded: Mapped[bool] = mapped_column(Boolean, default=False)


class EvalRow(Base):
    """Held-out accuracy of the policy at a version (greedy decoding, fixed question set)."""

    __tablename__ = "evals"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    round: Mapped[int] = mapped_column(Integer, index=True)  # rounds completed when evaluated
    policy_version: Mapped[int] = mapped_column(Integer)
    questions: Mapped[int] = mapped_column(Integer)
    accuracy: Mapped[float] = mapped_column(Float)
    mean_reward: Mapped[float] = mapped_column(Float)
    created_at: Mapped[float] = mapped_column(Float)
    superseded: Mapped[bool] = mapped_column(Boolean, default=False)


class PeerRow(Base):
    """A peer this node has heard from (or been told about)."""

    __tablename__ = "peers"
    peer_id: Mapped[str] = mapped_column(String, primary_key=True)
    first_seen: Mapped[float] = mapped_column(Float)
    last_seen: Mapped[float] = mapped_column(Float)
    model: Mapped[str] = mapped_column(String, default="")  # model named in its latest group
    addrs: Mapped[str] = mapped_column(String, default="[]")  # JSON list of multiaddrs


class GroupRow(Base):
    """A rollout group this node sent, or received and accepted or rejected (with the reason).

    `body` and `signature` are the exact signed bytes, so a stored group can be re-verified
    and replayed offline. Rejected messages that never decoded keep what is known of them.
    """

    __tablename__ = "rollout_groups"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    content_hash: Mapped[str] = mapped_column(String, index=True)
    direction: Mapped[str] = mapped_column(String)  # a `Direction`
    status: Mapped[str] = mapped_column(String, index=True)  # a `Status`: sent/accepted/rejected
    reason: Mapped[str] = mapped_column(String, default="")  # a `Reason` if rejected, else ""
    detail: Mapped[str] = mapped_column(String, default="")
    sender: Mapped[str] = mapped_column(
        String, index=True, default=""
    )  # claimed signer ("" if unknown)
    source: Mapped[str] = mapped_column(String, default="")  # libp2p origin of the message
    swarm_id: Mapped[str] = mapped_column(String, default="")
    dataset: Mapped[str] = mapped_column(String, default="")
    task: Mapped[str] = mapped_column(String, default="")  # JSON task spec
    model: Mapped[str] = mapped_column(String, default="")
    policy_version: Mapped[int] = mapped_column(Integer, default=-1)
    round: Mapped[int] = mapped_column(Integer, default=-1)  # the sender's round
    completions: Mapped[int] = mapped_column(Integer, default=0)
    mean_reward: Mapped[float] = mapped_column(Float, default=0.0)  # as claimed
    created_at: Mapped[float] = mapped_column(Float, default=0.0)  # as claimed
    recorded_at: Mapped[float] = mapped_column(Float)
    local_round: Mapped[int] = mapped_column(Integer, default=-1)  # our round when recorded
    body: Mapped[bytes | None] = mapped_column(LargeBinary, nullable=True)
    signature: Mapped[bytes | None] = mapped_column(LargeBinary, nullable=True)


class GroupUseRow(Base):
    """One use of a shared group in one of this node's updates, and the advantage it carried.

    This is what a peer's contribution means: how often its groups were learned from, and
    with how much signal (sum of absolute advantages of its completions).
    """

    __tablename__ = "group_uses"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    group_id: Mapped[int] = mapped_column(Integer, index=True)  # rollout_groups.id
    content_hash: Mapped[str] = mapped_column(String)
    sender: Mapped[str] = mapped_column(String, index=True)
    round: Mapped[int] = mapped_column(Integer, index=True)
    version_after: Mapped[int] = mapped_column(Integer)
    skipped_update: Mapped[bool] = mapped_column(Boolean, default=False)
    advantages: Mapped[str] = mapped_column(String)  # JSON list, one per completion
    advantage_abs_sum: Mapped[float] = mapped_column(Float)
    mean_reward: Mapped[float] = mapped_column(Float)  # as re-scored locally
    superseded: Mapped[bool] = mapped_column(Boolean, default=False)


class DeltaRow(Base):
    """A sparse weight delta (or full anchor) this node published, served, fetched or refused."""

    __tablename__ = "deltas"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    direction: Mapped[str] = mapped_column(String)  # a `Direction`
    peer: Mapped[str] = mapped_column(String, index=True, default="")  # the other side ("" if none)
    kind: Mapped[str] = mapped_column(String)  # "delta" | "anchor"
    from_version: Mapped[int] = mapped_column(Integer, default=-1)  # -1 for an anchor
    to_version: Mapped[int] = mapped_column(Integer)
    bytes: Mapped[int] = mapped_column(Integer)
    seconds: Mapped[float] = mapped_column(Float, default=0.0)  # encode/transfer/apply time
    status: Mapped[str] = mapped_column(String)  # a `Status`: published/served/applied/rejected
    reason: Mapped[str] = mapped_column(String, default="")  # a `Reason` if rejected, else ""
    recorded_at: Mapped[float] = mapped_column(Float)


class RejectionCountRow(Base):
    """Rejected messages counted instead of stored a row each: per peer, reason and window.

    Duplicates, a banned peer's messages, what the transport refused by itself, and a
    peer's rejected groups past its rows per window (`ledger.rejected_rows_per_peer`) are
    counted here, so what a peer can make a node write is bounded.
    """

    __tablename__ = "rejection_counts"
    peer: Mapped[str] = mapped_column(String, primary_key=True)  # the peer blamed ("" if none)
    reason: Mapped[str] = mapped_column(String, primary_key=True)  # a `Reason`
    window_start: Mapped[int] = mapped_column(Integer, primary_key=True)  # unix time, aligned
    count: Mapped[int] = mapped_column(Integer, default=0)
    last_at: Mapped[float] = mapped_column(Float, index=True)


class BanRow(Base):
    """A peer whose messages this node refuses: banned by its user or by its reputation score."""

    __tablename__ = "bans"
    peer_id: Mapped[str] = mapped_column(String, primary_key=True)
    source: Mapped[str] = mapped_column(String)  # "user" | "auto"
    reason: Mapped[str] = mapped_column(String, default="")
    banned_at: Mapped[float] = mapped_column(Float)


class Ledger:
    """An open ledger database: an engine plus a session factory.

    The node that owns a ledger opens it with `create=True` (the schema is made on first
    start); anything that only reads (status, the demo's live table, replay) opens it with
    `create=False` and so never writes to another process's database.
    """

    def __init__(self, url: str, create: bool = True):
        self.url = url
        try:
            self.engine = create_engine(url)
            if self.engine.dialect.name == "sqlite":
                event.listen(self.engine, "connect", _sqlite_pragmas)
            if create:
                _create_schema(self.engine)
        except SQLAlchemyError as e:
            raise LedgerError(f"cannot open ledger {url}: {_one_line(e)}") from None
        self._sessions = sessionmaker(self.engine, expire_on_commit=False)
        if create:
            self._stamp_schema()

    def _stamp_schema(self) -> None:
        """Record the schema version once; another opener may record it at the same moment."""
        try:
            with self.transaction() as session:
                if session.get(Meta, "schema_version") is None:
                    session.add(Meta(key="schema_version", value=str(SCHEMA_VERSION)))
        except LedgerError:
            with self.reader() as session:
                if session.get(Meta, "schema_version") is None:
                    raise

    @contextmanager
    def transaction(self) -> Iterator[Session]:
        """A session whose work is committed together at the end, or not at all."""
        session = self._sessions()
        try:
            yield session
            session.commit()
        except SQLAlchemyError as e:
            session.rollback()
            raise LedgerError(f"ledger write failed ({self.url}): {_one_line(e)}") from None
        except BaseException:
            session.rollback()
            raise
        finally:
            session.close()

    @contextmanager
    def reader(self) -> Iterator[Session]:
        """A read-only session (nothing is committed)."""
        session = self._sessions()
        try:
            yield session
        except SQLAlchemyError as e:
            raise LedgerError(f"ledger read failed ({self.url}): {_one_line(e)}") from None
        finally:
            session.close()

    def close(self) -> None:
        self.engine.dispose()


def _create_schema(engine, attempts: int = 5) -> None:
    """Create missing tables; if another process creates them at the same moment, look again."""
    for attempt in range(attempts):
        try:
            Base.metadata.create_all(engine)
            return
        except OperationalError as e:
            if "already exists" not in str(e) or attempt == attempts - 1:
                raise
            time.sleep(0.05 * (attempt + 1))


def _one_line(e: Exception) -> str:
    """A library error as one line (SQLAlchemy appends the SQL and a link on further lines)."""
    text = str(getattr(e, "orig", None) or e).strip().splitlines()
    return f"{e.__class__.__name__}: {text[0] if text else ''}"


def _sqlite_pragmas(dbapi_connection, _record) -> None:
    # WAL: readers never block the writer and a killed writer never corrupts the file.
    # synchronous=FULL: a committed round survives even an OS crash, at one fsync per round.
    cursor = dbapi_connection.cursor()
    # A new ledger can give pages freed by pruning back to the file system
    # (`swarm.ledger.retention`); on an existing one this is a no-op.
    cursor.execute("PRAGMA auto_vacuum=INCREMENTAL")
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=FULL")
    cursor.execute("PRAGMA busy_timeout=10000")
    cursor.close()


# ---------------------------------------------------------------------------------------------
# Queries: plain functions over a session


def set_meta(session: Session, key: str, value: str) -> None:
    session.merge(Meta(key=key, value=value))


def get_meta(session: Session, key: str) -> str | None:
    row = session.get(Meta, key)
    return None if row is None else row.value


def latest_rounds(session: Session, limit: int = 10) -> list[RoundRow]:
    """The most recent live (not superseded) rounds, newest first."""
    stmt = (
        select(RoundRow)
        .where(RoundRow.superseded.is_(False))
        .order_by(RoundRow.round.desc())
        .limit(limit)
    )
    return list(session.scalars(stmt))


def latest_evals(session: Session, limit: int = 10) -> list[EvalRow]:
    stmt = (
        select(EvalRow)
        .where(EvalRow.superseded.is_(False))
        .order_by(EvalRow.id.desc())
        .limit(limit)
    )
    return list(session.scalars(stmt))


def last_round(session: Session) -> int | None:
    """Index of the last live round recorded, or None for an empty ledger."""
    return session.scalar(select(func.max(RoundRow.round)).where(RoundRow.superseded.is_(False)))


def update_totals(session: Session) -> dict[str, int]:
    """How many updates were applied and skipped (by reason) over the node's live history."""
    rows = session.execute(
        select(UpdateRow.skipped, UpdateRow.skip_reason, func.count())
        .where(UpdateRow.superseded.is_(False))
        .group_by(UpdateRow.skipped, UpdateRow.skip_reason)
    ).all()
    totals: dict[str, int] = {"applied": 0}
    for skipped, reason, count in rows:
        key = f"skipped_{reason}" if skipped else "applied"
        totals[key] = totals.get(key, 0) + count
    return totals


def supersede_after(session: Session, round_index: int) -> int:
    """Mark every live record of rounds after `round_index` as superseded; return how many rounds."""
    count = 0
    for model in (RoundRow, UpdateRow, EvalRow, GroupUseRow):
        result = session.execute(
            update(model)
            .where(model.round > round_index, model.superseded.is_(False))
            .values(superseded=True)
        )
        if model is RoundRow:
            count = cast(CursorResult, result).rowcount or 0
    return count


def touch_peer(
    session: Session, peer_id: str, seen_at: float, model: str = "", addrs: str | None = None
) -> None:
    """Create or refresh a peer's row."""
    row = session.get(PeerRow, peer_id)
    if row is None:
        row = PeerRow(
            peer_id=peer_id, first_seen=seen_at, last_seen=seen_at, model=model, addrs=addrs or "[]"
        )
        session.add(row)
        return
    row.last_seen = max(row.last_seen, seen_at)
    if model:
        row.model = model
    if addrs is not None:
        row.addrs = addrs


def group_known(session: Session, content_hash: str) -> bool:
    """Whether a group with this content hash was already sent or accepted."""
    stmt = (
        select(GroupRow.id)
        .where(GroupRow.content_hash == content_hash, GroupRow.status != Status.REJECTED)
        .limit(1)
    )
    return session.scalar(stmt) is not None


def recent_accepted(
    session: Session, since: float, limit: int
) -> list[tuple[bytes, str, str, int, float]]:
    """(signed body, sender, content hash, policy version, recorded at) of the newest groups
    accepted since `since`, at most `limit`, oldest first."""
    stmt = (
        select(
            GroupRow.body,
            GroupRow.sender,
            GroupRow.content_hash,
            GroupRow.policy_version,
            GroupRow.recorded_at,
        )
        .where(GroupRow.direction == Direction.RECEIVED, GroupRow.status == Status.ACCEPTED)
        .where(GroupRow.recorded_at >= since)
        .where(GroupRow.body.is_not(None))
        .order_by(GroupRow.recorded_at.desc())
        .limit(limit)
    )
    return [
        (bytes(body or b""), sender, content_hash, version, at)
        for body, sender, content_hash, version, at in reversed(session.execute(stmt).all())
    ]


def rejected_rows_since(session: Session, since: float) -> list[tuple[str, str, str, int]]:
    """(source, claimed sender, reason, rows) of the received groups rejected as rows since
    `since`: what a restarted node has already written about each peer in this window."""
    stmt = (
        select(GroupRow.source, GroupRow.sender, GroupRow.reason, func.count())
        .where(GroupRow.direction == Direction.RECEIVED, GroupRow.status == Status.REJECTED)
        .where(GroupRow.recorded_at >= since)
        .group_by(GroupRow.source, GroupRow.sender, GroupRow.reason)
    )
    return [(source, sender, reason, n) for source, sender, reason, n in session.execute(stmt)]


def group_counts(session: Session) -> dict[str, int]:
    """Groups by status: sent, accepted, rejected."""
    rows = session.execute(select(GroupRow.status, func.count()).group_by(GroupRow.status)).all()
    return {status: count for status, count in rows}


# ---------------------------------------------------------------------------------------------
# Verification: bans and what peers had rejected


def banned_peers(session: Session) -> dict[str, BanRow]:
    """Every banned peer, by peer ID."""
    return {row.peer_id: row for row in session.scalars(select(BanRow))}


def add_ban(session: Session, peer_id: str, source: str, reason: str, banned_at: float) -> bool:
    """Ban a peer; False if it was banned already (the first ban, and who imposed it, stays)."""
    if session.get(BanRow, peer_id) is not None:
        return False
    session.add(BanRow(peer_id=peer_id, source=source, reason=reason, banned_at=banned_at))
    return True


def remove_ban(session: Session, peer_id: str, lifted_at: float | None = None) -> BanRow | None:
    """Lift a peer's ban; the removed row, or None if it was not banned.

    The time is kept (`unbanned_at`): the peer starts afresh, and what it sent before no
    longer counts against it when a node rebuilds reputations from the ledger.
    """
    row = session.get(BanRow, peer_id)
    if row is not None:
        session.delete(row)
        set_meta(
            session, _UNBANNED + peer_id, repr(time.time() if lifted_at is None else lifted_at)
        )
    return row


_UNBANNED = "unbanned_at:"


def unbanned_at(session: Session) -> dict[str, float]:
    """When each peer's last ban was lifted."""
    rows = session.scalars(select(Meta).where(Meta.key.startswith(_UNBANNED)))
    return {row.key[len(_UNBANNED) :]: float(row.value) for row in rows}


def add_rejection_counts(
    session: Session, counts: Mapping[tuple[str, Reason], int], now: float, window_s: float
) -> None:
    """Add (peer, reason) -> n to the counters of the window holding `now`."""
    start = int(now // window_s * window_s) if window_s > 0 else 0
    for (peer, reason), n in counts.items():
        row = session.get(RejectionCountRow, (peer, str(reason), start))
        if row is None:
            session.add(
                RejectionCountRow(
                    peer=peer, reason=str(reason), window_start=start, count=n, last_at=now
                )
            )
        else:
            row.count += n
            row.last_at = max(row.last_at, now)


def counted_rejections(session: Session, peer: str | None = None) -> dict[str, int]:
    """Counted (not stored) rejections by reason, of one peer or of everyone."""
    stmt = select(RejectionCountRow.reason, func.sum(RejectionCountRow.count))
    if peer is not None:
        stmt = stmt.where(RejectionCountRow.peer == peer)
    return {
        reason: int(n)
        for reason, n in session.execute(stmt.group_by(RejectionCountRow.reason)).all()
    }


def received_outcomes(session: Session) -> list[tuple[str, str, str, str, int]]:
    """(source, sender, status, reason, count) of every received group, for rebuilding reputations;
    counted rejections come as (peer, "", "rejected", reason, count).

    A peer's groups from before its last unban are left out: it started afresh then.
    """
    lifted = unbanned_at(session)
    columns = (GroupRow.source, GroupRow.sender, GroupRow.status, GroupRow.reason)
    # The peer a group counts for: the transport-authenticated source, else the claimed sender.
    blamed = func.coalesce(func.nullif(GroupRow.source, ""), GroupRow.sender)
    received = select(*columns, func.count()).where(GroupRow.direction == Direction.RECEIVED)
    out = [
        row.tuple()
        for row in session.execute(received.where(blamed.not_in(lifted)).group_by(*columns)).all()
    ]
    for peer, at in lifted.items():
        since = received.where(blamed == peer, GroupRow.recorded_at > at).group_by(*columns)
        out += [row.tuple() for row in session.execute(since).all()]
    counted = select(
        RejectionCountRow.peer, RejectionCountRow.reason, func.sum(RejectionCountRow.count)
    )
    by_peer = (RejectionCountRow.peer, RejectionCountRow.reason)
    counted_rows = list(
        session.execute(
            counted.where(RejectionCountRow.peer.not_in(lifted)).group_by(*by_peer)
        ).all()
    )
    for peer, at in lifted.items():
        since_unban = counted.where(RejectionCountRow.peer == peer, RejectionCountRow.last_at > at)
        counted_rows += session.execute(since_unban.group_by(*by_peer)).all()
    out += [(peer, "", Status.REJECTED.value, reason, int(n)) for peer, reason, n in counted_rows]
    return out
