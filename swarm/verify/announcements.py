"""Checks on the pull exchange's announcements, and on a pulled group against its announcement.

An announcement is what a node learns about a peer's group before deciding to pull it, so
its checks are the cheap ones, in cost order: decoding, the sender's Ed25519 signature,
the swarm, that the peer serving the list is the sender, the allow-list and bans, that the
task is on this node's catalogue (its mix and `verify.task_catalogue`), that the task
belongs to the sender's own task stream (`swarm.tasks.stream_seed`: no peer can
announce a group for another sender's task, which makes copying a group pointless), age
and clock skew, duplicates, and a per-sender rate limit. Every refusal names a `Reason`.

A pulled group must then be the one announced: the served bytes (`[body, signature]`) are
the announced size and hash to the announced `blob_hash` (content addressing: any holder
may serve them, and a holder that serves anything else is blamed alone, before anything is
decoded), and the group agrees with every announced field (else its sender is blamed).
Served bytes of the announced size that do not hash to the key they were served under, or
a sender's own group served at another size than it signed, are proof of bad faith
(`wrong_bytes_proven`: `Reason.WRONG_BYTES`); another size from a holder is not (the
sender may have announced a wrong size to frame the holders it hints).
After that it goes through the same checks as a gossiped group (`Verifier.admit`, then
`Verifier.verify_content` before training).

Deliberately not here: fetching, sampling or pooling (`swarm.exchange.pull`).
"""

from __future__ import annotations

import collections
import hashlib
import threading
from collections.abc import Callable, Collection

from swarm.core.errors import RejectedMessage
from swarm.core.reasons import Reason
from swarm.tasks import stream_seed
from swarm.verify import rules
from swarm.verify.tracking import RateLimits
from swarm.wire import GroupAnnouncement, RolloutGroup, SignedAnnouncement
from swarm.wire.signing import verify_announcement

SEEN_MEMORY = 100_000  # announced blob hashes remembered (duplicates)


def check_task_binding(announcement: GroupAnnouncement) -> None:
    """The announced task must come from the sender's own task stream."""
    expected = stream_seed(announcement.sender, announcement.seed_salt)
    if announcement.task.seed != expected:
        raise RejectedMessage(
            Reason.FOREIGN_TASK,
            f"task seed {announcement.task.seed} is not {announcement.sender[:16]}...'s stream",
        )


def check_served(announcement: GroupAnnouncement, data: bytes) -> None:
    """Served bytes must be exactly the announced ones: `size` long, hashing to `blob_hash`.

    Checked before anything is decoded, so a failure is the serving peer's alone (a holder
    serving a good body with a broken signature fails here, not at the signature check)."""
    if len(data) != announcement.size:
        raise RejectedMessage(
            Reason.ANNOUNCEMENT_MISMATCH,
            f"served {len(data)} bytes where {announcement.size} were announced",
        )
    if hashlib.sha256(data).hexdigest() != announcement.blob_hash:
        raise RejectedMessage(
            Reason.ANNOUNCEMENT_MISMATCH, "the served bytes do not hash to the announced hash"
        )


def wrong_bytes_proven(
    announcement: GroupAnnouncement, source: str, refused: RejectedMessage, sized: bool
) -> bool:
    """Whether a source's answer refused by `check_served` (or on its size, before it was
    read) proves that it served other bytes: bytes of the announced size (`sized`) that do
    not hash to the key asked for, which no honest peer serves, or anything else from the
    sender itself, which signed that size and hash."""
    if refused.reason != Reason.ANNOUNCEMENT_MISMATCH:
        return False
    return sized or source == announcement.sender


def check_matches(announcement: GroupAnnouncement, group: RolloutGroup) -> None:
    """The announced bytes' group must agree with every announced field (the sender signed
    both: a disagreement is the sender's)."""
    pairs = {
        "sender": (group.sender, announcement.sender),
        "swarm": (group.swarm_id, announcement.swarm_id),
        "task": (group.task, announcement.task),
        "rewards": (tuple(group.rewards), tuple(announcement.rewards)),
        "round": (group.round, announcement.round),
        "policy version": (group.policy_version, announcement.policy_version),
        "model": ((group.model, group.base_hash), (announcement.model, announcement.base_hash)),
        "created_at": (group.created_at, announcement.created_at),
    }
    problems = [name for name, (a, b) in pairs.items() if a != b]
    if problems:
        raise RejectedMessage(
            Reason.ANNOUNCEMENT_MISMATCH, "the pulled group differs in " + ", ".join(problems)
        )


class AnnouncementGate:
    """The cheap checks on announcements, with the little state they need (thread-safe)."""

    def __init__(
        self,
        swarm_id: str,
        *,
        allow_list: Collection[str] = (),
        banned: Callable[[], Collection[str]] = frozenset,
        catalogue: Collection[tuple[str, str]] | None = None,
        max_age_s: float = 3600.0,
        max_future_s: float = 300.0,
        rate_per_s: float = 100.0,
        burst: int = 4096,
    ):
        self.swarm_id = swarm_id
        self.allow_list = frozenset(allow_list)
        self.banned = banned
        self.catalogue = catalogue
        self.max_age_s, self.max_future_s = max_age_s, max_future_s
        self._rates = RateLimits(rate_per_s, burst)
        self._seen: collections.OrderedDict[str, None] = collections.OrderedDict()
        self._lock = threading.Lock()

    def check(
        self, signed: SignedAnnouncement, source: str, now: float, again: bool = False
    ) -> GroupAnnouncement:
        """The announcement, if it passes every check; else `RejectedMessage`.

        One seen before is `DUPLICATE`, or with `again` passes without counting against its
        sender's rate again (a group re-announced with its holders, not yet pulled)."""
        announcement = verify_announcement(signed)
        if announcement.swarm_id != self.swarm_id:
            raise RejectedMessage(
                Reason.WRONG_SWARM, f"announcement of swarm {announcement.swarm_id!r}"
            )
        if announcement.sender != source:
            raise RejectedMessage(
                Reason.SENDER_MISMATCH,
                f"announced by {announcement.sender[:16]}... but served by {source[:16]}...",
            )
        rules.check_allowed(announcement.sender, self.allow_list)
        rules.check_not_banned(announcement.sender, self.banned())
        rules.check_task_listed(announcement.task, self.catalogue)
        check_task_binding(announcement)
        rules.check_age(announcement.created_at, now, self.max_age_s, self.max_future_s)
        with self._lock:
            if announcement.blob_hash in self._seen:
                if again:
                    return announcement
                raise RejectedMessage(Reason.DUPLICATE, "announcement already seen")
            if not self._rates.allows(announcement.sender, 1, now):
                raise RejectedMessage(
                    Reason.RATE_LIMITED, f"{source[:16]}... announced more than its rate allows"
                )
            self._seen[announcement.blob_hash] = None
            while len(self._seen) > SEEN_MEMORY:
                self._seen.popitem(last=False)
        return announcement
