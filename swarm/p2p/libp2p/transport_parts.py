"""`Parts`: what a `Libp2pTransport` builds on the node thread from its settings, before any
network exists, and shares between its public calls and the network thread.

Building them checks the settings' addresses and keys (each failure a `TransportError`):
nothing here touches the network yet.
"""

from __future__ import annotations

from dataclasses import dataclass

import multiaddr
from libp2p.crypto.keys import KeyPair
from libp2p.peer.id import ID
from libp2p.peer.peerinfo import PeerInfo as Libp2pPeerInfo

from swarm.core.errors import TransportError
from swarm.core.identity import peer_id_of
from swarm.p2p.libp2p import host as hosting
from swarm.p2p.libp2p.blobs import BlobServer, FetchSlots
from swarm.p2p.libp2p.network_thread import NetworkThread
from swarm.p2p.libp2p.peer_costs import PeerCosts
from swarm.p2p.libp2p.publish import Outbox
from swarm.p2p.libp2p.refusals import RefusalRecorder
from swarm.p2p.libp2p.relay import parse_relays
from swarm.p2p.libp2p.settings import TransportSettings
from swarm.p2p.libp2p.stats import Counters
from swarm.p2p.libp2p.trimming import ConnectionTrimmer
from swarm.p2p.transport import BoundedInbox

CLOSE_GRACE_S = 3.0


@dataclass
class Parts:
    """The node-thread parts of one transport, and its settings parsed."""

    settings: TransportSettings
    key_pair: KeyPair
    my_id: ID
    listen_addr: multiaddr.Multiaddr | None
    bootstrap: list[Libp2pPeerInfo]
    relays: list[Libp2pPeerInfo]
    announce: list[multiaddr.Multiaddr]
    psk: str | None
    costs: PeerCosts
    policy: hosting.AccessPolicy
    counters: Counters
    rejections: RefusalRecorder
    inbox: BoundedInbox
    blobs: BlobServer
    fetch_slots: FetchSlots  # our fetches to one peer at once, below its limit
    trimmer: ConnectionTrimmer | None
    outbox: Outbox
    thread: NetworkThread

    @property
    def peer_id(self) -> str:
        return self.my_id.to_base58()

    @property
    def relay_ids(self) -> list[ID]:
        return [r.peer_id for r in self.relays]

    def dial_target(self) -> int:
        """Connections the dialer fills up to with peers it learned: at most half the bound,
        so that the other half is left for peers dialling in."""
        max_peers = self.settings.max_peers
        if self.trimmer is None:
            return max_peers
        return min(max_peers, max(1, self.trimmer.max_connections // 2))


def build_parts(settings: TransportSettings, key_pair: KeyPair) -> Parts:
    """The parts `settings` describes, for the identity `key_pair`."""
    my_id = ID.from_pubkey(key_pair.public_key)
    costs = PeerCosts(settings.costs)
    allowed = hosting.parse_allow_list(settings.allow_list or None)
    policy = hosting.AccessPolicy(my_id, allowed, costs)
    counters = Counters()
    try:
        inbox = BoundedInbox(settings.inbox_capacity)
    except ValueError as exc:
        raise TransportError(str(exc)) from exc
    limit = settings.max_connections
    trimmer = ConnectionTrimmer(limit, counters) if limit > 0 else None
    blobs = BlobServer(policy, counters)
    if trimmer is not None:
        blobs.on_use = trimmer.touch
    peer_id = peer_id_of(key_pair)
    return Parts(
        settings=settings,
        key_pair=key_pair,
        my_id=my_id,
        listen_addr=hosting.parse_listen_addr(settings.listen_addr),
        bootstrap=[i for i in hosting.parse_bootstrap(settings.bootstrap) if i.peer_id != my_id],
        relays=[r for r in parse_relays(settings.relays) if r.peer_id != my_id],
        announce=hosting.parse_announce(settings.announce),
        psk=hosting.parse_psk(settings.psk),
        costs=costs,
        policy=policy,
        counters=counters,
        rejections=RefusalRecorder(counters),
        inbox=inbox,
        blobs=blobs,
        fetch_slots=FetchSlots(),
        trimmer=trimmer,
        outbox=Outbox(counters, float(settings.publish_wait)),
        thread=NetworkThread(
            name=f"libp2p-{peer_id[-8:]}",
            label=f"libp2p host of {peer_id}",
            grace=CLOSE_GRACE_S,
        ),
    )
