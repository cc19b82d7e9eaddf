"""Who contributed what: per-peer figures read from a node's ledger.

Pure queries over a SQLAlchemy `Session` (no I/O of their own, no printing): for each peer,
the rollout groups this node received from it (accepted, rejected by reason, stored or
only counted), what its transport refused from it, how often
they were used in this node's updates and with how much advantage, the reward of its
groups, the weight deltas exchanged with it, when it was first and last seen and which
model it runs; and, as far as this node's own ledger can know it, this node's contribution
to the others (groups it published, deltas it served).

A group is attributed to the peer that delivered it (the libp2p source), falling back to
the claimed sender: a forged signature must count against the forger, not against the
peer it pretended to be. Uses in skipped updates and superseded uses (rounds lost to a
restart) do not count as contributions.

Deliberately not here: drawing tables or plots (`swarm.ops.views`), or deciding to ban
anyone (the node's reputation logic).
"""

from __future__ import annotations

import json
import re
import time
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from datetime import datetime

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from swarm.core.errors import SwarmError
from swarm.ledger import (
    BanRow,
    DeltaRow,
    GroupRow,
    GroupUseRow,
    PeerRow,
    RejectionCountRow,
    RoundRow,
)
from swarm.node.refusals import TRANSPORT_REASONS


@dataclass(frozen=True)
class Window:
    """A time window on the local clock (unix seconds); None leaves a side open."""

    since: float | None = None
    until: float | None = None

    def holds(self, t: float) -> bool:
        return (self.since is None or t >= self.since) and (self.until is None or t <= self.until)


@dataclass
class PeerContribution:
    """Everything this node's ledger knows about one peer's contribution."""

    peer_id: str
    model: str = ""
    first_seen: float | None = None
    last_seen: float | None = None
    addrs: list[str] = field(default_factory=list)
    banned: str = ""  # "" or "user: reason" / "auto: reason"
    received: int = 0  # groups received (accepted + rejected, duplicates included)
    accepted: int = 0
    rejected: int = 0
    rejected_by_reason: dict[str, int] = field(default_factory=dict)
    refused_by_reason: dict[str, int] = field(default_factory=dict)  # by the transport itself
    mean_reward: float | None = None  # claimed mean reward of its accepted groups
    used: int = 0  # uses of its groups in applied updates
    advantage_total: float = 0.0  # sum of |advantage| over those uses' completions
    used_reward: float | None = None  # mean reward of used groups, as re-scored locally
    deltas_from: int = 0  # deltas/anchors fetched from it and applied
    delta_bytes_from: int = 0
    deltas_to: int = 0  # deltas/anchors this node served to it
    delta_bytes_to: int = 0

    @property
    def advantage_mean(self) -> float:
        return self.advantage_total / self.used if self.used else 0.0

    def as_dict(self) -> dict:
        return {**asdict(self), "advantage_mean": self.advantage_mean}


@dataclass
class OwnContribution:
    """What this node gave the swarm, as far as its own ledger knows."""

    groups_published: int = 0
    mean_reward: float | None = None  # of the groups it published
    deltas_published: int = 0
    deltas_served: int = 0
    delta_bytes_served: int = 0
    served_to: dict[str, int] = field(default_factory=dict)  # peer -> deltas served to it


SORT_KEYS = {
    "advantage": lambda p: -p.advantage_total,
    "used": lambda p: -p.used,
    "accepted": lambda p: -p.accepted,
    "rejected": lambda p: -p.rejected,
    "received": lambda p: -p.received,
    "reward": lambda p: -(p.mean_reward if p.mean_reward is not None else -1e9),
    "deltas": lambda p: -p.deltas_from,
    "last-seen": lambda p: -(p.last_seen or 0.0),
    "first-seen": lambda p: p.first_seen or 0.0,
    "peer": lambda p: p.peer_id,
}


def _use_times(session: Session) -> dict[int, float]:
    """Local round -> when it started (live rounds only): the time a group use happened."""
    rows = session.execute(
        select(RoundRow.round, RoundRow.started_at).where(RoundRow.superseded.is_(False))
    )
    return {r: t for r, t in rows}


