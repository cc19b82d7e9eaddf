"""Following a trainer's policy: publishing sparse weight deltas, and applying them bit-exactly.

A trainer with `sync.publish_deltas` runs a `DeltaPublisher`: after each update it encodes
the change of its bf16 weights (`swarm.policy.delta`), serves the payload over the blob
stream protocol, and announces it on the swarm's delta topic in a signed `DeltaManifest`.
It keeps serving its last `keep_deltas` deltas, a full anchor every `anchor_every`
versions (the latest one only), and an *index*: one blob listing the signed manifests of
everything it serves, so a follower that missed announcements can catch up.

A generator-role node runs a `DeltaFollower` for one configured trainer. Nothing from the
trainer is trusted: a manifest must be validly signed *by the followed peer*, name this
swarm, this model and this base, and announce a size within the limit; the fetched payload
must have the signed size and hash; the container header must agree with the manifest; and
`apply_delta` checks the base weights before and the result hash after applying, rolling
back on any failure. Every refusal is a `DeltaEvent` with a reason code, for the ledger.

Pure parts (`check_manifest`, `plan_catch_up`) are plain functions over plain data. The
classes do the I/O through a `Transport` and never touch the ledger or the model: the node
records their events and loads the changed tensors into its model and generator.
Deliberately not here: choosing whom to follow, or trusting a trainer's training itself.
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Literal

import blake3
import torch

from swarm.errors import RejectedMessage, TransportError
from swarm.p2p.transport import (
    BlobServed,
    InboundMessage,
    PeerInfo,
    Transport,
    TransportStats,
    Validator,
)
from swarm.policy.delta import DeltaError, apply_delta, encode_anchor, encode_delta, read_header
from swarm.signing import sign_manifest, verify_manifest
from swarm.verify.reasons import Direction, Reason, Status
from swarm.verify.state import DecodedMessages
from swarm.wire import (
    DeltaManifest,
    SignedManifest,
    delta_topic,
    index_key,
    pack_manifests,
    payload_key,
    unpack_manifests,
)

INDEX_POLL_S = 10.0  # a follower re-reads the trainer's index at least this often (lost gossip)
MAX_PENDING = 1024  # manifests (and validator rejections) waiting for the node's thread


@dataclass(frozen=True)
class DeltaEvent:
    """One delta or anchor published, applied or refused: a row of the ledger's `deltas` table."""

    direction: Direction
    peer: str  # the other side: the provider for received ones, "" for published ones
    kind: str  # "delta" | "anchor"
    from_version: int  # -1 for an anchor (or when unknown)
    to_version: int  # -1 when unknown (a message that did not decode)
    nbytes: int
    seconds: float
    status: Status  # published, served (fetched in full by `peer`), applied or rejected
    reason: Reason | Literal[""] = ""  # why it was rejected ("" otherwise, as the ledger keeps it)
    detail: str = ""  # for logs; the ledger keeps the code


# --------------------------------------------------------------------------- pure rules


@dataclass(frozen=True)
class Expectation:
    """What a follower accepts: whose manifests, for which swarm, model and base."""

    provider: str
    swarm_id: str
    model: str
    base_hash: str
    max_bytes: int


def check_manifest(m: DeltaManifest, expect: Expectation, source: str | None = None) -> None:
    """Raise `RejectedMessage` unless a (signature-verified) manifest is one to act on.

    `source` is the peer the transport says published it (gossip), if known.
    """
    if m.provider != expect.provider:
        raise RejectedMessage(
            Reason.NOT_FOLLOWED,
            f"manifest by {m.provider[:16]}..., this node follows {expect.provider[:16]}...",
        )
    if source is not None and source != m.provider:
        raise RejectedMessage(
            Reason.SENDER_MISMATCH,
            f"published by {source[:16]}... for provider {m.provider[:16]}...",
        )
    if m.swarm_id != expect.swarm_id:
        raise RejectedMessage(Reason.WRONG_SWARM, f"manifest of swarm {m.swarm_id!r}")
    if m.model != expect.model or m.base_hash != expect.base_hash:
        raise RejectedMessage(
            Reason.WRONG_BASE,
            f"manifest for {m.model!r} base {m.base_hash[:12]}, this node runs {expect.model!r} base {expect.base_hash[:12]}",
        )
    if m.size > expect.max_bytes:
        raise RejectedMessage(
            Reason.OVERSIZE, f"{m.kind} of {m.size} bytes exceeds the limit of {expect.max_bytes}"
        )


