"""The transport seam between a node and its peers.

A node only ever talks to the swarm through `Transport`: publish bytes on a topic, drain
what arrived, list peers, and serve or fetch larger blobs. Two implementations exist:
`MemoryTransport` (here; in-process, for tests and one-process experiments) and
`Libp2pTransport` (libp2p over TCP + Noise + Yamux, in its own trio thread).

What a transport deliberately does not do: decode, verify or trust anything. It moves bytes,
runs the cheap per-topic validator given to it (which must return a rejection reason rather
than raise), counts what it drops, and hands everything else to the node.
"""

from __future__ import annotations

import collections
import enum
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from swarm.core.errors import TransportError

# A validator gets one inbound message and returns None to accept it or a short reason code
# to reject it. Transports wrap validators so an exception inside one counts as a rejection
# ("validator_error") instead of taking the host down.
Validator = Callable[["InboundMessage"], str | None]


@dataclass(frozen=True)
class InboundMessage:
    """One message as received: raw bytes plus what the transport knows of its origin."""

    topic: str
    data: bytes
    source: str  # peer ID of the sender as seen by the transport ("" if unknown)
    received_at: float


class RefusalReason(enum.StrEnum):
    """Why the transport itself refused something a peer sent (before any validator ran)."""

    OVERSIZE = "oversize_message"  # a gossip message (or RPC) above the size limit
    UNSIGNED = "unsigned_message"  # a gossip message without a signature
    BAD_SIGNATURE = "bad_message_signature"  # a signature that does not verify
    CONTROL_FLOOD = "gossip_control_flood"  # IHAVE/IWANT/GRAFT/PRUNE beyond the peer's budget
    BACKOFF_VIOLATION = "gossip_backoff_violation"  # GRAFT while we told it to back off
    BLOB_FETCH_LIMIT = "blob_fetch_limit"  # too many blob fetches at once from one peer
    FLOW_CONTROL = "flow_control_violation"  # bytes sent beyond our stream receive window
    INBOUND_BUDGET = "inbound_budget"  # more queued inbound messages than one peer may have
    LOW_SCORE = "below_publish_score"  # a message forwarded by a peer scored under the gate
    OVER_BUDGET = "over_cost_budget"  # past its cost budget: RPCs dropped unparsed, then banned
    BAD_AUTONAT_REQUEST = "bad_autonat_request"  # a malformed AutoNAT dial-back request
    BAD_HOLE_PUNCH = "bad_hole_punch"  # a malformed DCUtR (hole punching) message


class Reachability(enum.StrEnum):
    """Whether peers can dial this node (AutoNAT: `swarm.p2p.libp2p.reachability`)."""

    UNKNOWN = "unknown"  # not asked yet, or the answers disagree
    PUBLIC = "public"  # peers dialled it back
    PRIVATE = "private"  # peers failed to: behind NAT or a firewall


@dataclass(frozen=True)
class Refusal:
    """What the transport refused from one peer, for the node to record (ledger, bans).

    Floods are summarised: the transport reports each (peer, reason) at most once per
    second, with `count` events since its last report.
    """

    peer_id: str  # the peer that sent it to us (and that is penalised)
    reason: RefusalReason
    detail: str = ""
    count: int = 1
    source: str = ""  # the message's claimed origin, when a gossip message was refused
    topic: str = ""


RefusalHook = Callable[[Refusal], None]


@dataclass(frozen=True)
class PeerInfo:
    """A peer currently connected to this node."""

    peer_id: str
    addrs: tuple[str, ...] = ()


@dataclass(frozen=True)
class BlobServed:
    """A blob this node served in full to a peer: what the ledger counts as a delta served."""

    peer_id: str
    key: str
    nbytes: int
    addrs: tuple[str, ...] = ()  # where the fetcher listens, as known when it fetched