def peer_contributions(
    session: Session, window: Window = Window(), sort: str = "advantage"
) -> list[PeerContribution]:
    """One `PeerContribution` per peer that appears anywhere in the ledger, sorted by `sort`."""
    if sort not in SORT_KEYS:
        raise SwarmError(f"--sort must be one of {', '.join(SORT_KEYS)}, not {sort!r}")
    peers: dict[str, PeerContribution] = {}

    def peer(peer_id: str) -> PeerContribution:
        if peer_id not in peers:
            peers[peer_id] = PeerContribution(peer_id)
        return peers[peer_id]

    for row in session.scalars(select(PeerRow)):
        p = peer(row.peer_id)
        p.model, p.first_seen, p.last_seen = row.model, row.first_seen, row.last_seen
        p.addrs = _json_list(row.addrs)
    rewards: dict[str, list[float]] = defaultdict(list)
    stmt = select(
        GroupRow.source,
        GroupRow.sender,
        GroupRow.status,
        GroupRow.reason,
        GroupRow.mean_reward,
        GroupRow.recorded_at,
    ).where(GroupRow.direction == "received")
    for source, sender, status, reason, mean_reward, recorded_at in session.execute(stmt):
        origin = source or sender
        if not origin or not window.holds(recorded_at):
            continue
        p = peer(origin)
        p.received += 1
        if status == "accepted":
            p.accepted += 1
            rewards[origin].append(mean_reward)
        elif status == "rejected":
            p.rejected += 1
            p.rejected_by_reason[reason] = p.rejected_by_reason.get(reason, 0) + 1
    for origin, values in rewards.items():
        peers[origin].mean_reward = sum(values) / len(values)
    _add_counted(session, window, peer)
    _add_uses(session, window, peer)
    _add_deltas(session, window, peer)
    for ban in session.scalars(select(BanRow)):
        peer(ban.peer_id).banned = f"{ban.source}: {ban.reason}" if ban.reason else ban.source
    return sorted(peers.values(), key=lambda p: (SORT_KEYS[sort](p), p.peer_id))


def _add_counted(session: Session, window: Window, peer) -> None:
    """Rejections counted rather than stored (`rejection_counts`), by the window they ended in."""
    refusals = {str(r) for r in TRANSPORT_REASONS.values()}
    for row in session.scalars(select(RejectionCountRow).where(RejectionCountRow.peer != "")):
        if not window.holds(row.last_at):
            continue
        p = peer(row.peer)
        if row.reason in refusals:
            p.refused_by_reason[row.reason] = p.refused_by_reason.get(row.reason, 0) + row.count
            continue
        p.received += row.count
        p.rejected += row.count
        p.rejected_by_reason[row.reason] = p.rejected_by_reason.get(row.reason, 0) + row.count


def _add_uses(session: Session, window: Window, peer) -> None:
    started = _use_times(session)
    received_at = dict(
        session.execute(
            select(GroupRow.id, GroupRow.recorded_at).where(GroupRow.direction == "received")
        ).all()
    )
    used_rewards: dict[str, list[float]] = defaultdict(list)
    uses = select(GroupUseRow).where(
        GroupUseRow.superseded.is_(False), GroupUseRow.skipped_update.is_(False)
    )
    for use in session.scalars(uses):
        when = started.get(use.round, received_at.get(use.group_id, 0.0))
        if not window.holds(when):
            continue
        p = peer(use.sender)
        p.used += 1
        p.advantage_total += use.advantage_abs_sum
        used_rewards[use.sender].append(use.mean_reward)
    for sender, values in used_rewards.items():
        peer(sender).used_reward = sum(values) / len(values)


def _add_deltas(session: Session, window: Window, peer) -> None:
    for row in session.scalars(select(DeltaRow).where(DeltaRow.peer != "")):
        if not window.holds(row.recorded_at):
            continue
        if row.direction == "received" and row.status == "applied":
            p = peer(row.peer)
            p.deltas_from += 1
            p.delta_bytes_from += row.bytes
        elif row.direction == "sent" and row.status == "served":
            p = peer(row.peer)
            p.deltas_to += 1
            p.delta_bytes_to += row.bytes


