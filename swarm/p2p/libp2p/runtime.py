"""`HostRuntime`: the network thread's side of a `Libp2pTransport`.

It builds the parts that need the libp2p host (gossip, dialer, peer exchange, relaying,
AutoNAT, hole punching) once the thread runs, wires them to each other and to the node-thread
`Parts`, serves until the transport closes, and then lets published messages leave and closes
every connection.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

import trio
from libp2p.abc import IHost
from libp2p.peer.id import ID

from swarm.core.errors import ConfigError, TransportError
from swarm.p2p.addresses import listen_problem, parse_listen
from swarm.p2p.libp2p import host as hosting
from swarm.p2p.libp2p.connections import Dialer
from swarm.p2p.libp2p.dcutr import ObservedIps
from swarm.p2p.libp2p.gossip import Gossip
from swarm.p2p.libp2p.holepunch import HolePunching
from swarm.p2p.libp2p.patches import abort_peer_connections, keep_observed_ips
from swarm.p2p.libp2p.peer_costs import Cost
from swarm.p2p.libp2p.peer_exchange import PeerExchange
from swarm.p2p.libp2p.reachability import CHECK_INTERVAL_S, FIRST_CHECK_S, AutoNat
from swarm.p2p.libp2p.relay import Relaying
from swarm.p2p.libp2p.transport_parts import CLOSE_GRACE_S, Parts
from swarm.p2p.transport import RefusalReason

logger = logging.getLogger(__name__)


@dataclass
class Network:
    """The parts that live on the network thread, built there once the host exists."""

    host: IHost
    gossip: Gossip
    dialer: Dialer
    peer_exchange: PeerExchange
    relaying: Relaying
    autonat: AutoNat
    holepunch: HolePunching
    busy: Callable[[ID], bool]  # a connection not to close: a fetch running, or a relay's


class HostRuntime:
    """Runs one transport's host on its network thread (`run`), and holds what it built."""

    def __init__(self, parts: Parts) -> None:
        self._parts = parts
        self.listen_addrs: list[str] = []  # set once the host listens
        self.net: Network | None = None  # set on the network thread while it runs
        self._nursery: trio.Nursery | None = None  # the network thread's, once it serves

    def running(self) -> Network:
        """The network parts; `TransportError` before the transport has started."""
        if self.net is None:
            raise TransportError("the transport is not started")
        return self.net

    async def run(self) -> None:
        """Serve until the transport closes (the network thread's main)."""
        try:
            await self._serve()
        finally:
            self._parts.outbox.close()  # however the host ends, a publish waiting ends too

    async def _serve(self) -> None:
        parts = self._parts
        net = self.net = self._build_network()
        # Pubsub and GossipSub run before the host listens: an inbound pubsub stream that
        # arrives before Pubsub's service manager exists kills the host.
        async with net.gossip.running():
            for topic in dict.fromkeys(parts.settings.topics):
                await net.gossip.subscribe(topic, None)
            listen = [parts.listen_addr] if parts.listen_addr is not None else []
            async with net.host.run(listen), trio.open_nursery() as nursery:
                self._set_listen_addrs(net.host, bool(listen))
                # Relays first: listen_addrs() names the circuits of those that said yes.
                await nursery.start(net.relaying.run)
                self._start_background_tasks(net, nursery)
                parts.thread.mark_ready()
                await parts.thread.wait_for_stop()
                # Let what was already published leave before the connections close.
                await parts.outbox.flush(net.gossip, CLOSE_GRACE_S / 2)
                await self._close_connections(net)
                nursery.cancel_scope.cancel()

    def _set_listen_addrs(self, host: IHost, listening: bool) -> None:
        peer_id = self._parts.peer_id
        self.listen_addrs = [f"{addr}/p2p/{peer_id}" for addr in host.get_transport_addrs()]
        if listening and not self.listen_addrs:
            raise TransportError(listen_failure(str(self._parts.listen_addr)))
        if self._parts.announce:
            self.listen_addrs = [f"{a}/p2p/{peer_id}" for a in self._parts.announce]

    def _build_network(self) -> Network:
        parts, settings = self._parts, self._parts.settings
        host = hosting.build_host(
            parts.key_pair,
            parts.listen_addr,
            parts.psk,
            settings.dial_timeout,
            self._on_flow_violation,
        )
        relaying = Relaying(
            host,
            service=settings.relay_service,
            relays=parts.relays,
            psk=parts.psk,
            dial_timeout=settings.dial_timeout,
            admit=self._admit_relay_stream,
        )

        def busy(peer_id: ID) -> bool:
            return parts.blobs.busy(peer_id) or relaying.keeps(peer_id)

        autonat = self._autonat(host)
        observed = ObservedIps()
        keep_observed_ips(host, observed)
        holepunch = HolePunching(
            host,
            parts.policy,
            parts.counters,
            observed,
            relays=parts.relay_ids,
            announce=[str(a) for a in parts.announce],
            enabled=settings.hole_punch,
        )
        # Pubsub registers its stream handlers and connection notifee first, as it always has.
        gossip = Gossip(
            host,
            parts.policy,
            parts.counters,
            parts.inbox,
            parts.rejections,
            mesh_degree=settings.mesh_degree,
            max_message_size=settings.max_message_size,
        )
        dialer = Dialer(
            host,
            parts.policy,
            parts.counters,
            dial_timeout=settings.dial_timeout,
            max_peers=parts.dial_target(),
            trimmer=parts.trimmer,
            busy=busy,
        )
        gossip.gossipsub.learn_peer = dialer.learn  # PRUNE peer exchange, from well-scored peers
        peer_exchange = PeerExchange(host, parts.policy, dialer, parts.counters)
        net = Network(host, gossip, dialer, peer_exchange, relaying, autonat, holepunch, busy)
        self._register_handlers(net)
        return net

    def _autonat(self, host: IHost) -> AutoNat:
        parts = self._parts
        interval = parts.settings.autonat_interval
        relay_ids = parts.relay_ids
        return AutoNat(
            host,
            parts.policy,
            parts.counters,
            own_addrs=lambda: list(self.listen_addrs),
            excluded=lambda p: p in relay_ids,
            dial_timeout=parts.settings.dial_timeout,
            interval=interval or CHECK_INTERVAL_S,
            first_check=min(FIRST_CHECK_S, interval or FIRST_CHECK_S),
        )

    def _register_handlers(self, net: Network) -> None:
        policy = self._parts.policy
        self._parts.blobs.register(net.host, net.gossip.refuse)
        net.autonat.register(net.gossip.refuse)
        net.holepunch.register(net.gossip.refuse)
        if self._parts.settings.answer_peer_exchange:
            net.peer_exchange.register()
        # Every connection is checked (allow-list, cost bans) and billed to its peer.
        notifee = hosting.AllowListNotifee(
            policy.allows,
            self._count_refused,
            lambda p: policy.charge(p, Cost.CONNECTION),
        )
        net.host.get_network().register_notifee(notifee)

    async def _close_connections(self, net: Network) -> None:
        """Close every connection (the host's own shutdown leaves their sockets open, and a
        peer would keep waiting on us until its timeouts): side by side, within a second."""
        network = net.host.get_network()
        with trio.move_on_after(CLOSE_GRACE_S / 3):
            async with trio.open_nursery() as closing:
                for peer_id in hosting.connected_peers(net.host):
                    closing.start_soon(abort_peer_connections, network, peer_id)

    def _start_background_tasks(self, net: Network, nursery: trio.Nursery) -> None:
        settings = self._parts.settings
        self._nursery = nursery
        net.dialer.add_bootstrap(self._parts.bootstrap)
        nursery.start_soon(net.dialer.maintain, nursery)
        self._parts.outbox.start(nursery, net.gossip)
        nursery.start_soon(net.gossip.queues.watch_send_queues, nursery)
        if settings.peer_exchange:
            nursery.start_soon(net.peer_exchange.run)
        if settings.autonat_interval > 0:
            nursery.start_soon(net.autonat.run)
        nursery.start_soon(net.holepunch.run)

    def _admit_relay_stream(self, peer_id: ID) -> bool:
        """A circuit relay stream a peer opened (a reservation, a circuit): billed to it, and
        refused from a peer off the allow-list or banned."""
        self._parts.policy.charge(peer_id, Cost.STREAM)
        return self._parts.policy.allows(peer_id)

    def _on_flow_violation(self, peer_id: ID) -> None:
        """A peer wrote past a stream's receive window: count, record, penalise, disconnect."""
        net = self.net
        with self._parts.counters.locked() as stats:
            stats.flow_control_violations += 1
        if net is None:
            return
        net.gossip.refuse(peer_id, RefusalReason.FLOW_CONTROL, "wrote past the receive window")
        if self._nursery is not None:
            self._nursery.start_soon(abort_peer_connections, net.host.get_network(), peer_id)

    def _count_refused(self, peer_id: ID) -> None:
        logger.info("closing connection from %s: not on the allow-list, or banned", peer_id)
        with self._parts.counters.locked() as stats:
            stats.refused_peers += 1


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
