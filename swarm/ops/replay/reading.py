"""Reading a ledger's stored rollout groups and re-verifying each one from its bytes alone.

`verify_row` checks one row (content hash, signature, swarm id, re-scored rewards) and
returns a `StoredGroup`; `iter_rows` and `count_rows` read the ledger in batches.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal

from sqlalchemy import select

from swarm.core.errors import RejectedMessage, SwarmError
from swarm.core.reasons import Reason, Status
from swarm.ledger import GroupRow, Ledger
from swarm.tasks import Task
from swarm.verify.rescore_pool import InProcess, Rescorer
from swarm.verify.rules import check_rewards
from swarm.wire import RolloutGroup, SignedGroup
from swarm.wire.signing import verify_signed

REWARD_TOLERANCE = 1e-6
TRAINABLE_STATUSES = (Status.SENT, Status.ACCEPTED)  # our own groups and peers' groups we accepted
WITHOUT_BYTES = (Reason.BODY_PRUNED, Reason.NEVER_STORED)  # rows that cannot be re-verified
RETENTION_KEYS = "ledger.keep_bodies_days, ledger.max_mb"  # what drops accepted groups' bytes


@dataclass(frozen=True)
class StoredGroup:
    """A ledger row's group after offline verification (`reason` is "" when it passed)."""

    row_id: int
    direction: str
    status: str
    content_hash: str
    reason: Reason | Literal[""]
    local_round: int = -1  # the recording node's round when it stored the group
    detail: str = ""
    group: RolloutGroup | None = None
    task: Task | None = None
    rewards: tuple[float, ...] = ()  # re-scored here

    @property
    def passed(self) -> bool:
        return not self.reason

    @property
    def without_bytes(self) -> bool:
        """The ledger holds no bytes of it (pruned, or never stored): nothing to re-verify."""
        return self.reason in WITHOUT_BYTES

    @property
    def rollout(self) -> RolloutGroup:
        """The verified group (only a group that passed has one)."""
        if self.group is None:
            raise SwarmError(
                f"group {self.content_hash[:12]} did not pass verification: {self.reason}"
            )
        return self.group


def verify_row(
    row: GroupRow,
    format_weight: float,
    swarm_id: str | None = None,
    tolerance: float = REWARD_TOLERANCE,
    rescorer: Rescorer | None = None,
) -> StoredGroup:
    """Re-verify one stored group from its bytes alone. Never raises for bad data.

    `rescorer` rebuilds the task and re-scores the completions: a `RescoreWorker` bounds that
    in time and memory as a live node does (a stored group may be a peer's costly task),
    `None` re-scores in this thread with no bound.

    The claimed rewards are checked with the sender's declared format bonus (as a live node
    checks them); the rewards kept for training use `format_weight`, this node's own bonus.
    """

    def stored(reason: Reason | Literal[""], detail: str = "", **verified) -> StoredGroup:
        return StoredGroup(
            row_id=row.id,
            direction=row.direction,
            status=row.status,
            content_hash=row.content_hash,
            local_round=row.local_round,
            reason=reason,
            detail=detail,
            **verified,
        )

    if row.body is None or row.signature is None:
        if row.status == Status.REJECTED:  # the node kept only what it knew when it refused it
            detail = f"refused ({row.reason}) before its bytes were fetched or decoded"
            return stored(Reason.NEVER_STORED, detail)
        detail = f"its bytes were pruned by the ledger's retention ({RETENTION_KEYS})"
        return stored(Reason.BODY_PRUNED, detail)
    signed = SignedGroup(bytes(row.body), bytes(row.signature))
    if signed.content_hash != row.content_hash:
        detail = "body does not hash to the recorded content hash"
        return stored(Reason.HASH_MISMATCH, detail)
    try:
        group = verify_signed(signed)
        if swarm_id is not None and group.swarm_id != swarm_id:
            raise RejectedMessage(
                Reason.WRONG_SWARM, f"group is for swarm {group.swarm_id!r}, not {swarm_id!r}"
            )
        rescored = (rescorer or InProcess())(group).result()
        check_rewards(group.rewards, rescored.rewards(group.format_bonus), tolerance)
    except RejectedMessage as e:
        return stored(e.reason, e.detail)
    return stored("", group=group, task=rescored.task, rewards=rescored.rewards(format_weight))


def iter_rows(url: str, batch: int = 500) -> Iterator[GroupRow]:
    """Every stored group row, in the order it was recorded (read in batches)."""
    ledger = Ledger(url, create=False)
    try:
        last = 0
        while True:
            with ledger.reader() as session:
                rows = list(
                    session.scalars(
                        select(GroupRow)
                        .where(GroupRow.id > last)
                        .order_by(GroupRow.id)
                        .limit(batch)
                    )
                )
            if not rows:
                return
            yield from rows
            last = rows[-1].id
    finally:
        ledger.close()


def count_rows(url: str) -> int:
    from sqlalchemy import func

    ledger = Ledger(url, create=False)
    try:
        with ledger.reader() as session:
            return session.scalar(select(func.count()).select_from(GroupRow)) or 0
    finally:
        ledger.close()
