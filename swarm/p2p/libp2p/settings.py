"""`TransportSettings`: everything `Libp2pTransport` is configured with, in one typed value.

The defaults are those of the config's `[p2p]` section for the keys it has (a unit test,
tests/unit/p2p/test_transport_settings.py, builds the settings from the default config and
compares); the rest are not configurable and serve tests and benchmarks. `swarm.node`'s
`transport_settings` maps a config onto these fields.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from swarm.core.errors import TransportError
from swarm.p2p.libp2p.blobs import DEFAULT_MAX_BLOB_SIZE
from swarm.p2p.libp2p.connections import DEFAULT_MAX_PEERS
from swarm.p2p.libp2p.gossip import DEFAULT_MESH_DEGREE, MAX_MESSAGE_SIZE
from swarm.p2p.libp2p.host import DEFAULT_DIAL_TIMEOUT, DEFAULT_LISTEN_ADDR
from swarm.p2p.libp2p.peer_costs import CostSettings
from swarm.p2p.libp2p.publish import PUBLISH_WAIT_S
from swarm.p2p.libp2p.reachability import CHECK_INTERVAL_S
from swarm.p2p.libp2p.trimming import DEFAULT_MAX_CONNECTIONS

DEFAULT_INBOX_CAPACITY = 4096


@dataclass(frozen=True)
class TransportSettings:
    """How a `Libp2pTransport` listens, whom it dials, what it accepts, and its bounds.

    Construct with keywords (or `dataclasses.replace` a default one); a value out of range
    raises `TransportError` here. Addresses and keys are parsed when the transport is built.

    Fields, with their config key where there is one:
        listen_addr (p2p.listen): "/ip4/<ip>/tcp/<port>"; port 0 picks a free port (see
            listen_addrs()). "": listen on nothing (no inbound connection, as behind NAT;
            reachable only through `relays`).
        bootstrap (p2p.bootstrap): full multiaddrs with /p2p/<peer id>; each is dialed, and
            re-dialed with backoff whenever the connection drops, forever.
        topics: topics to subscribe to at start, without a validator.
        psk (read from the file p2p.psk_file): optional private-network key (64 hex
            characters; see swarm.p2p.swarm_key). Spoken as the libp2p pnet spec says, like
            go, js and rust libp2p.
        allow_list (p2p.allow_list): peer IDs; connections from any other peer are closed.
            Empty: every peer is allowed.
        max_message_size: largest payload publish() accepts. Must be the same on every node.
        inbox_capacity: received messages kept until receive(); the oldest are dropped
            (and counted) beyond it.
        dial_timeout: bound on each dial, in seconds.
        max_peers: stop dialing peers learned by peer exchange at this many connections.
        max_connections (p2p.max_connections): beyond this many connected peers, close the
            least recently used idle ones (never a bootstrap peer's) down to three quarters
            of it (`trimming.ConnectionTrimmer`); 0: no bound.
        mesh_degree: GossipSub D (mesh peers per topic); D_lo = D*2//3, D_hi = 2*D.
        peer_exchange: ask connected peers for their peers, so a node bootstrapped from
            one peer finds the rest.
        answer_peer_exchange: answer other peers' peer-exchange requests. False makes the
            node look like a libp2p peer that does not speak our protocol (tests use it).
        max_blob_size: largest blob fetch_blob() accepts from a peer.
        publish_wait: bound, in seconds, on publish()'s wait for outbound queues to drain.
        costs (p2p.cost_rate, cost_graylist_at, cost_ban_at, cost_ban_s): each peer's cost
            budget (`peer_costs`).
        relay_service (p2p.relay_service): relay connections for peers that hold a
            reservation with us (circuit relay v2; `relay.py`).
        relays (p2p.relays): full multiaddrs of relays (with /p2p/<relay id>): the node
            keeps a reservation on each, and its circuit address through each comes first
            in listen_addrs().
        announce (p2p.announce): addresses to tell peers instead of the listened ones (a
            port forwarded on a NAT router); "/ip4/<ip>/tcp/<port>".
        autonat_interval (p2p.autonat_interval): seconds between reachability checks
            (AutoNAT, `reachability.py`: connected peers dial us back; a node they cannot
            reach hands out only its circuit addresses); 0: never check (the dial-back
            service still runs).
        hole_punch (p2p.hole_punch): move each peer that reaches us through a relay onto a
            direct connection (DCUtR, `holepunch.py`; needs a listen port). Peers' requests
            are answered either way.
    """

    listen_addr: str = DEFAULT_LISTEN_ADDR
    bootstrap: tuple[str, ...] = ()
    topics: tuple[str, ...] = ()
    psk: str | None = None
    allow_list: tuple[str, ...] = ()
    max_message_size: int = MAX_MESSAGE_SIZE
    inbox_capacity: int = DEFAULT_INBOX_CAPACITY
    dial_timeout: float = DEFAULT_DIAL_TIMEOUT
    max_peers: int = DEFAULT_MAX_PEERS
    max_connections: int = DEFAULT_MAX_CONNECTIONS
    mesh_degree: int = DEFAULT_MESH_DEGREE
    peer_exchange: bool = True
    answer_peer_exchange: bool = True
    max_blob_size: int = DEFAULT_MAX_BLOB_SIZE
    publish_wait: float = PUBLISH_WAIT_S
    costs: CostSettings = field(default_factory=CostSettings)
    relay_service: bool = False
    relays: tuple[str, ...] = ()
    announce: tuple[str, ...] = ()
    autonat_interval: float = CHECK_INTERVAL_S
    hole_punch: bool = True

    def __post_init__(self) -> None:
        for name in ("bootstrap", "topics", "allow_list", "relays", "announce"):
            value = getattr(self, name)
            if isinstance(value, str):
                raise TransportError(f"{name} must be a list of strings, not one string")
            object.__setattr__(self, name, tuple(value))
        checks = (
            (self.max_message_size > 0, "max_message_size must be positive"),
            (self.dial_timeout > 0, "dial_timeout must be positive"),
            (self.inbox_capacity > 0, "inbox capacity must be at least 1"),
            (self.mesh_degree >= 1, "mesh_degree must be at least 1"),
            (self.autonat_interval >= 0, "autonat_interval must be 0 (off) or positive"),
        )
        for ok, problem in checks:
            if not ok:
                raise TransportError(problem)
