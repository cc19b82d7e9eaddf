"""A generator's side of following: keep a bf16 weight set in step with one trainer.

`DeltaFollower` takes the followed trainer's signed manifests from gossip (a cheap
validator on the transport's thread, then `offer` on the node's) and from the trainer's
index blob, and `sync()` fetches and applies what they announce. Every rule it applies is
in `swarm.sync.rules`; what this part adds is the order and the bounds:

- a payload is fetched under a deadline (the rest of the round's budget, at most
  `fetch_timeout`) and a rate floor (`min_rate` after `grace_s`), and its size and header
  are checked as it arrives (`PayloadCheck`), before the rest is read;
- a failed fetch is retried with exponential back-off per version step and provider, and
  the plan is made again without it, so an unservable version gives way to the next
  usable one within the same round;
- applying refuses NaN and infinite values and rolls back on any failure; a `load`
  callback given to `sync` can still refuse the result (the model's forward pass), and the
  step is then undone;
- a payload whose content failed is never fetched again, and `SyncResult.refused` lists it
  for the node to remember across restarts;
- refusals of gossip are events at most once per peer and reason per minute
  (`RejectionLimiter`); the rest are counted.

The follower never touches the ledger or the model itself: the node records its events and
loads the changed tensors through `load`.
"""

from __future__ import annotations

import collections
import random
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace

import blake3
import torch

from swarm.core.errors import FetchTooSlow, RejectedMessage, TransportError
from swarm.core.reasons import Direction, Reason, Status
from swarm.p2p.transport import FetchLimits, InboundMessage, Transport
from swarm.policy.delta import (
    DeltaError,
    LayoutMismatch,
    NonFiniteWeights,
    apply_delta_undoable,
    read_header,
)
from swarm.sync.holders import HeldPayloads, pick_holders, read_hints
from swarm.sync.rules import (
    Backoff,
    DeltaEvent,
    Expectation,
    IndexCheck,
    PayloadCheck,
    RejectionLimiter,
    check_header,
    check_manifest,
    manifest_event,
    manifest_key,
    plan_catch_up,
)
from swarm.verify.tracking import DecodedMessages
from swarm.wire import (
    DeltaManifest,
    SignedManifest,
    decode_manifest,
    delta_topic,
    held_key,
    index_key,
    unpack_manifests,
)
from swarm.wire.signing import verify_manifest

INDEX_POLL_S = 10.0  # a follower re-reads the trainer's index at least this often (lost gossip)
MAX_PENDING = 1024  # manifests (and validator rejections) waiting for the node's thread
MAX_KNOWN = 1024  # manifests remembered (the oldest are forgotten first)
MAX_REFUSED = 4096  # payload hashes never fetched again
MIN_FETCH_RATE = 128 * 1024  # bytes/s a fetch must average once its grace is over
FETCH_GRACE_S = 5.0
INDEX_TIMEOUT_S = 30.0
# Refusals that depend on the payload's bytes alone, found once they were verified against
# the signed hash: the same payload fails the same way after a restart, so it is remembered.
LASTING = frozenset(
    {
        Reason.UNDECODABLE,
        Reason.MANIFEST_MISMATCH,
        Reason.WRONG_TENSORS,
        Reason.NON_FINITE,
        Reason.APPLY_FAILED,
        Reason.BROKEN_MODEL,
    }
)

# Loads the named tensors of the follower's weights into the model and says what is wrong
# with the model then (None: nothing).
Load = Callable[[set[str]], str | None]


@dataclass
class SyncResult:
    """What one `DeltaFollower.sync` did."""

    version: int
    changed: set[str] = field(default_factory=set)  # tensor names whose bits changed
    events: list[DeltaEvent] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)  # payload hashes to remember for good