class ServedBlobLog:
    """Thread-safe record of blobs served, drained by whoever accounts for them.

    Bounded: a node that never drains it (nothing it serves is accounted) keeps the newest
    `capacity` entries and counts the rest in `dropped`.
    """

    def __init__(self, capacity: int = 4096):
        self._entries: collections.deque[BlobServed] = collections.deque(maxlen=capacity)
        self._lock = threading.Lock()
        self.dropped = 0

    def note(self, peer_id: str, key: str, nbytes: int, addrs: tuple[str, ...] = ()) -> None:
        with self._lock:
            if len(self._entries) == self._entries.maxlen:
                self.dropped += 1
            self._entries.append(BlobServed(peer_id, key, nbytes, addrs))

    def drain(self, prefix: str = "") -> list[BlobServed]:
        """The entries whose key starts with `prefix` (all by default); the others stay."""
        with self._lock:
            entries = [e for e in self._entries if e.key.startswith(prefix)]
            if prefix:
                kept = [e for e in self._entries if not e.key.startswith(prefix)]
                self._entries.clear()
                self._entries.extend(kept)
            else:
                self._entries.clear()
        return entries


@dataclass
class TransportStats:
    """Counters a transport keeps so that nothing is dropped silently."""

    published: int = 0
    received: int = 0
    inbox_dropped: int = 0  # accepted by the validator but evicted from a full inbox
    rejected: collections.Counter = field(default_factory=collections.Counter)  # reason -> n
    # Payload bytes (not counting the transport's own framing and control traffic): gossip
    # messages published and received (every one a validator saw), blobs served and fetched.
    gossip_bytes_out: int = 0
    gossip_bytes_in: int = 0
    blob_bytes_out: int = 0
    blob_bytes_in: int = 0

    def as_dict(self) -> dict:
        return {
            "published": self.published,
            "received": self.received,
            "inbox_dropped": self.inbox_dropped,
            "rejected": dict(self.rejected),
            "gossip_bytes_out": self.gossip_bytes_out,
            "gossip_bytes_in": self.gossip_bytes_in,
            "blob_bytes_out": self.blob_bytes_out,
            "blob_bytes_in": self.blob_bytes_in,
        }


def run_validator(validator: Validator | None, message: InboundMessage) -> str | None:
    """Run a validator so that it can never raise: an exception is the rejection 'validator_error'."""
    if validator is None:
        return None
    try:
        return validator(message)
    except Exception:  # noqa: BLE001 - by contract a validator error means "reject", never a crash
        return "validator_error"


class BoundedInbox:
    """A thread-safe FIFO that drops the *oldest* message when full and counts each drop."""

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError("inbox capacity must be at least 1")
        self._items: collections.deque[InboundMessage] = collections.deque()
        self._capacity = capacity
        self._cond = threading.Condition()
        self.dropped = 0

    def put(self, message: InboundMessage) -> None:
        with self._cond:
            if len(self._items) >= self._capacity:
                self._items.popleft()
                self.dropped += 1
            self._items.append(message)
            self._cond.notify_all()

    def drain(self, max_messages: int | None = None, timeout: float = 0.0) -> list[InboundMessage]:
        """Take up to `max_messages` (all if None), waiting up to `timeout` s for the first one."""
        with self._cond:
            if not self._items and timeout > 0:
                self._cond.wait_for(lambda: bool(self._items), timeout=timeout)
            n = len(self._items) if max_messages is None else min(max_messages, len(self._items))
            return [self._items.popleft() for _ in range(n)]

    def __len__(self) -> int:
        with self._cond:
            return len(self._items)


class BlobCheck(Protocol):
    """Checks a blob while it arrives, so a bad one is refused before it is read in full.

    Both methods run on the transport's thread, like a validator: keep them cheap and
    thread-safe. Raising refuses the blob; the exception reaches `fetch_blob`'s caller.
    """

    def size(self, nbytes: int) -> None:
        """The length the serving peer announced, before any of the blob is read."""

    def head(self, data: bytes) -> int:
        """Given the blob's first bytes (b"" at first), how many first bytes to see in all:
        at most `len(data)` once satisfied. Called again after every read until then."""


