"""`Libp2pTransport`: the `Transport` contract over py-libp2p 0.8.1, made of this package's parts.

py-libp2p is trio-only, and the node is a plain synchronous program, so the libp2p host runs
in a daemon thread of its own, inside its own `trio.run`. The node thread calls in through
`trio.from_thread.run(..., trio_token=...)`, and messages come back out through the
thread-safe `BoundedInbox`. Nothing from trio or libp2p leaks through the public methods:
library failures become `TransportError`.

The parts: settings.py (`TransportSettings`, what the transport is configured with),
transport_parts.py (what the node thread builds from them), runtime.py (the network thread: the host
and the parts built on it), calls.py (the network-thread halves of the public calls), host.py
(host, Noise, PSK, allow-list), gossip.py (GossipSub, validators, delivery), publish.py
(back-pressure), blobs.py, peer_exchange.py, connections.py (dialing), and patches/ (every
change to py-libp2p's internals). docs/LIBP2P.md lists the library's pitfalls and where each
is handled.

What this class deliberately is not: a message decoder or verifier (the node checks
signatures and the claimed sender against `InboundMessage.source`), a store (gossip
delivers to peers that are connected now, and only to them), or a rate limiter.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import multiaddr
from libp2p.crypto.keys import KeyPair
from libp2p.custom_types import TProtocol
from libp2p.exceptions import BaseLibp2pError
from libp2p.peer.id import ID

from swarm.core.errors import TransportError
from swarm.core.identity import peer_id_of
from swarm.p2p.libp2p import host as hosting
from swarm.p2p.libp2p.blobs import check_blob_key
from swarm.p2p.libp2p.calls import NetworkCalls
from swarm.p2p.libp2p.relay import circuit_to, is_circuit
from swarm.p2p.libp2p.runtime import HostRuntime
from swarm.p2p.libp2p.settings import TransportSettings
from swarm.p2p.libp2p.stats import Libp2pStats
from swarm.p2p.libp2p.testing import RawStream
from swarm.p2p.libp2p.transport_parts import build_parts
from swarm.p2p.transport import (
    BlobServed,
    FetchLimits,
    InboundMessage,
    PeerInfo,
    Reachability,
    RefusalHook,
    Transport,
    Validator,
)

START_TIMEOUT_S = 30.0


class Libp2pTransport(Transport):
    """A `Transport` over libp2p: GossipSub for messages, raw streams for blobs, TCP only.

    Construct with a `TransportSettings` (the defaults without one) and an identity, then
    `start()` (or use it as a context manager). All public methods are for the node's
    thread; they block on the network thread for at most their stated bounds and raise
    `TransportError` on failure. Calling them from inside a validator (which runs on the
    network thread) is refused.

    Arguments:
        settings: listen and relay addresses, bootstrap peers, keys, bounds
            (`TransportSettings` documents each).
        key_pair / identity_path: the node identity (a key pair, or a key file that is
            created on first use). Neither: a fresh random identity, for tests.
    """

    def __init__(
        self,
        settings: TransportSettings | None = None,
        *,
        key_pair: KeyPair | None = None,
        identity_path: str | os.PathLike[str] | None = None,
    ) -> None:
        key_pair = hosting.resolve_key_pair(key_pair, identity_path)
        self.peer_id = peer_id_of(key_pair)
        self._parts = parts = build_parts(settings or TransportSettings(), key_pair)
        self._thread = parts.thread
        self._runtime = HostRuntime(parts)
        self._calls = NetworkCalls(parts, self._runtime)

    @property
    def settings(self) -> TransportSettings:
        """What this transport was built with."""
        return self._parts.settings

    def start(self) -> None:
        """Start the network thread, listen, subscribe to the settings' `topics` and begin
        dialing.

        Returns once the host listens (the bootstrap peers may not be connected yet; see
        `wait_for_topic_peers`). A second call on a running transport does nothing.
        """
        self._thread.start(self._runtime.run, START_TIMEOUT_S)

    def close(self) -> None:
        """Stop the host and its thread: graceful for up to a few seconds (published messages
        leave, then every connection is closed), then cancelled."""
        self._thread.stop()

    def subscribe(self, topic: str, validator: Validator | None = None) -> None:
        """Receive `topic`. `validator` runs on the network thread for each message: keep it cheap.

        Calling again for a subscribed topic replaces its validator.
        """
        if not topic:
            raise TransportError("a topic name must not be empty")
        self._thread.call(self._calls.subscribe, topic, validator)

    def publish(self, topic: str, data: bytes) -> None:
        """Queue `data` for gossip on `topic` and return; delivery happens on the network thread.

        Blocks (at most `publish_wait` s) while the hand-off queue is full, which it is when
        peers drain slower than the node publishes; raises `TransportError` if it stays full,
        if `data` exceeds the maximum message size, or if the transport is not running.
        Messages go out in publish order; `flush()` waits until they have left.
        """
        largest = self._parts.settings.max_message_size
        if len(data) > largest:
            raise TransportError(
                f"message of {len(data)} bytes exceeds the maximum of {largest}; "
                "send large payloads as blobs"
            )
        if not topic:
            raise TransportError("a topic name must not be empty")
        self._parts.outbox.put(topic, bytes(data), self._thread.running_token())

    def flush(self, timeout: float = 10.0) -> bool:
        """Wait until every published message has been handed to every peer's connection.

        True if that happened within `timeout` s. (It does not mean peers processed them.)
        """
        return self._thread.call(self._calls.flush, float(timeout))

    def receive(
        self, max_messages: int | None = None, timeout: float = 0.0
    ) -> list[InboundMessage]:
        return self._parts.inbox.drain(max_messages, timeout)

    def peers(self) -> list[PeerInfo]:
        return self._thread.call_sync(self._calls.peer_infos)

    def listen_addrs(self) -> list[str]:
        """Where peers reach this node: its circuit addresses through the relays that hold
        a reservation for it, then the addresses it listens on (or announces), unless
        AutoNAT found that peers cannot dial those."""
        net = self._runtime.net
        if not self._thread.is_ready or net is None:
            raise TransportError("the transport is not started")
        direct = [] if net.autonat.status == Reachability.PRIVATE else self._runtime.listen_addrs
        return list(net.relaying.addresses) + list(direct)

    def connection_kinds(self, peer_id: str) -> list[str]:
        """How we are connected to `peer_id`: "direct" or "relayed" for each open connection."""
        target = _parse_peer_id(peer_id)
        return self._thread.call_sync(self._calls.connection_kinds, target)

    def reachability(self) -> Reachability:
        """Whether peers can dial this node, as its last AutoNAT check found."""
        net = self._runtime.net
        return net.autonat.status if net is not None else Reachability.UNKNOWN

    def check_reachability(self, timeout: float = 30.0) -> Reachability:
        """Ask connected peers to dial us back now (AutoNAT), and return the verdict."""
        return self._thread.call(self._calls.check_reachability, float(timeout))

    def serve_blob(self, key: str, data: bytes) -> None:
        """Serve `data` under `key` to any (allowed) peer until `unserve_blob` or close."""
        self._parts.blobs.serve(key, data)

    def unserve_blob(self, key: str) -> None:
        """Stop serving `key` (and free its memory). Unknown keys are ignored."""
        self._parts.blobs.unserve(key)

    def fetch_blob(
        self, peer_id: str, key: str, timeout: float = 30.0, limits: FetchLimits | None = None
    ) -> bytes:
        """Fetch a blob from a peer (dialed from the peerstore if need be), within `timeout` s
        and `limits` (a rate floor; checks of its size and first bytes)."""
        check_blob_key(key)
        peer = _parse_peer_id(peer_id)
        return self._thread.call(self._calls.fetch_blob, peer, key, float(timeout), limits)

    def served_blobs(self, prefix: str = "") -> list[BlobServed]:
        return self._parts.blobs.served(prefix)

    def learn_peer(self, peer_id: str, addrs: Sequence[str]) -> None:
        """Add a peer's dialable TCP and circuit-relay addresses to the peerstore (for
        `fetch_blob`), for an hour."""
        try:
            target = ID.from_base58(peer_id)
            parsed = [multiaddr.Multiaddr(a) for a in addrs[:4]]
        except (ValueError, TypeError, BaseLibp2pError, multiaddr.exceptions.Error):
            return  # a hint that does not parse is no hint
        dialable = [a for a in parsed if hosting.is_dialable_tcp(a)]
        dialable += [circuit_to(a, target) for a in parsed if is_circuit(a)]
        if dialable and target != self._parts.my_id:
            self._thread.call_sync(self._calls.add_addrs, target, dialable)

    def stats(self) -> Libp2pStats:
        """A consistent snapshot of the counters (not a live view)."""
        return self._parts.counters.snapshot(self._parts.inbox.dropped)

    def set_refusal_hook(self, hook: RefusalHook | None) -> None:
        """Hand every `Refusal` to `hook` (on the network thread; see `Transport`)."""
        self._parts.rejections.set_hook(hook)

    def peer_costs(self) -> dict[str, dict]:
        """Each tracked peer's cost level and spending, and each cost ban (`peer_costs`)."""
        return self._thread.call_sync(self._parts.costs.snapshot)

    def peer_scores(self) -> dict[str, float]:
        """GossipSub's score of each connected peer (negative: penalised)."""
        return self._thread.call_sync(self._calls.peer_scores)

    def wait_for_topic_peers(self, topic: str, count: int = 1, timeout: float = 10.0) -> int:
        """Wait until `count` peers are in this node's gossip mesh for `topic` (or `timeout` s).

        Returns how many there are. Gossip only reaches peers that are meshed when a message
        is published, so a node (or test) that must not lose its first messages waits here.
        """
        return self._thread.call(self._calls.wait_for_topic_peers, topic, count, float(timeout))

    def write_raw_stream(self, peer_id: str, protocol: str, data: bytes) -> None:
        """Open a stream to `peer_id` for `protocol`, write `data` as is, and close it.

        For tests of how peers treat malformed input; a node never needs it.
        """
        target = _parse_peer_id(peer_id)
        self._thread.call(self._calls.write_raw, target, TProtocol(protocol), bytes(data))

    def open_raw_stream(self, peer_id: str, protocol: str) -> RawStream:
        """Open a stream to `peer_id` for `protocol` and hand it over as is.

        For adversary tests (a peer that never reads, or writes what it should not);
        a node never needs it.
        """
        target = _parse_peer_id(peer_id)
        return RawStream(
            self._thread, self._thread.call(self._calls.open_raw, target, TProtocol(protocol))
        )


def _parse_peer_id(peer_id: str) -> ID:
    try:
        return ID.from_base58(peer_id)
    except ValueError as exc:
        raise TransportError(f"not a peer ID: {peer_id!r}") from exc
