"""What a node holds against its peers: bans and their lifting, rejections counted instead of
stored, and every received group's outcome for rebuilding reputations (a peer's record from
before its last unban left out)."""

from __future__ import annotations

import time
from collections.abc import Mapping

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from swarm.core.reasons import Direction, Reason, Status
from swarm.ledger.queries import set_meta
from swarm.ledger.schema import BanRow, GroupRow, Meta, RejectionCountRow


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