def plan_catch_up(version: int, manifests: Iterable[DeltaManifest]) -> list[DeltaManifest]:
    """The steps that bring weights at `version` to the newest reachable version.

    Either a chain of deltas starting at `version`, or the newest anchor followed by the
    chain of deltas after it; whichever ends at the higher version, and on a tie the one
    with fewer bytes. Empty when nothing newer is reachable.
    """
    deltas: dict[int, DeltaManifest] = {}
    anchors: list[DeltaManifest] = []
    for m in manifests:
        if m.kind == "anchor":
            anchors.append(m)
        elif m.from_version not in deltas or m.to_version > deltas[m.from_version].to_version:
            deltas[m.from_version] = m  # of two deltas from one version, the longer jump

    def chain(start: int) -> list[DeltaManifest]:
        steps, at = [], start
        while at in deltas and deltas[at].to_version > at:
            steps.append(deltas[at])
            at = deltas[at].to_version
        return steps

    candidates = [chain(version)]
    if anchors:
        newest = max(anchors, key=lambda a: a.to_version)
        candidates.append([newest, *chain(newest.to_version)])

    def end(path: list[DeltaManifest]) -> int:
        return path[-1].to_version if path else version

    best = max(candidates, key=lambda p: (end(p), -sum(m.size for m in p)))
    return best if end(best) > version else []


# --------------------------------------------------------------------------- trainer side


@dataclass
class _Served:
    manifest: DeltaManifest
    signed: SignedManifest


