"""The transport seam between a node and its peers.

A node only ever talks to the swarm through `Transport`: publish bytes on a topic, drain
what arrived, list peers, and serve or fetch larger blobs. Two implementations exist:
`MemoryTransport` (here; in-process, for tests and one-process experiments) and
`Libp2pTransport` (libp2p over TCP + Noise + Yamux, in its own trio thread).

What a transport deliberately does not do: decode, verify or trust anything. It moves bytes,
runs the cheap per-topic validator given to it (which must return a rejection reason rather
than raise), counts what it drops, and hands everything else to the node.

The values that cross the seam are defined in `transport_types`, and what implementations
share (inbox, validator runner, served-blob log) in `transport_shared`; both are imported
from here as well.
"""

from __future__ import annotations

import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Sequence

from swarm.core.errors import TransportError
from swarm.p2p.transport_shared import (
    BoundedInbox,
    ServedBlobLog,
    run_blob_check,
    run_validator,
)
from swarm.p2p.transport_types import (
    BlobCheck,
    BlobServed,
    FetchLimits,
    InboundMessage,
    PeerInfo,
    Reachability,
    Refusal,
    RefusalHook,
    RefusalReason,
    TransportStats,
    Validator,
)

__all__ = [
    "BlobCheck",
    "BlobServed",
    "BoundedInbox",
    "FetchLimits",
    "InboundMessage",
    "MemoryHub",
    "MemoryTransport",
    "PeerInfo",
    "Reachability",
    "Refusal",
    "RefusalHook",
    "RefusalReason",
    "ServedBlobLog",
    "Transport",
    "TransportStats",
    "Validator",
    "run_blob_check",
    "run_validator",
]


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