class DeltaFollower:
    """Generator side: keeps a bf16 weight set in step with one trainer, bit for bit.

    `weights` are the follower's bf16 tensors (updated in place). Gossip manifests arrive
    through `validator` (cheap checks on the transport's thread) and `offer` (on the node's
    thread); `sync()` fetches and applies what they announce, reading the trainer's index
    when it must catch up, for at most `budget_s` (default: `fetch_timeout`) of fetching.
    `refused`: payload hashes never to fetch (remembered from an earlier run).
    """

    def __init__(
        self,
        transport: Transport,
        expect: Expectation,
        weights: dict[str, torch.Tensor],
        version: int = 0,
        *,
        fetch_timeout: float = 120.0,
        budget_s: float | None = None,
        min_rate: float = MIN_FETCH_RATE,
        grace_s: float = FETCH_GRACE_S,
        threads: int | None = None,
        clock: Callable[[], float] = time.monotonic,
        refused: Iterable[str] = (),
        hold: int = 0,
    ) -> None:
        self.transport = transport
        self.expect = expect
        self.weights = weights
        self.version = version
        self.fetch_timeout = fetch_timeout
        self.budget_s = fetch_timeout if budget_s is None else budget_s
        self.min_rate = min_rate
        self.grace_s = grace_s
        self.threads = threads
        self.clock = clock
        self.topic = delta_topic(expect.swarm_id)
        self.shapes = {name: tuple(t.shape) for name, t in weights.items()}
        self._lock = threading.Lock()
        # Messages that passed the validator, and its refusals, for the node's thread.
        self._pending: collections.deque[InboundMessage | DeltaEvent] = collections.deque()
        self._verified: DecodedMessages[list[tuple[SignedManifest, DeltaManifest]]] = (
            DecodedMessages(MAX_PENDING)
        )
        self._known: collections.OrderedDict[tuple, DeltaManifest] = collections.OrderedDict()
        self._last_index = -float("inf")
        self._refused: collections.OrderedDict[str, None] = collections.OrderedDict()
        self.refuse(refused)
        self.backoff = Backoff()
        self.limiter = RejectionLimiter()
        self.dropped = 0  # pending items lost to the MAX_PENDING bound
        self.index_failures = 0  # index reads that failed (trainer not serving yet, or unreachable)
        self.budget_spent = 0  # syncs that stopped with steps left because the budget ran out
        # Deltas from any holder (`swarm.sync.holders`): with `hold`, this follower
        # serves its last `hold` deltas and fetches from other holders before the trainer.
        self.held = HeldPayloads(transport, expect.provider, hold) if hold > 0 else None
        self.hints: dict[str, list[tuple[str, tuple[str, ...]]]] = {}
        self.rng = random.Random(f"holders:{expect.provider}:{id(self)}")
        self.from_holders = 0  # payloads fetched from a holder rather than the trainer

    def refuse(self, payload_hashes: Iterable[str]) -> None:
        """Never fetch these payloads (by the blake3 hash their manifests sign)."""
        for h in payload_hashes:
            self._refused[h] = None
            self._refused.move_to_end(h)
        while len(self._refused) > MAX_REFUSED:
            self._refused.popitem(last=False)

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
                self._limited(item, events)  # refused by the validator
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
        if verified is None and source is not None and source != self.expect.provider:
            self._refuse_unfollowed(data, source, events)  # none of it can be acted on
            return
        if verified is None:
            verified = self._verify(data, source, events)
        for _, m in verified:
            try:
                check_manifest(m, self.expect, source)
            except RejectedMessage as e:
                self._limited(_rejected(m, e.reason, e.detail), events)
                continue
            if m.payload_hash not in self._refused and m.to_version > self.version:
                key = manifest_key(m)
                self._known.pop(key, None)
                self._known[key] = m
                while len(self._known) > MAX_KNOWN:
                    self._known.popitem(last=False)

    def _verify(
        self, data: bytes, source: str | None, events: list[DeltaEvent]
    ) -> list[tuple[SignedManifest, DeltaManifest]]:
        """The validly signed manifests of a message; the others (or all of it) become events."""
        try:
            signed_list = unpack_manifests(data)
        except RejectedMessage as e:
            self._limited(_unreadable(source, len(data), e), events)
            return []
        verified = []
        for signed in signed_list:
            try:
                verified.append((signed, verify_manifest(signed)))
            except RejectedMessage as e:
                self._limited(_unreadable(source, len(signed.body), e), events)
        return verified

    def _refuse_unfollowed(self, data: bytes, source: str, events: list[DeltaEvent]) -> None:
        """A message published by a peer this node does not follow: each manifest is refused
        (`not_followed`, or `sender_mismatch` for one naming the followed trainer) without
        checking its signature, which would only cost time: it is refused either way."""
        try:
            signed_list = unpack_manifests(data)
        except RejectedMessage as e:
            self._limited(_unreadable(source, len(data), e), events)
            return
        for signed in signed_list:
            try:
                m = decode_manifest(signed.body)
            except RejectedMessage as e:
                self._limited(_unreadable(source, len(signed.body), e), events)
                continue
            try:
                check_manifest(m, self.expect, source)
            except RejectedMessage as e:
                self._limited(_rejected(m, e.reason, e.detail), events)

    def _limited(self, event: DeltaEvent, events: list[DeltaEvent]) -> None:
        """A refusal of gossip: an event once per peer and reason and window, else counted."""
        counted = self.limiter.admit(event.peer, event.reason, self.clock())
        if counted is None:
            return
        if counted:
            more = f" (and {counted} more like it since the last record, counted only)"
            event = replace(event, detail=event.detail[:400] + more)
        events.append(event)

    # -- catching up -------------------------------------------------------------------------

    def sync(self, load: Load | None = None) -> SyncResult:
        """Fetch and apply everything newer that the followed trainer serves, within the
        budget; never raises for a peer's bad data (refusals are events). A step that fails
        is backed off and the plan is made again without it."""
        result = SyncResult(self.version)
        deadline = self.clock() + self.budget_s
        self._take_pending(result.events)
        if self._index_due():
            self._read_index(result.events, deadline)
        if self.held is not None and self._plan():
            self.hints = read_hints(
                self.transport,
                self.expect.provider,
                self.expect.base_hash,
                timeout=min(INDEX_TIMEOUT_S, max(0.1, deadline - self.clock())),
            )
        while plan := self._plan():
            if self.clock() >= deadline:
                self.budget_spent += 1
                break
            self._step(plan[0], result, deadline, load)
        self._forget_passed()
        result.version = self.version
        return result

    def _usable(self) -> list[DeltaManifest]:
        now = self.clock()
        return [
            m
            for m in self._known.values()
            if m.payload_hash not in self._refused and self.backoff.ready(manifest_key(m), now)
        ]

    def _plan(self) -> list[DeltaManifest]:
        return plan_catch_up(self.version, self._usable())

    def _index_due(self) -> bool:
        now = self.clock()
        if not self.backoff.ready(("index", self.expect.provider), now):
            return False
        if now - self._last_index >= INDEX_POLL_S:
            return True
        # Something newer is known but not reachable from here: the steps between are missing.
        return any(m.to_version > self.version for m in self._usable()) and not self._plan()

    def _forget_passed(self) -> None:
        passed = [k for k, m in self._known.items() if m.to_version <= self.version]
        for key in passed:
            del self._known[key]
        self.backoff.forget(
            k
            for k in self.backoff.keys()
            if isinstance(k, tuple) and isinstance(k[-1], int) and k[-1] <= self.version
        )

    def _read_index(self, events: list[DeltaEvent], deadline: float) -> None:
        self._last_index = self.clock()
        key = ("index", self.expect.provider)
        timeout = min(INDEX_TIMEOUT_S, self.fetch_timeout, max(0.1, deadline - self.clock()))
        try:
            data = self.transport.fetch_blob(
                self.expect.provider,
                index_key(self.expect.base_hash),
                timeout=timeout,
                limits=FetchLimits(self.min_rate, self.grace_s, IndexCheck()),
            )
        except RejectedMessage as e:  # announced larger than any index
            self.backoff.failed(key, self.clock())
            self._limited(_unreadable(self.expect.provider, 0, e), events)
            return
        except TransportError:
            # Not serving yet, or unreachable: no bad data to record; ask less often.
            self.index_failures += 1
            self.backoff.failed(key, self.clock())
            return
        self.backoff.succeeded(key)
        self._admit(data, None, events)

    def _step(self, m: DeltaManifest, result: SyncResult, deadline: float, load: Load | None):
        t0 = time.perf_counter()
        blob = self._fetch(m, result, deadline)
        if blob is None:
            return
        try:
            applied, undo = self._apply(m, blob)
        except RejectedMessage as e:
            self._refuse(m, e.reason, e.detail, result, lasting=e.reason in LASTING)
            return
        names = {t.name for t in applied.tensors if t.count or m.kind == "anchor"}
        names |= {t.name for t in applied.tensors if t.alias_of in names}
        problem = load(names) if load is not None else None
        if load is not None and problem is not None:
            undo()
            load(names)  # the model gets the weights back
            self._refuse(m, Reason.BROKEN_MODEL, problem, result, lasting=True)
            return
        self.version = m.to_version
        self.backoff.succeeded(manifest_key(m))
        if self.held is not None and m.kind == "delta":
            self.held.hold(m.payload_hash, blob)
        result.changed |= names
        seconds = time.perf_counter() - t0
        result.events.append(
            manifest_event(m, Direction.RECEIVED, Status.APPLIED, nbytes=len(blob), seconds=seconds)
        )

    def _fetch(self, m: DeltaManifest, result: SyncResult, deadline: float) -> bytes | None:
        """The payload, or None when it failed (backed off) or was refused on arrival."""
        hinted = self.hints.get(m.payload_hash, [])
        own_id = self.transport.peer_id if hinted else ""
        for holder, addrs in pick_holders(hinted, own_id, m.provider, self.rng):
            blob = self._from_holder(m, holder, addrs, result, deadline)
            if blob is not None:
                self.from_holders += 1
                return blob
        timeout = max(0.1, min(self.fetch_timeout, deadline - self.clock()))
        limits = FetchLimits(self.min_rate, self.grace_s, PayloadCheck(m, self.shapes))
        try:
            return self.transport.fetch_blob(m.provider, m.key, timeout=timeout, limits=limits)
        except RejectedMessage as e:  # its size or header, before the rest was read
            self._refuse(m, e.reason, e.detail, result, lasting=False)
        except TransportError as e:
            delay = self.backoff.failed(manifest_key(m), self.clock())
            reason = Reason.FETCH_TOO_SLOW if isinstance(e, FetchTooSlow) else Reason.FETCH_FAILED
            result.events.append(_rejected(m, reason, f"{e} (next try in {delay:.0f} s)"))
        return None

    def _from_holder(
        self,
        m: DeltaManifest,
        holder: str,
        addrs: tuple[str, ...],
        result: SyncResult,
        deadline: float,
    ) -> bytes | None:
        """The payload from a holder if it serves exactly the signed bytes; a holder that
        serves others is recorded (the payload itself is not held against anyone)."""
        if addrs:
            self.transport.learn_peer(holder, addrs)
        timeout = max(0.1, min(self.fetch_timeout, deadline - self.clock()))
        limits = FetchLimits(self.min_rate, self.grace_s, PayloadCheck(m, self.shapes))
        try:
            blob = self.transport.fetch_blob(holder, held_key(m.payload_hash), timeout, limits)
        except RejectedMessage as e:  # its size or header, before the rest was read
            result.events.append(_rejected(m, e.reason, f"from holder: {e.detail}", holder))
            return None
        except TransportError:
            return None  # gone, or no longer holding it: a hint, not a promise
        if len(blob) != m.size or blake3.blake3(blob).hexdigest() != m.payload_hash:
            detail = "a holder served bytes that are not the signed payload"
            result.events.append(_rejected(m, Reason.BAD_HASH, detail, holder))
            return None
        return blob

    def _apply(self, m: DeltaManifest, blob: bytes):
        """Check the whole payload against its manifest and apply it; `RejectedMessage`
        with the reason otherwise (the weights then bit-identical to before)."""
        if len(blob) != m.size:
            raise RejectedMessage(Reason.BAD_SIZE, f"{len(blob)} bytes, manifest says {m.size}")
        if blake3.blake3(blob).hexdigest() != m.payload_hash:
            raise RejectedMessage(Reason.BAD_HASH, "payload hash differs from the signed manifest")
        try:
            info = read_header(blob)
        except DeltaError as e:
            raise RejectedMessage(Reason.UNDECODABLE, str(e)) from None
        check_header(m, info)
        try:
            # Applied in place with undo: a failed check leaves the weights bit-identical.
            return apply_delta_undoable(
                self.weights,
                blob,
                expect_from_version=self.version if m.kind == "delta" else None,
                threads=self.threads,
                finite=True,
            )
        except NonFiniteWeights as e:
            raise RejectedMessage(Reason.NON_FINITE, str(e)) from None
        except LayoutMismatch as e:
            raise RejectedMessage(Reason.WRONG_TENSORS, str(e)) from None
        except DeltaError as e:
            raise RejectedMessage(Reason.APPLY_FAILED, str(e)) from None

    def _refuse(
        self, m: DeltaManifest, reason: Reason, detail: str, result: SyncResult, *, lasting: bool
    ) -> None:
        """Never fetch this payload again (and, `lasting`, not after a restart either)."""
        result.events.append(_rejected(m, reason, detail))
        self.refuse([m.payload_hash])
        if lasting:
            result.refused.append(m.payload_hash)
        self._known.pop(manifest_key(m), None)


def _rejected(m: DeltaManifest, reason: Reason, detail: str, peer: str | None = None) -> DeltaEvent:
    return manifest_event(
        m, Direction.RECEIVED, Status.REJECTED, peer=peer, reason=reason, detail=detail
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
