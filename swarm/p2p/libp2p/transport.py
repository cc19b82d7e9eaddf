"""`Libp2pTransport`: the `Transport` contract over py-libp2p 0.8.1, made of this package's parts.

py-libp2p is trio-only, and the node is a plain synchronous program, so the libp2p host runs
in a daemon thread of its own, inside its own `trio.run`. The node thread calls in through
`trio.from_thread.run(..., trio_token=...)`, and messages come back out through the
thread-safe `BoundedInbox`. Nothing from trio or libp2p leaks through the public methods:
library failures become `TransportError`.

The parts: host.py (host, Noise, PSK, allow-list), gossip.py (GossipSub, validators,
delivery), publish.py (back-pressure), blobs.py, peer_exchange.py, connections.py (dialing),
and patches.py (every change to py-libp2p's internals). docs/LIBP2P.md lists the library's
pitfalls and where each is handled.

What this class deliberately is not: a message decoder or verifier (the node checks
signatures and the claimed sender against `InboundMessage.source`), a store (gossip
delivers to peers that are connected now, and only to them), or a rate limiter.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import multiaddr
import trio
from libp2p.abc import IHost, INetStream
from libp2p.crypto.keys import KeyPair
from libp2p.custom_types import TProtocol
from libp2p.exceptions import BaseLibp2pError
from libp2p.peer.id import ID

from swarm.core.errors import ConfigError, FetchTooSlow, TransportError
from swarm.core.identity import peer_id_of
from swarm.p2p.addresses import listen_problem, parse_listen
from swarm.p2p.libp2p import host as hosting
from swarm.p2p.libp2p.blobs import (
    DEFAULT_MAX_BLOB_SIZE,
    BlobServer,
    FetchSlots,
    check_blob_key,
    fetch_blob,
)
from swarm.p2p.libp2p.connections import DEFAULT_MAX_PEERS, Dialer
from swarm.p2p.libp2p.dcutr import ObservedIps, direct_connections, relayed_connections
from swarm.p2p.libp2p.framing import NET_ERRORS, STREAM_IO_TIMEOUT_S, close_quietly
from swarm.p2p.libp2p.gossip import DEFAULT_MESH_DEGREE, MAX_MESSAGE_SIZE, Gossip
from swarm.p2p.libp2p.holepunch import HolePunching
from swarm.p2p.libp2p.network_thread import NetworkThread
from swarm.p2p.libp2p.patches import abort_peer_connections, keep_observed_ips
from swarm.p2p.libp2p.peer_costs import Cost, CostSettings, PeerCosts
from swarm.p2p.libp2p.peer_exchange import PeerExchange
from swarm.p2p.libp2p.publish import PUBLISH_WAIT_S, Outbox
from swarm.p2p.libp2p.reachability import CHECK_INTERVAL_S, FIRST_CHECK_S, AutoNat
from swarm.p2p.libp2p.refusals import RefusalRecorder
from swarm.p2p.libp2p.relay import Relaying, circuit_to, is_circuit, parse_relays
from swarm.p2p.libp2p.stats import Counters, Libp2pStats
from swarm.p2p.libp2p.testing import RawStream
from swarm.p2p.libp2p.trimming import DEFAULT_MAX_CONNECTIONS, ConnectionTrimmer
from swarm.p2p.transport import (
    BlobServed,
    BoundedInbox,
    FetchLimits,
    InboundMessage,
    PeerInfo,
    Reachability,
    RefusalHook,
    RefusalReason,
    Transport,
    Validator,
)

logger = logging.getLogger(__name__)

DEFAULT_INBOX_CAPACITY = 4096
LEARNED_ADDR_TTL_S = 3600  # addresses learned from a peer's view (Transport.learn_peer)
START_TIMEOUT_S = 30.0
CLOSE_GRACE_S = 3.0


@dataclass
class _Network:
    """The parts that live on the network thread, built there once the host exists."""

    host: IHost
    gossip: Gossip
    dialer: Dialer
    peer_exchange: PeerExchange
    relaying: Relaying
    autonat: AutoNat
    holepunch: HolePunching
    busy: Callable[[ID], bool]  # a connection not to close: a fetch running, or a relay's


class Libp2pTransport(Transport):
    """A `Transport` over libp2p: GossipSub for messages, raw streams for blobs, TCP only.

    Construct with plain values, then `start()` (or use it as a context manager). All public
    methods are for the node's thread; they block on the network thread for at most their
    stated bounds and raise `TransportError` on failure. Calling them from inside a
    validator (which runs on the network thread) is refused.

    Arguments:
        key_pair / identity_path: the node identity (a key pair, or a key file that is
            created on first use). Neither: a fresh random identity, for tests.
        listen_addr: "/ip4/<ip>/tcp/<port>"; port 0 picks a free port (see listen_addrs()).
            "": listen on nothing (no inbound connection, as behind NAT; reachable only
            through `relays`).
        bootstrap: full multiaddrs with /p2p/<peer id>; each is dialed, and re-dialed with
            backoff whenever the connection drops, forever.
        topics: topics to subscribe to at start, without a validator.
        psk: optional private-network key (64 hex characters; see swarm.p2p.swarm_key for
            key files). Spoken as the libp2p pnet spec says, like go, js and rust libp2p.
        allow_list: optional peer IDs; connections from any other peer are closed.
        max_message_size: largest payload publish() accepts. Must be the same on every node.
        inbox_capacity: received messages kept until receive(); the oldest are dropped
            (and counted) beyond it.
        dial_timeout: bound on each dial, in seconds.
        max_peers: stop dialing peers learned by peer exchange at this many connections.
        max_connections: beyond this many connected peers, close the least recently used
            idle ones (never a bootstrap peer's) down to three quarters of it
            (`trimming.ConnectionTrimmer`); 0: no bound.
        mesh_degree: GossipSub D (mesh peers per topic); D_lo = D*2//3, D_hi = 2*D.
        peer_exchange: ask connected peers for their peers, so a node bootstrapped from
            one peer finds the rest.
        answer_peer_exchange: answer other peers' peer-exchange requests. False makes the
            node look like a libp2p peer that does not speak our protocol (tests use it).
        max_blob_size: largest blob fetch_blob() accepts from a peer.
        publish_wait: bound, in seconds, on publish()'s wait for outbound queues to drain.
        relay_service: relay connections for peers that hold a reservation with us
            (circuit relay v2; `relay.py`).
        relays: full multiaddrs of relays (with /p2p/<relay id>): the node keeps a
            reservation on each, and its circuit address through each comes first in
            listen_addrs().
        announce: addresses to tell peers instead of the listened ones (a port forwarded
            on a NAT router); "/ip4/<ip>/tcp/<port>".
        autonat_interval: seconds between reachability checks (AutoNAT, `reachability.py`:
            connected peers dial us back; a node they cannot reach hands out only its
            circuit addresses); 0: never check (the dial-back service still runs).
        hole_punch: move each peer that reaches us through a relay onto a direct
            connection (DCUtR, `holepunch.py`; needs a listen port). Peers' requests are
            answered either way.
    """

    def __init__(
        self,
        *,
        key_pair: KeyPair | None = None,
        identity_path: str | os.PathLike[str] | None = None,
        listen_addr: str = hosting.DEFAULT_LISTEN_ADDR,
        bootstrap: Sequence[str] = (),
        topics: Sequence[str] = (),
        psk: str | None = None,
        allow_list: Iterable[str] | None = None,
        max_message_size: int = MAX_MESSAGE_SIZE,
        inbox_capacity: int = DEFAULT_INBOX_CAPACITY,
        dial_timeout: float = hosting.DEFAULT_DIAL_TIMEOUT,
        max_peers: int = DEFAULT_MAX_PEERS,
        max_connections: int = DEFAULT_MAX_CONNECTIONS,
        mesh_degree: int = DEFAULT_MESH_DEGREE,
        peer_exchange: bool = True,
        answer_peer_exchange: bool = True,
        max_blob_size: int = DEFAULT_MAX_BLOB_SIZE,
        publish_wait: float = PUBLISH_WAIT_S,
        cost_settings: CostSettings | None = None,
        relay_service: bool = False,
        relays: Sequence[str] = (),
        announce: Sequence[str] = (),
        autonat_interval: float = CHECK_INTERVAL_S,
        hole_punch: bool = True,
    ) -> None:
        if max_message_size <= 0:
            raise TransportError("max_message_size must be positive")
        if dial_timeout <= 0:
            raise TransportError("dial_timeout must be positive")
        self._key_pair = hosting.resolve_key_pair(key_pair, identity_path)
        self.peer_id = peer_id_of(self._key_pair)
        my_id = ID.from_pubkey(self._key_pair.public_key)
        self._listen_addr = hosting.parse_listen_addr(listen_addr)
        self._bootstrap = [i for i in hosting.parse_bootstrap(bootstrap) if i.peer_id != my_id]
        self._initial_topics = list(dict.fromkeys(topics))
        self._relay_service = relay_service
        self._relays = [r for r in parse_relays(relays) if r.peer_id != my_id]
        self._announce = hosting.parse_announce(announce)
        if autonat_interval < 0:
            raise TransportError("autonat_interval must be 0 (off) or positive")
        self._autonat_interval = float(autonat_interval)
        self._hole_punch = hole_punch
        self._psk = hosting.parse_psk(psk)
        self._costs = PeerCosts(cost_settings)
        self._policy = hosting.AccessPolicy(
            my_id, hosting.parse_allow_list(allow_list), self._costs
        )
        self._max_message_size = max_message_size
        self._dial_timeout = float(dial_timeout)
        self._max_peers = max_peers
        self._max_connections = max_connections
        if mesh_degree < 1:
            raise TransportError("mesh_degree must be at least 1")
        self._mesh_degree = mesh_degree
        self._peer_exchange = peer_exchange
        self._answer_peer_exchange = answer_peer_exchange
        self._max_blob_size = max_blob_size
        try:
            self._inbox = BoundedInbox(inbox_capacity)
        except ValueError as exc:
            raise TransportError(str(exc)) from exc
        self._counters = Counters()
        self._rejections = RefusalRecorder(self._counters)
        self._blobs = BlobServer(self._policy, self._counters)
        self._fetch_slots = FetchSlots()  # our fetches to one peer at once, below its limit
        self._trimmer = (
            ConnectionTrimmer(max_connections, self._counters) if max_connections > 0 else None
        )
        if self._trimmer is not None:
            self._blobs.on_use = self._trimmer.touch
        self._thread = NetworkThread(
            name=f"libp2p-{self.peer_id[-8:]}",
            label=f"libp2p host of {self.peer_id}",
            grace=CLOSE_GRACE_S,
        )
        self._outbox = Outbox(self._counters, float(publish_wait))
        self._listen_addrs: list[str] = []
        self._net: _Network | None = None  # set on the network thread while it runs
        self._nursery: trio.Nursery | None = None  # the network thread's, once it serves

    # ------------------------------------------------------------------ lifecycle (node thread)

    def start(self) -> None:
        """Start the network thread, listen, subscribe to `topics` and begin dialing.

        Returns once the host listens (the bootstrap peers may not be connected yet; see
        `wait_for_topic_peers`). A second call on a running transport does nothing.
        """
        self._thread.start(self._run_host, START_TIMEOUT_S)

    @property
    def cost_settings(self) -> CostSettings:
        """Each peer's cost budget (`peer_costs`), as configured."""
        return self._costs.settings

    @property
    def max_connections(self) -> int:
        """Connected peers kept at most (0: no bound)."""
        return self._max_connections

    def close(self) -> None:
        """Stop the host and its thread: graceful for up to CLOSE_GRACE_S (published messages
        leave, then every connection is closed), then cancelled."""
        self._thread.stop()

    # ------------------------------------------------------------------ the trio side

    async def _run_host(self) -> None:
        try:
            await self._serve()
        finally:
            self._outbox.close()  # however the host ends, a publish waiting for room ends too

    async def _serve(self) -> None:
        net = self._net = self._build_network()
        # Pubsub and GossipSub run before the host listens: an inbound pubsub stream that
        # arrives before Pubsub's service manager exists kills the host.
        async with net.gossip.running():
            for topic in self._initial_topics:
                await net.gossip.subscribe(topic, None)
            listen = [self._listen_addr] if self._listen_addr is not None else []
            async with net.host.run(listen), trio.open_nursery() as nursery:
                self._listen_addrs = [
                    f"{addr}/p2p/{self.peer_id}" for addr in net.host.get_transport_addrs()
                ]
                if listen and not self._listen_addrs:
                    raise TransportError(listen_failure(str(self._listen_addr)))
                if self._announce:
                    self._listen_addrs = [f"{a}/p2p/{self.peer_id}" for a in self._announce]
                # Relays first: listen_addrs() names the circuits of those that said yes.
                await nursery.start(net.relaying.run)
                self._start_background_tasks(net, nursery)
                self._thread.mark_ready()
                await self._thread.wait_for_stop()
                # Let what was already published leave before the connections close.
                await self._outbox.flush(net.gossip, CLOSE_GRACE_S / 2)
                await self._close_connections(net)
                nursery.cancel_scope.cancel()

    def _build_network(self) -> _Network:
        host = hosting.build_host(
            self._key_pair,
            self._listen_addr,
            self._psk,
            self._dial_timeout,
            self._on_flow_violation,
        )
        relaying = Relaying(
            host,
            service=self._relay_service,
            relays=self._relays,
            psk=self._psk,
            dial_timeout=self._dial_timeout,
            admit=self._admit_relay_stream,
        )

        def busy(peer_id: ID) -> bool:
            return self._blobs.busy(peer_id) or relaying.keeps(peer_id)

        autonat = AutoNat(
            host,
            self._policy,
            self._counters,
            own_addrs=lambda: list(self._listen_addrs),
            excluded=lambda p: any(r.peer_id == p for r in self._relays),
            dial_timeout=self._dial_timeout,
            interval=self._autonat_interval or CHECK_INTERVAL_S,
            first_check=min(FIRST_CHECK_S, self._autonat_interval or FIRST_CHECK_S),
        )

        observed = ObservedIps()
        keep_observed_ips(host, observed)
        holepunch = HolePunching(
            host,
            self._policy,
            self._counters,
            observed,
            relays=[r.peer_id for r in self._relays],
            announce=[str(a) for a in self._announce],
            enabled=self._hole_punch,
        )

        # Pubsub registers its stream handlers and connection notifee first, as it always has.
        gossip = Gossip(
            host,
            self._policy,
            self._counters,
            self._inbox,
            self._rejections,
            mesh_degree=self._mesh_degree,
            max_message_size=self._max_message_size,
        )
        dialer = Dialer(
            host,
            self._policy,
            self._counters,
            dial_timeout=self._dial_timeout,
            max_peers=self._dial_target(),
            trimmer=self._trimmer,
            busy=busy,
        )
        gossip.gossipsub.learn_peer = dialer.learn  # PRUNE peer exchange, from well-scored peers
        peer_exchange = PeerExchange(host, self._policy, dialer, self._counters)
        self._blobs.register(host, gossip.refuse)
        autonat.register(gossip.refuse)
        holepunch.register(gossip.refuse)
        if self._answer_peer_exchange:
            peer_exchange.register()
        # Every connection is checked (allow-list, cost bans) and billed to its peer.
        notifee = hosting.AllowListNotifee(
            self._policy.allows,
            self._count_refused,
            lambda p: self._policy.charge(p, Cost.CONNECTION),
        )
        host.get_network().register_notifee(notifee)
        return _Network(
            host=host,
            gossip=gossip,
            dialer=dialer,
            peer_exchange=peer_exchange,
            relaying=relaying,
            autonat=autonat,
            holepunch=holepunch,
            busy=busy,
        )

    async def _close_connections(self, net: _Network) -> None:
        """Close every connection (the host's own shutdown leaves their sockets open, and a
        peer would keep waiting on us until its timeouts): side by side, within a second."""
        network = net.host.get_network()
        with trio.move_on_after(CLOSE_GRACE_S / 3):
            async with trio.open_nursery() as closing:
                for peer_id in hosting.connected_peers(net.host):
                    closing.start_soon(abort_peer_connections, network, peer_id)

    def _start_background_tasks(self, net: _Network, nursery: trio.Nursery) -> None:
        self._nursery = nursery
        net.dialer.add_bootstrap(self._bootstrap)
        nursery.start_soon(net.dialer.maintain, nursery)
        self._outbox.start(nursery, net.gossip)
        nursery.start_soon(net.gossip.watch_send_queues, nursery)
        if self._peer_exchange:
            nursery.start_soon(net.peer_exchange.run)
        if self._autonat_interval > 0:
            nursery.start_soon(net.autonat.run)
        nursery.start_soon(net.holepunch.run)

    def _admit_relay_stream(self, peer_id: ID) -> bool:
        """A circuit relay stream a peer opened (a reservation, a circuit): billed to it, and
        refused from a peer off the allow-list or banned."""
        self._policy.charge(peer_id, Cost.STREAM)
        return self._policy.allows(peer_id)

    def _on_flow_violation(self, peer_id: ID) -> None:
        """A peer wrote past a stream's receive window: count, record, penalise, disconnect."""
        net = self._net
        with self._counters.locked() as stats:
            stats.flow_control_violations += 1
        if net is None:
            return
        net.gossip.refuse(peer_id, RefusalReason.FLOW_CONTROL, "wrote past the receive window")
        if self._nursery is not None:
            self._nursery.start_soon(abort_peer_connections, net.host.get_network(), peer_id)

    def _count_refused(self, peer_id: ID) -> None:
        logger.info("closing connection from %s: not on the allow-list, or banned", peer_id)
        with self._counters.locked() as stats:
            stats.refused_peers += 1

    # The network-thread halves of the public calls below.

    async def _subscribe(self, topic: str, validator: Validator | None) -> None:
        await self._running_net().gossip.subscribe(topic, validator)

    async def _flush(self, timeout: float) -> bool:
        return await self._outbox.flush(self._running_net().gossip, timeout)

    async def _fetch_blob(
        self, peer_id: ID, key: str, timeout: float, limits: FetchLimits | None
    ) -> bytes:
        net = self._running_net()
        began = trio.current_time()
        with trio.move_on_after(timeout):  # a slot below the peer's limit, within the timeout
            async with self._fetch_slots.slot(peer_id):
                await self._reach(net, peer_id, timeout)
                left = max(timeout - (trio.current_time() - began), 0.0)
                return await self._fetch_now(net, peer_id, key, left, limits)
        raise FetchTooSlow(f"no fetch slot for {peer_id} within {timeout} s")

    async def _fetch_now(
        self, net: _Network, peer_id: ID, key: str, timeout: float, limits: FetchLimits | None
    ) -> bytes:
        host = net.host
        if self._trimmer is not None:
            self._trimmer.touch(peer_id)
        data = await fetch_blob(host, peer_id, key, timeout, self._max_blob_size, limits)
        if self._trimmer is not None:
            self._trimmer.touch(peer_id)
        with self._counters.locked() as stats:
            stats.blob_bytes_in += len(data)
        return data

    async def _wait_for_topic_peers(self, topic: str, count: int, timeout: float) -> int:
        return await self._running_net().gossip.wait_for_topic_peers(topic, count, timeout)

    def _peer_infos(self) -> list[PeerInfo]:
        host = self._running_net().host
        return [
            PeerInfo(
                peer_id=peer_id.to_base58(),
                addrs=tuple(str(a) for a in hosting.peer_addrs(host, peer_id)),
            )
            for peer_id in hosting.connected_peers(host)
        ]

    async def _write_raw(self, peer_id: ID, protocol: TProtocol, data: bytes) -> None:
        stream = await self._open_raw(peer_id, protocol)
        try:
            with trio.fail_after(STREAM_IO_TIMEOUT_S):
                await stream.write(data)
        except NET_ERRORS as exc:
            raise TransportError(f"writing to {peer_id} on {protocol} failed: {exc}") from exc
        finally:
            await close_quietly(stream)

    def _dial_target(self) -> int:
        """Connections the dialer fills up to with peers it learned: at most half the bound,
        so that the other half is left for peers dialling in."""
        if self._trimmer is None:
            return self._max_peers
        return min(self._max_peers, max(1, self._trimmer.max_connections // 2))

    async def _reach(self, net: _Network, peer_id: ID, within: float) -> None:
        """Before a stream to `peer_id`: at the bound on connections, make room for its dial;
        if it is reached only through a relay, dial it there (for at most `within` s)."""
        if self._trimmer is not None:
            await self._trimmer.make_room(net.host, peer_id, net.busy)
        await net.relaying.connect(peer_id, within)

    async def _open_raw(self, peer_id: ID, protocol: TProtocol) -> INetStream:
        net = self._running_net()
        host = net.host
        await self._reach(net, peer_id, STREAM_IO_TIMEOUT_S)
        try:
            with trio.fail_after(STREAM_IO_TIMEOUT_S):
                return await host.new_stream(peer_id, [protocol])
        except NET_ERRORS as exc:
            raise TransportError(f"opening {protocol} to {peer_id} failed: {exc}") from exc

    def _peer_scores(self) -> dict[str, float]:
        net = self._running_net()
        return {
            peer_id.to_base58(): net.gossip.score(peer_id)
            for peer_id in hosting.connected_peers(net.host)
        }

    def _running_net(self) -> _Network:
        if self._net is None:
            raise TransportError("the transport is not started")
        return self._net

    # ------------------------------------------------------------------ public API (node thread)

    def subscribe(self, topic: str, validator: Validator | None = None) -> None:
        """Receive `topic`. `validator` runs on the network thread for each message: keep it cheap.

        Calling again for a subscribed topic replaces its validator.
        """
        if not topic:
            raise TransportError("a topic name must not be empty")
        self._thread.call(self._subscribe, topic, validator)

    def publish(self, topic: str, data: bytes) -> None:
        """Queue `data` for gossip on `topic` and return; delivery happens on the network thread.

        Blocks (at most `publish_wait` s) while the hand-off queue is full, which it is when
        peers drain slower than the node publishes; raises `TransportError` if it stays full,
        if `data` exceeds the maximum message size, or if the transport is not running.
        Messages go out in publish order; `flush()` waits until they have left.
        """
        if len(data) > self._max_message_size:
            raise TransportError(
                f"message of {len(data)} bytes exceeds the maximum of {self._max_message_size}; "
                "send large payloads as blobs"
            )
        if not topic:
            raise TransportError("a topic name must not be empty")
        self._outbox.put(topic, bytes(data), self._thread.running_token())

    def flush(self, timeout: float = 10.0) -> bool:
        """Wait until every published message has been handed to every peer's connection.

        True if that happened within `timeout` s. (It does not mean peers processed them.)
        """
        return self._thread.call(self._flush, float(timeout))

    def receive(
        self, max_messages: int | None = None, timeout: float = 0.0
    ) -> list[InboundMessage]:
        return self._inbox.drain(max_messages, timeout)

    def peers(self) -> list[PeerInfo]:
        return self._thread.call_sync(self._peer_infos)

    def listen_addrs(self) -> list[str]:
        """Where peers reach this node: its circuit addresses through the relays that hold
        a reservation for it, then the addresses it listens on (or announces), unless
        AutoNAT found that peers cannot dial those."""
        net = self._net
        if not self._thread.is_ready or net is None:
            raise TransportError("the transport is not started")
        direct = [] if net.autonat.status == Reachability.PRIVATE else self._listen_addrs
        return list(net.relaying.addresses) + list(direct)

    def connection_kinds(self, peer_id: str) -> list[str]:
        """How we are connected to `peer_id`: "direct" or "relayed" for each open connection."""
        target = _parse_peer_id(peer_id)
        return self._thread.call_sync(self._connection_kinds, target)

    def _connection_kinds(self, peer_id: ID) -> list[str]:
        host = self._running_net().host
        relayed = relayed_connections(host, peer_id)
        return ["relayed"] * len(relayed) + ["direct"] * len(direct_connections(host, peer_id))

    def reachability(self) -> Reachability:
        """Whether peers can dial this node, as its last AutoNAT check found."""
        net = self._net
        return net.autonat.status if net is not None else Reachability.UNKNOWN

    def check_reachability(self, timeout: float = 30.0) -> Reachability:
        """Ask connected peers to dial us back now (AutoNAT), and return the verdict."""
        return self._thread.call(self._check_reachability, float(timeout))

    async def _check_reachability(self, timeout: float) -> Reachability:
        autonat = self._running_net().autonat
        with trio.move_on_after(timeout):
            return await autonat.check()
        return autonat.status

    def serve_blob(self, key: str, data: bytes) -> None:
        """Serve `data` under `key` to any (allowed) peer until `unserve_blob` or close."""
        self._blobs.serve(key, data)

    def unserve_blob(self, key: str) -> None:
        """Stop serving `key` (and free its memory). Unknown keys are ignored."""
        self._blobs.unserve(key)

    def fetch_blob(
        self, peer_id: str, key: str, timeout: float = 30.0, limits: FetchLimits | None = None
    ) -> bytes:
        """Fetch a blob from a peer (dialed from the peerstore if need be), within `timeout` s
        and `limits` (a rate floor; checks of its size and first bytes)."""
        check_blob_key(key)
        peer = _parse_peer_id(peer_id)
        return self._thread.call(self._fetch_blob, peer, key, float(timeout), limits)

    def served_blobs(self, prefix: str = "") -> list[BlobServed]:
        return self._blobs.served(prefix)

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
        if dialable and target != ID.from_pubkey(self._key_pair.public_key):
            self._thread.call_sync(self._add_addrs, target, dialable)

    def _add_addrs(self, peer_id: ID, addrs: list) -> None:
        self._running_net().host.get_peerstore().add_addrs(peer_id, addrs, LEARNED_ADDR_TTL_S)

    def stats(self) -> Libp2pStats:
        """A consistent snapshot of the counters (not a live view)."""
        return self._counters.snapshot(self._inbox.dropped)

    def set_refusal_hook(self, hook: RefusalHook | None) -> None:
        """Hand every `Refusal` to `hook` (on the network thread; see `Transport`)."""
        self._rejections.set_hook(hook)

    def peer_costs(self) -> dict[str, dict]:
        """Each tracked peer's cost level and spending, and each cost ban (`peer_costs`)."""
        return self._thread.call_sync(self._costs.snapshot)

    def peer_scores(self) -> dict[str, float]:
        """GossipSub's score of each connected peer (negative: penalised)."""
        return self._thread.call_sync(self._peer_scores)

    def wait_for_topic_peers(self, topic: str, count: int = 1, timeout: float = 10.0) -> int:
        """Wait until `count` peers are in this node's gossip mesh for `topic` (or `timeout` s).

        Returns how many there are. Gossip only reaches peers that are meshed when a message
        is published, so a node (or test) that must not lose its first messages waits here.
        """
        return self._thread.call(self._wait_for_topic_peers, topic, count, float(timeout))

    def write_raw_stream(self, peer_id: str, protocol: str, data: bytes) -> None:
        """Open a stream to `peer_id` for `protocol`, write `data` as is, and close it.

        For tests of how peers treat malformed input; a node never needs it.
        """
        target = _parse_peer_id(peer_id)
        self._thread.call(self._write_raw, target, TProtocol(protocol), bytes(data))

    def open_raw_stream(self, peer_id: str, protocol: str) -> RawStream:
        """Open a stream to `peer_id` for `protocol` and hand it over as is.

        For adversary tests (a peer that never reads, or writes what it should not);
        a node never needs it.
        """
        target = _parse_peer_id(peer_id)
        return RawStream(
            self._thread, self._thread.call(self._open_raw, target, TProtocol(protocol))
        )


def _parse_peer_id(peer_id: str) -> ID:
    try:
        return ID.from_base58(peer_id)
    except ValueError as exc:
        raise TransportError(f"not a peer ID: {peer_id!r}") from exc


def listen_failure(addr: str) -> str:
    """Why the host is not listening on `addr`: the port probed again for the cause (py-libp2p
    only logs it), e.g. a port another program took."""
    try:
        problem = listen_problem(parse_listen(addr))
    except ConfigError:
        problem = None
    if problem:
        return f"cannot listen on {addr}: {problem}"
    return f"the host is not listening on {addr}"