class DeltaPublisher:
    """Trainer side: encode, serve and announce a delta after each update.

    `publish(weights, version)` takes the trainer's bf16 view (`bf16_state_dict(model)`);
    the previous view is kept as the base of the next delta. Errors in encoding are bugs
    of this node and propagate; a failed gossip publish is only counted (followers find
    the delta in the index).
    """

    def __init__(
        self,
        transport: Transport,
        key_pair,
        *,
        peer_id: str,
        swarm_id: str,
        model: str,
        base_hash: str,
        anchor_every: int,
        keep_deltas: int,
        level: int = 1,
        threads: int | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.transport = transport
        self.key_pair = key_pair
        self.peer_id = peer_id
        self.swarm_id = swarm_id
        self.model = model
        self.base_hash = base_hash
        self.anchor_every = anchor_every
        self.keep_deltas = keep_deltas
        self.level = level
        self.threads = threads
        self.clock = clock
        self.topic = delta_topic(swarm_id)
        self.publish_failures = 0
        self._weights: dict[str, torch.Tensor] | None = None
        self._version = -1
        self._deltas: collections.deque[_Served] = collections.deque()
        self._anchor: _Served | None = None
        # Payload keys of recent deltas and anchors, so a fetch that completes after its blob
        # was rotated out still counts as served.
        self._recent: collections.OrderedDict[str, DeltaManifest] = collections.OrderedDict()

    @property
    def version(self) -> int:
        return self._version

    def start(self, weights: Mapping[str, torch.Tensor], version: int) -> list[DeltaEvent]:
        """Take `weights` (bf16) at `version` as the reference. A trainer resumed past the
        base model serves an anchor right away, so followers need not wait for the next one."""
        self._weights, self._version = dict(weights), version
        events = [self._serve_anchor()] if version > 0 else []
        self._announce([s for s in [self._anchor] if s is not None and version > 0])
        return events

    def publish(self, weights: Mapping[str, torch.Tensor], version: int) -> list[DeltaEvent]:
        """Publish the change from the previous weights to `weights` at `version`."""
        if self._weights is None:
            raise RuntimeError("DeltaPublisher.publish before start")
        if version <= self._version:
            return []
        t0 = time.perf_counter()
        blob = encode_delta(
            self._weights,
            weights,
            from_version=self._version,
            to_version=version,
            level=self.level,
            threads=self.threads,
        )
        served = self._serve("delta", self._version, version, blob)
        events = [self._event(served, time.perf_counter() - t0)]
        self._deltas.append(served)
        while len(self._deltas) > self.keep_deltas:
            self.transport.unserve_blob(self._deltas.popleft().manifest.key)
        self._weights, self._version = dict(weights), version
        fresh = [served]
        if version % self.anchor_every == 0:
            events.append(self._serve_anchor())
            fresh.append(self._anchor)
        self._announce(fresh)
        return events

    def served_events(self) -> list[DeltaEvent]:
        """Deltas and anchors that followers fetched in full since the last call.

        Fetches of the manifest index, and of keys this publisher never served, are not
        deliveries of weights and are left out.
        """
        events = []
        for fetch in self.transport.served_blobs():
            m = self._recent.get(fetch.key)
            if m is not None:
                events.append(
                    DeltaEvent(
                        Direction.SENT,
                        fetch.peer_id,
                        m.kind,
                        m.from_version,
                        m.to_version,
                        fetch.nbytes,
                        0.0,
                        Status.SERVED,
                    )
                )
        return events

    def served(self) -> list[DeltaManifest]:
        """Manifests of what is being served now (the latest anchor first, then the deltas)."""
        return [s.manifest for s in ([self._anchor] if self._anchor else []) + list(self._deltas)]

    def _serve_anchor(self) -> DeltaEvent:
        t0 = time.perf_counter()
        blob = encode_anchor(
            self._weights, version=self._version, level=self.level, threads=self.threads
        )
        served = self._serve("anchor", -1, self._version, blob)
        if self._anchor is not None:
            self.transport.unserve_blob(self._anchor.manifest.key)
        self._anchor = served
        return self._event(served, time.perf_counter() - t0)

    def _serve(self, kind: str, from_version: int, to_version: int, blob: bytes) -> _Served:
        header = read_header(blob)
        manifest = DeltaManifest(
            swarm_id=self.swarm_id,
            provider=self.peer_id,
            model=self.model,
            base_hash=self.base_hash,
            kind=kind,
            from_version=from_version,
            to_version=to_version,
            size=len(blob),
            payload_hash=blake3.blake3(blob).hexdigest(),
            result_hash=header.result_hash.hex(),
            key=payload_key(self.base_hash, kind, from_version, to_version),
            created_at=self.clock(),
        )
        self.transport.serve_blob(manifest.key, blob)
        self._recent[manifest.key] = manifest
        while len(self._recent) > 4 * (self.keep_deltas + 1):
            self._recent.popitem(last=False)
        return _Served(manifest, sign_manifest(manifest, self.key_pair))

    def _announce(self, fresh: list[_Served]) -> None:
        everything = ([self._anchor] if self._anchor else []) + list(self._deltas)
        if everything:
            self.transport.serve_blob(
                index_key(self.base_hash), pack_manifests(s.signed for s in everything)
            )
        if not fresh:
            return
        try:
            self.transport.publish(self.topic, pack_manifests(s.signed for s in fresh))
        except TransportError:
            self.publish_failures += 1  # followers still find it in the index

    @staticmethod
    def _event(served: _Served, seconds: float) -> DeltaEvent:
        m = served.manifest
        return DeltaEvent(
            Direction.SENT,
            "",
            m.kind,
            m.from_version,
            m.to_version,
            m.size,
            seconds,
            Status.PUBLISHED,
        )


# --------------------------------------------------------------------------- follower side


@dataclass
class SyncResult:
    """What one `DeltaFollower.sync` did."""

    version: int
    changed: set[str] = field(default_factory=set)  # tensor names whose bits changed
    events: list[DeltaEvent] = field(default_factory=list)


class DeltaFollower:
    """Generator side: keeps a bf16 weight set in step with one trainer, bit for bit.

    `weights` are the follower's bf16 tensors (updated in place; the node copies changed
    ones into its model). Gossip manifests arrive through `validator` (cheap checks on
    the transport's thread) and `offer` (on the node's thread); `sync()` fetches and
    applies what they announce, reading the trainer's index when it must catch up.
    """

    def __init__(
        self,
        transport: Transport,
        expect: Expectation,
        weights: dict[str, torch.Tensor],
        version: int = 0,
        *,
        fetch_timeout: float = 120.0,
        threads: int | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.transport = transport
        self.expect = expect
        self.weights = weights
        self.version = version
        self.fetch_timeout = fetch_timeout
        self.threads = threads
        self.clock = clock
        self.topic = delta_topic(expect.swarm_id)
        self._lock = threading.Lock()
        # Messages that passed the validator, and its refusals, for the node's thread.
        self._pending: collections.deque[InboundMessage | DeltaEvent] = collections.deque()
        self._verified: DecodedMessages[list[tuple[SignedManifest, DeltaManifest]]] = (
            DecodedMessages(MAX_PENDING)
        )
        self._known: dict[tuple[str, int, int], DeltaManifest] = {}
        self._last_index = -float("inf")
        self._refused: set[str] = set()  # payload hashes that failed: never fetched again
        self.dropped = 0  # pending items lost to the MAX_PENDING bound
        self.index_failures = 0  # index reads that failed (trainer not serving yet, or unreachable)

    # -- gossip ------------------------------------------------------------------------------

    def validator(self, message: InboundMessage) -> str | None:
        """Gossip validator: envelope and signatures only (stateless, cheap); refusals are noted.

        The verified manifests are kept with the message's bytes, so `offer` does not decode
        or verify them again.
        """
        try:
            verified = [
                (signed, verify_manifest(signed)) for signed in unpack_manifests(message.data)
            ]
        except RejectedMessage as e:
            self._note(_unreadable(message.source, len(message.data), e))
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

    def _take_pending(self, events: list[DeltaEvent]) -> None:
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
                events.append(item)  # refused by the validator
            else:
                self._admit(item.data, item.source, events, verified)

    def _admit(
        self,
        data: bytes,
        source: str | None,
        events: list[DeltaEvent],
        verified: list[tuple[SignedManifest, DeltaManifest]] | None = None,
    ) -> None:
        """Verify (unless the validator did) and check every manifest in a message; remember
        the good ones."""
        if verified is None:
            verified = self._verify(data, source, events)
        for _, m in verified:
            try:
                check_manifest(m, self.expect, source)
            except RejectedMessage as e:
                events.append(self._rejected(m, e.reason, e.detail))
                continue
            if m.payload_hash not in self._refused:
                self._known[(m.kind, m.from_version, m.to_version)] = m

    @staticmethod
    def _verify(
        data: bytes, source: str | None, events: list[DeltaEvent]
    ) -> list[tuple[SignedManifest, DeltaManifest]]:
        """The validly signed manifests of a message; the others (or all of it) become events."""
        try:
            signed_list = unpack_manifests(data)
        except RejectedMessage as e:
            events.append(_unreadable(source, len(data), e))
            return []
        verified = []
        for signed in signed_list:
            try:
                verified.append((signed, verify_manifest(signed)))
            except RejectedMessage as e:
                events.append(_unreadable(source, len(signed.body), e))
        return verified

    # -- catching up -------------------------------------------------------------------------

    def sync(self) -> SyncResult:
        """Fetch and apply everything newer that the followed trainer serves; never raises for
        a peer's bad data (refusals are events). Stops at the first step that fails."""
        result = SyncResult(self.version)
        self._take_pending(result.events)
        plan = plan_catch_up(self.version, self._known.values())
        stale_index = self.clock() - self._last_index >= INDEX_POLL_S
        if stale_index or (self._newer_known() and not plan):
            self._read_index(result.events)
            plan = plan_catch_up(self.version, self._known.values())
        for m in plan:
            if not self._step(m, result):
                break
        self._known = {k: m for k, m in self._known.items() if m.to_version > self.version}
        result.version = self.version
        return result

    def _newer_known(self) -> bool:
        return any(m.to_version > self.version for m in self._known.values())

    def _read_index(self, events: list[DeltaEvent]) -> None:
        self._last_index = self.clock()
        try:
            data = self.transport.fetch_blob(
                self.expect.provider,
                index_key(self.expect.base_hash),
                timeout=min(30.0, self.fetch_timeout),
            )
        except TransportError:
            self.index_failures += 1  # not serving yet, or unreachable: no bad data to record
            return
        self._admit(data, None, events)

    def _step(self, m: DeltaManifest, result: SyncResult) -> bool:
        t0 = time.perf_counter()
        try:
            blob = self.transport.fetch_blob(m.provider, m.key, timeout=self.fetch_timeout)
        except TransportError as e:
            result.events.append(self._rejected(m, Reason.FETCH_FAILED, str(e)))
            return False
        try:
            info = self._check_payload(m, blob)
            # Applied in place with undo: a failed check leaves the weights bit-identical.
            expect_from = self.version if m.kind == "delta" else None
            apply_delta(self.weights, blob, expect_from_version=expect_from, threads=self.threads)
        except (RejectedMessage, DeltaError) as e:
            reason, detail = (
                (e.reason, e.detail)
                if isinstance(e, RejectedMessage)
                else (Reason.APPLY_FAILED, str(e))
            )
            result.events.append(self._rejected(m, reason, detail))
            self._refused.add(m.payload_hash)
            self._known.pop((m.kind, m.from_version, m.to_version), None)
            return False
        self.version = m.to_version
        names = {t.name for t in info.tensors if t.count or m.kind == "anchor"}
        names |= {t.name for t in info.tensors if t.alias_of in names}
        result.changed |= names
        result.events.append(
            DeltaEvent(
                Direction.RECEIVED,
                m.provider,
                m.kind,
                m.from_version,
                m.to_version,
                len(blob),
                time.perf_counter() - t0,
                Status.APPLIED,
            )
        )
        return True

    @staticmethod
    def _check_payload(m: DeltaManifest, blob: bytes):
        """The fetched bytes are what the signed manifest announced, and say the same."""
        if len(blob) != m.size:
            raise RejectedMessage(Reason.BAD_SIZE, f"{len(blob)} bytes, manifest says {m.size}")
        if blake3.blake3(blob).hexdigest() != m.payload_hash:
            raise RejectedMessage(Reason.BAD_HASH, "payload hash differs from the signed manifest")
        try:
            info = read_header(blob)
        except DeltaError as e:
            raise RejectedMessage(Reason.UNDECODABLE, str(e)) from None
        said = (
            info.kind,
            -1 if info.from_version is None else info.from_version,
            info.to_version,
            info.result_hash.hex(),
        )
        if said != (m.kind, m.from_version, m.to_version, m.result_hash):
            raise RejectedMessage(
                Reason.MANIFEST_MISMATCH, f"payload header {said[:3]} differs from the manifest"
            )
        return info

    @staticmethod
    def _rejected(m: DeltaManifest, reason: Reason, detail: str) -> DeltaEvent:
        return DeltaEvent(
            Direction.RECEIVED,
            m.provider,
            m.kind,
            m.from_version,
            m.to_version,
            m.size,
            0.0,
            Status.REJECTED,
            reason,
            detail[:500],
        )


def _unreadable(source: str | None, nbytes: int, e: RejectedMessage) -> DeltaEvent:
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


def load_into(
    model: torch.nn.Module, weights: Mapping[str, torch.Tensor], names: Iterable[str]
) -> None:
    """Copy the named bf16 tensors into `model` (any dtype, any device), in place.

    A float32 (or bfloat16) parameter holds a bf16 value exactly, so the model's bf16 view
    is then bit-identical to `weights`; float16 cannot (the node refuses it for a generator).
    """
    state = model.state_dict()
    with torch.no_grad():
        for name in names:
            state[name].copy_(weights[name])


# --------------------------------------------------------------------------- node plumbing


class TopicTap(Transport):
    """A transport whose `receive()` hands one topic's messages to `handler` instead.

    Lets a follower take its delta manifests off the shared inbox without the node's
    rollout path ever seeing them. Everything else is the wrapped transport's.
    """

    def __init__(
        self, inner: Transport, topic: str, handler: Callable[[InboundMessage], None]
    ) -> None:
        self.inner = inner
        self.peer_id = inner.peer_id
        self.tapped_topic = topic
        self.handler = handler
        self._held: list[InboundMessage] = []  # others' messages drained early by `pump`

    def pump(self) -> None:
        """Hand the tapped topic's waiting messages to the handler now; keep the rest for `receive`."""
        self._held += self._route(self.inner.receive())

    def receive(
        self, max_messages: int | None = None, timeout: float = 0.0
    ) -> list[InboundMessage]:
        if self._held:
            take = len(self._held) if max_messages is None else max_messages
            out, self._held = self._held[:take], self._held[take:]
            return out
        return self._route(self.inner.receive(max_messages, timeout))

    def _route(self, messages: list[InboundMessage]) -> list[InboundMessage]:
        kept = []
        for message in messages:
            if message.topic == self.tapped_topic:
                self.handler(message)
            else:
                kept.append(message)
        return kept

    def start(self) -> None:
        self.inner.start()

    def close(self) -> None:
        self.inner.close()

    def subscribe(self, topic: str, validator: Validator | None = None) -> None:
        self.inner.subscribe(topic, validator)

    def publish(self, topic: str, data: bytes) -> None:
        self.inner.publish(topic, data)

    def peers(self) -> list[PeerInfo]:
        return self.inner.peers()

    def listen_addrs(self) -> list[str]:
        return self.inner.listen_addrs()

    def serve_blob(self, key: str, data: bytes) -> None:
        self.inner.serve_blob(key, data)

    def unserve_blob(self, key: str) -> None:
        self.inner.unserve_blob(key)

    def fetch_blob(self, peer_id: str, key: str, timeout: float = 30.0) -> bytes:
        return self.inner.fetch_blob(peer_id, key, timeout)

    def served_blobs(self) -> list[BlobServed]:
        return self.inner.served_blobs()

    def stats(self) -> TransportStats:
        return self.inner.stats()

    def __getattr__(self, name: str):
        # flush, wait_for_topic_peers and other extras of the concrete transport.
        return getattr(self.inner, name)
