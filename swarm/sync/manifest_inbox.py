"""`ManifestInbox`: the manifests a follower knows of, and the payloads it will not fetch.

Manifests come from gossip (`validator` on the transport's thread, `offer` on the node's;
both queue, bounded, for `take` to check on the node's thread) and from the trainer's index
(`admit`). Each is verified and checked against the followed trainer (`swarm.sync.rules`);
the good ones newer than the follower's version are kept, at most MAX_KNOWN. Refusals of
gossip are events at most once per peer and reason per minute (`RejectionLimiter`); the
rest are counted.
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Callable, Iterable
from dataclasses import replace

from swarm.core.errors import RejectedMessage
from swarm.core.reasons import Direction, Reason, Status
from swarm.p2p.transport import InboundMessage
from swarm.sync.rules import (
    Backoff,
    DeltaEvent,
    Expectation,
    RejectionLimiter,
    check_manifest,
    manifest_event,
    manifest_key,
)
from swarm.verify.tracking import DecodedMessages
from swarm.wire import DeltaManifest, SignedManifest, decode_manifest, unpack_manifests
from swarm.wire.signing import verify_manifest

MAX_PENDING = 1024  # manifests (and validator rejections) waiting for the node's thread
MAX_KNOWN = 1024  # manifests remembered (the oldest are forgotten first)
MAX_REFUSED = 4096  # payload hashes never fetched again

Verified = list[tuple[SignedManifest, DeltaManifest]]


class ManifestInbox:
    """Known manifests of one followed trainer, and refused payload hashes."""

    def __init__(self, expect: Expectation, clock: Callable[[], float]) -> None:
        self.expect = expect
        self.clock = clock
        self._lock = threading.Lock()
        # Messages that passed the validator, and its refusals, for the node's thread.
        self._pending: collections.deque[InboundMessage | DeltaEvent] = collections.deque()
        self._verified: DecodedMessages[Verified] = DecodedMessages(MAX_PENDING)
        self.known: collections.OrderedDict[tuple, DeltaManifest] = collections.OrderedDict()
        self._refused: collections.OrderedDict[str, None] = collections.OrderedDict()
        self.limiter = RejectionLimiter()
        self.dropped = 0  # pending items lost to the MAX_PENDING bound

    def refuse(self, payload_hashes: Iterable[str]) -> None:
        """Never fetch these payloads (by the blake3 hash their manifests sign)."""
        for h in payload_hashes:
            self._refused[h] = None
            self._refused.move_to_end(h)
        while len(self._refused) > MAX_REFUSED:
            self._refused.popitem(last=False)

    def usable(self, backoff: Backoff) -> list[DeltaManifest]:
        """Known manifests whose payload is not refused and not backed off now."""
        now = self.clock()
        return [
            m
            for m in self.known.values()
            if m.payload_hash not in self._refused and backoff.ready(manifest_key(m), now)
        ]

    def forget_passed(self, version: int) -> None:
        for key in [k for k, m in self.known.items() if m.to_version <= version]:
            del self.known[key]

    # -- gossip ------------------------------------------------------------------------------

    def validator(self, message: InboundMessage) -> str | None:
        """Gossip validator: envelope and signatures only (stateless, cheap); refusals are noted.

        The verified manifests are kept with the message's bytes, so `take` does not decode
        or verify them again.
        """
        try:
            verified = [
                (signed, verify_manifest(signed)) for signed in unpack_manifests(message.data)
            ]
        except RejectedMessage as e:
            self._note(unreadable_event(message.source, len(message.data), e))
            return e.reason
        with self._lock:
            self._verified.put(message.source, message.data, verified)
        return None

    def offer(self, message: InboundMessage) -> None:
        """A delta-topic message that passed the validator, handed over on the node's thread."""
        self._note(message)

    def _note(self, item: InboundMessage | DeltaEvent) -> None:
        with self._lock:
            if len(self._pending) >= MAX_PENDING:
                self._pending.popleft()
                self.dropped += 1
            self._pending.append(item)

    def take(self, version: int, events: list[DeltaEvent]) -> None:
        """Check what gossip brought since the last call (node's thread)."""
        with self._lock:
            items = [
                (
                    item,
                    None
                    if isinstance(item, DeltaEvent)
                    else self._verified.take(item.source, item.data),
                )
                for item in self._pending
            ]
            self._pending.clear()
        for item, verified in items:
            if isinstance(item, DeltaEvent):
                self.limited(item, events)  # refused by the validator
            else:
                self.admit(item.data, item.source, version, events, verified)

    # -- checking ----------------------------------------------------------------------------

    def admit(
        self,
        data: bytes,
        source: str | None,
        version: int,
        events: list[DeltaEvent],
        verified: Verified | None = None,
    ) -> None:
        """Verify (unless the validator did) and check every manifest in a message; remember
        the good ones newer than `version`. `source` None: the trainer's own index."""
        if verified is None and source is not None and source != self.expect.provider:
            self._refuse_unfollowed(data, source, events)  # none of it can be acted on
            return
        if verified is None:
            verified = self._verify(data, source, events)
        for _, m in verified:
            try:
                check_manifest(m, self.expect, source)
            except RejectedMessage as e:
                self.limited(rejected_event(m, e.reason, e.detail), events)
                continue
            if m.payload_hash not in self._refused and m.to_version > version:
                key = manifest_key(m)
                self.known.pop(key, None)
                self.known[key] = m
                while len(self.known) > MAX_KNOWN:
                    self.known.popitem(last=False)

    def _verify(self, data: bytes, source: str | None, events: list[DeltaEvent]) -> Verified:
        """The validly signed manifests of a message; the others (or all of it) become events."""
        try:
            signed_list = unpack_manifests(data)
        except RejectedMessage as e:
            self.limited(unreadable_event(source, len(data), e), events)
            return []
        verified = []
        for signed in signed_list:
            try:
                verified.append((signed, verify_manifest(signed)))
            except RejectedMessage as e:
                self.limited(unreadable_event(source, len(signed.body), e), events)
        return verified

    def _refuse_unfollowed(self, data: bytes, source: str, events: list[DeltaEvent]) -> None:
        """A message published by a peer this node does not follow: each manifest is refused
        (`not_followed`, or `sender_mismatch` for one naming the followed trainer) without
        checking its signature, which would only cost time: it is refused either way."""
        try:
            signed_list = unpack_manifests(data)
        except RejectedMessage as e:
            self.limited(unreadable_event(source, len(data), e), events)
            return
        for signed in signed_list:
            try:
                m = decode_manifest(signed.body)
            except RejectedMessage as e:
                self.limited(unreadable_event(source, len(signed.body), e), events)
                continue
            try:
                check_manifest(m, self.expect, source)
            except RejectedMessage as e:
                self.limited(rejected_event(m, e.reason, e.detail), events)

    def limited(self, event: DeltaEvent, events: list[DeltaEvent]) -> None:
        """A refusal of gossip: an event once per peer and reason and window, else counted."""
        counted = self.limiter.admit(event.peer, event.reason, self.clock())
        if counted is None:
            return
        if counted:
            more = f" (and {counted} more like it since the last record, counted only)"
            event = replace(event, detail=event.detail[:400] + more)
        events.append(event)


def rejected_event(
    m: DeltaManifest, reason: Reason, detail: str, peer: str | None = None
) -> DeltaEvent:
    """A refusal of manifest `m` (or of its payload)."""
    return manifest_event(
        m, Direction.RECEIVED, Status.REJECTED, peer=peer, reason=reason, detail=detail
    )


def unreadable_event(source: str | None, nbytes: int, e: RejectedMessage) -> DeltaEvent:
    """A refused message or manifest whose versions are unknown (it did not decode or verify)."""
    return DeltaEvent(
        Direction.RECEIVED,
        source or "",
        "delta",
        -1,
        -1,
        nbytes,
        0.0,
        Status.REJECTED,
        e.reason,
        e.detail[:500],
    )
