"""Peers' delta manifests, as an observer records them: checked, deduplicated, for the ledger.

A trainer announces each delta and anchor it serves in a signed `DeltaManifest` on the
swarm's delta topic (`swarm.sync.rules`). An observer follows no trainer and applies nothing:
it checks every manifest it hears (envelope, signature, swarm, and that the gossip source
is the provider who signed it) and records each new one as a `DeltaEvent` of status
`announced`; a message that fails is refused by the gossip validator (so it is not relayed)
and recorded as a rejection with its `Reason`.

`validator` runs on the transport's thread; `offer` (a validated message, handed over by the
node's `TopicTap`) and `take` on the node's thread. Both queues are bounded; what they drop
is counted.
"""

from __future__ import annotations

import collections
import threading

from swarm.core.errors import RejectedMessage
from swarm.core.reasons import Direction, Reason, Status
from swarm.p2p.transport import InboundMessage
from swarm.sync.rules import DeltaEvent, manifest_event
from swarm.wire import DeltaManifest, delta_topic, unpack_manifests
from swarm.wire.signing import verify_manifest

MAX_PENDING = 4096  # events waiting for the node's thread
MAX_REMEMBERED = 16_384  # manifests remembered to recognise repeats


class ManifestLog:
    """Checks the delta manifests a swarm announces and keeps them as ledger events."""

    def __init__(self, swarm_id: str):
        self.swarm_id = swarm_id
        self.topic = delta_topic(swarm_id)
        self.recorded = 0  # new manifests handed to the ledger
        self.dropped = 0  # events lost to the MAX_PENDING bound
        self._lock = threading.Lock()
        self._pending: collections.deque[DeltaEvent] = collections.deque()
        self._seen: collections.OrderedDict[tuple[str, str], None] = collections.OrderedDict()

    def check(self, data: bytes, source: str | None) -> list[DeltaManifest]:
        """The manifests of a message, each validly signed, of this swarm, sent by its provider;
        `RejectedMessage` for the first that is not."""
        manifests = [verify_manifest(signed) for signed in unpack_manifests(data)]
        for m in manifests:
            if m.swarm_id != self.swarm_id:
                raise RejectedMessage(Reason.WRONG_SWARM, f"manifest of swarm {m.swarm_id!r}")
            if source and source != m.provider:
                raise RejectedMessage(
                    Reason.SENDER_MISMATCH,
                    f"published by {source[:16]}... for provider {m.provider[:16]}...",
                )
        return manifests

    def validator(self, message: InboundMessage) -> str | None:
        """Gossip validator: refuse (and note) a message with any bad manifest."""
        try:
            self.check(message.data, message.source)
        except RejectedMessage as e:
            self._note(_refused(message, e))
            return e.reason
        return None

    def offer(self, message: InboundMessage) -> None:
        """A message the validator passed, on the node's thread: its new manifests."""
        try:
            manifests = self.check(message.data, message.source)
        except RejectedMessage as e:  # not after the validator passed it; never dropped unseen
            self._note(_refused(message, e))
            return
        for m in manifests:
            key = (m.provider, m.payload_hash)
            if key in self._seen:
                continue
            self._seen[key] = None
            if len(self._seen) > MAX_REMEMBERED:
                self._seen.popitem(last=False)
            self._note(manifest_event(m, Direction.RECEIVED, Status.ANNOUNCED))

    def take(self) -> list[DeltaEvent]:
        """Every event since the last call (new manifests and refusals), oldest first."""
        with self._lock:
            events = list(self._pending)
            self._pending.clear()
        self.recorded += sum(e.status == Status.ANNOUNCED for e in events)
        return events

    def _note(self, event: DeltaEvent) -> None:
        with self._lock:
            if len(self._pending) >= MAX_PENDING:
                self._pending.popleft()
                self.dropped += 1
            self._pending.append(event)


def _refused(message: InboundMessage, e: RejectedMessage) -> DeltaEvent:
    """A refused manifest message (its versions unknown: it may not even decode)."""
    return DeltaEvent(
        Direction.RECEIVED,
        message.source or "",
        "delta",
        -1,
        -1,
        len(message.data),
        0.0,
        Status.REJECTED,
        e.reason,
        e.detail[:500],
    )