@dataclass(frozen=True)
class FetchLimits:
    """Bounds on one `fetch_blob` beyond its total deadline."""

    min_rate: float = 0.0  # bytes/s the transfer must average once grace_s is over (0: none)
    grace_s: float = 5.0  # seconds from the start (dial, request, header) before the floor
    check: BlobCheck | None = None


def run_blob_check(check: BlobCheck | None, data: bytes) -> None:
    """A `BlobCheck` over a blob already held whole (transports without streams)."""
    if check is None:
        return
    check.size(len(data))
    seen = 0
    while True:
        need = check.head(data[:seen])
        if need <= seen or seen >= len(data):
            return
        seen = min(need, len(data))


class Transport(ABC):
    """What a node needs from the network. Implementations are used from one thread (the node's)."""

    peer_id: str

    @abstractmethod
    def start(self) -> None:
        """Begin listening and connecting. Idempotent failures raise `TransportError`."""

    @abstractmethod
    def close(self) -> None:
        """Stop everything the transport started. Safe to call twice."""

    @abstractmethod
    def subscribe(self, topic: str, validator: Validator | None = None) -> None:
        """Receive messages on `topic`; `validator` runs on each before it reaches the inbox."""

    @abstractmethod
    def publish(self, topic: str, data: bytes) -> None:
        """Send `data` to every subscriber of `topic`. May block briefly for back-pressure."""

    @abstractmethod
    def receive(
        self, max_messages: int | None = None, timeout: float = 0.0
    ) -> list[InboundMessage]:
        """Drain validated inbound messages, waiting up to `timeout` s for the first."""

    @abstractmethod
    def peers(self) -> list[PeerInfo]:
        """Peers connected right now."""

    @abstractmethod
    def listen_addrs(self) -> list[str]:
        """Full multiaddrs (with /p2p/<id>) that other nodes can bootstrap from."""

    @abstractmethod
    def serve_blob(self, key: str, data: bytes) -> None:
        """Make `data` fetchable by peers under `key` (for payloads too big for gossip)."""

    @abstractmethod
    def unserve_blob(self, key: str) -> None:
        """Stop serving `key` (and free its memory). Unknown keys are ignored."""

    @abstractmethod
    def fetch_blob(
        self, peer_id: str, key: str, timeout: float = 30.0, limits: FetchLimits | None = None
    ) -> bytes:
        """Fetch a blob a peer serves. Raises `TransportError` if it is missing, and
        `FetchTooSlow` past `timeout` s or below `limits.min_rate`; whatever
        `limits.check` raises refuses the blob before the rest of it is read."""

    @abstractmethod
    def served_blobs(self, prefix: str = "") -> list[BlobServed]:
        """Blobs served in full to peers since the last call (drains the record), only those
        whose key starts with `prefix` if given (each part of a node drains its own keys)."""

    @abstractmethod
    def stats(self) -> TransportStats:
        """Counters of what was sent, received, rejected and dropped."""

    def learn_peer(self, peer_id: str, addrs: Sequence[str]) -> None:
        """Remember where `peer_id` listens, so a later `fetch_blob` can reach it unconnected.

        A hint (from a peer's view or peer exchange): bad entries are ignored. Transports
        that need no addresses (in memory) do nothing.
        """
        return None

    def set_refusal_hook(self, hook: RefusalHook | None) -> None:
        """Call `hook` with each `Refusal` the transport makes (None: stop).

        It runs on the transport's thread, like a validator: keep it cheap and thread-safe;
        an exception in it is counted and otherwise ignored. A transport that never
        refuses anything on its own (MemoryTransport) never calls it.
        """
        self._refusal_hook = hook

    def __enter__(self) -> Transport:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class MemoryHub:
    """An in-process 'network' joining `MemoryTransport`s. Delivery is synchronous and lossless."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._members: dict[str, MemoryTransport] = {}

    def attach(self, transport: MemoryTransport) -> None:
        with self._lock:
            if transport.peer_id in self._members:
                raise TransportError(f"peer {transport.peer_id} is already attached to this hub")
            self._members[transport.peer_id] = transport

    def detach(self, peer_id: str) -> None:
        with self._lock:
            self._members.pop(peer_id, None)

    def members(self) -> list[MemoryTransport]:
        with self._lock:
            return list(self._members.values())

    def member(self, peer_id: str) -> MemoryTransport | None:
        with self._lock:
            return self._members.get(peer_id)


class MemoryTransport(Transport):
    """A transport over a `MemoryHub`: same contract as libp2p, no sockets, no threads.

    A node with a hub of its own (or no hub) is a solo node: it publishes to nobody.
    """

    def __init__(self, peer_id: str, hub: MemoryHub | None = None, inbox_capacity: int = 4096):
        self.peer_id = peer_id
        self._hub = hub if hub is not None else MemoryHub()
        self._inbox = BoundedInbox(inbox_capacity)
        self._validators: dict[str, Validator | None] = {}
        self._blobs: dict[str, bytes] = {}
        self._served = ServedBlobLog()
        self._stats = TransportStats()
        self._started = False

    def start(self) -> None:
        if not self._started:
            self._hub.attach(self)
            self._started = True

    def close(self) -> None:
        if self._started:
            self._hub.detach(self.peer_id)
            self._started = False

    def subscribe(self, topic: str, validator: Validator | None = None) -> None:
        self._validators[topic] = validator

    def publish(self, topic: str, data: bytes) -> None:
        if not self._started:
            raise TransportError("publish on a transport that is not started")
        self._stats.published += 1
        self._stats.gossip_bytes_out += len(data)
        for member in self._hub.members():
            if member is not self:
                member._deliver(topic, bytes(data), self.peer_id)

    def _deliver(self, topic: str, data: bytes, source: str) -> None:
        if topic not in self._validators:
            return
        message = InboundMessage(topic=topic, data=data, source=source, received_at=time.time())
        self._stats.gossip_bytes_in += len(data)
        reason = run_validator(self._validators[topic], message)
        if reason is not None:
            self._stats.rejected[reason] += 1
            return
        self._stats.received += 1
        self._inbox.put(message)

    def receive(
        self, max_messages: int | None = None, timeout: float = 0.0
    ) -> list[InboundMessage]:
        return self._inbox.drain(max_messages, timeout)

    def peers(self) -> list[PeerInfo]:
        return [PeerInfo(m.peer_id) for m in self._hub.members() if m is not self]

    def listen_addrs(self) -> list[str]:
        return [f"/memory/{self.peer_id}"]

    def serve_blob(self, key: str, data: bytes) -> None:
        self._blobs[key] = bytes(data)

    def unserve_blob(self, key: str) -> None:
        self._blobs.pop(key, None)

    def fetch_blob(
        self, peer_id: str, key: str, timeout: float = 30.0, limits: FetchLimits | None = None
    ) -> bytes:
        member = self._hub.member(peer_id)
        if member is None:
            raise TransportError(f"peer {peer_id} is not connected")
        try:
            data = member._blobs[key]
        except KeyError:
            raise TransportError(f"peer {peer_id} serves no blob {key!r}") from None
        run_blob_check(limits.check if limits else None, data)
        member._served.note(self.peer_id, key, len(data), (f"/memory/{self.peer_id}",))
        member._stats.blob_bytes_out += len(data)
        self._stats.blob_bytes_in += len(data)
        return data

    def served_blobs(self, prefix: str = "") -> list[BlobServed]:
        return self._served.drain(prefix)

    def stats(self) -> TransportStats:
        self._stats.inbox_dropped = self._inbox.dropped
        return self._stats
