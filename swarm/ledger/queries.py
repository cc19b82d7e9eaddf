"""Queries of a node's own history: plain functions over a `Session` (meta facts, rounds,
updates, evaluations, peers, and the rollout groups sent, accepted and rejected)."""

from __future__ import annotations

from typing import cast

from sqlalchemy import CursorResult, func, select, update
from sqlalchemy.orm import Session

from swarm.core.reasons import Direction, Status
from swarm.ledger.schema import (
    EvalRow,
    GroupRow,
    GroupUseRow,
    Meta,
    PeerRow,
    RoundRow,
    UpdateRow,
)


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
