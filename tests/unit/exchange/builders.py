"""Plain announcements for the exchange's tests: made-up hashes, one tiny task each."""

from __future__ import annotations

from swarm.tasks import TaskSpec
from swarm.wire import GroupAnnouncement


def announcement(
    sender: str, i: int, created_at: float = 0.0, policy_version: int = 0, model: str = "m"
) -> GroupAnnouncement:
    """Announcement number `i` of `sender`: its blob hash is `i`, its rewards carry signal."""
    return GroupAnnouncement(
        base_hash="0",
        blob_hash=f"{i:064x}",
        created_at=created_at,
        model=model,
        policy_version=policy_version,
        rewards=(0.0, 1.0),
        round=0,
        seed_salt=0,
        sender=sender,
        size=1,
        swarm_id="s",
        task=TaskSpec.make("chain_sum", {}, 0, i),
    )