def own_contribution(session: Session, window: Window = Window()) -> OwnContribution:
    """This node's own contribution: what it published and served (its ledger cannot see more)."""
    own = OwnContribution()
    rewards = []
    stmt = select(GroupRow.mean_reward, GroupRow.recorded_at).where(GroupRow.direction == "sent")
    for mean_reward, recorded_at in session.execute(stmt):
        if window.holds(recorded_at):
            own.groups_published += 1
            rewards.append(mean_reward)
    own.mean_reward = sum(rewards) / len(rewards) if rewards else None
    for row in session.scalars(select(DeltaRow).where(DeltaRow.direction == "sent")):
        if not window.holds(row.recorded_at):
            continue
        if row.status == "published":
            own.deltas_published += 1
        elif row.status == "served":
            own.deltas_served += 1
            own.delta_bytes_served += row.bytes
            if row.peer:
                own.served_to[row.peer] = own.served_to.get(row.peer, 0) + 1
    return own


def contribution_timeline(
    session: Session, window: Window = Window()
) -> dict[str, list[tuple[float, float, int]]]:
    """Per peer, the running totals (time, advantage so far, accepted groups so far), in time order.

    One point per accepted group or use, so a plot shows when each peer's help arrived.
    """
    events: dict[str, list[tuple[float, float, int]]] = defaultdict(
        list
    )  # (t, advantage, accepted)
    stmt = select(GroupRow.source, GroupRow.sender, GroupRow.recorded_at).where(
        GroupRow.direction == "received", GroupRow.status == "accepted"
    )
    for source, sender, recorded_at in session.execute(stmt):
        if (source or sender) and window.holds(recorded_at):
            events[source or sender].append((recorded_at, 0.0, 1))
    started = _use_times(session)
    received_at = dict(session.execute(select(GroupRow.id, GroupRow.recorded_at)).all())
    uses = select(GroupUseRow).where(
        GroupUseRow.superseded.is_(False), GroupUseRow.skipped_update.is_(False)
    )
    for use in session.scalars(uses):
        when = started.get(use.round, received_at.get(use.group_id, 0.0))
        if window.holds(when):
            events[use.sender].append((when, use.advantage_abs_sum, 0))
    timeline = {}
    for peer_id, items in events.items():
        advantage, accepted, points = 0.0, 0, []
        for t, a, n in sorted(items):
            advantage += a
            accepted += n
            points.append((t, advantage, accepted))
        timeline[peer_id] = points
    return timeline


def group_count(session: Session) -> int:
    """How many rollout groups the ledger holds in all (to tell an empty ledger apart)."""
    return session.scalar(select(func.count()).select_from(GroupRow)) or 0


# ---------------------------------------------------------------------------------------------
# Parsing a time window from the command line

_DURATION_RE = re.compile(r"^(\d+(?:\.\d+)?)\s*([smhd])$")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_when(text: str | None, now: float | None = None) -> float | None:
    """A point in time: a duration back from now ('90s', '30m', '2h', '1d'), an ISO date/time
    ('2025-06-01', '2025-06-01T12:00'), or unix seconds. None stays None."""
    if text is None:
        return None
    text = text.strip()
    now = time.time() if now is None else now
    match = _DURATION_RE.match(text)
    if match:
        return now - float(match.group(1)) * _UNITS[match.group(2)]
    try:
        return float(text)
    except ValueError:
        pass
    try:
        return datetime.fromisoformat(text).timestamp()
    except ValueError:
        raise SwarmError(
            f"cannot read time {text!r}: use a duration back from now (30m, 2h, 1d), an ISO date/time or unix seconds"
        ) from None


def _json_list(text: str) -> list[str]:
    try:
        value = json.loads(text or "[]")
    except ValueError:
        return []
    return [str(v) for v in value] if isinstance(value, list) else []
