"""The libp2p transport: `Libp2pTransport` over py-libp2p 0.8.1 (TCP + Noise + Yamux + GossipSub).

Imported only when a node really goes on the network (it pulls in trio and libp2p). Importing
it checks the installed py-libp2p version first (patches/version.py), since the transport changes
some of that version's internals. One module per concern:

- transport.py: `Libp2pTransport`, the composition of the parts below
- settings.py: `TransportSettings`, everything the transport is configured with
- transport_parts.py: what the node thread builds from the settings (policy, counters, inbox, blobs)
- runtime.py: the network thread's side: the host and the parts built on it, start to close
- calls.py: the network-thread halves of the public calls (blob fetches, raw streams)
- network_thread.py: trio in a thread of its own, and the calls into it
- host.py: the host, Noise-only security, PSK, allow-list, address parsing
- connections.py: dialing bootstrap and discovered peers, with backoff
- gossip.py: GossipSub and Pubsub tuning, validators, delivery
- send_queues.py: the outbound queues' health (back-pressure reads it) and their watchdog
- publish.py: the publish hand-off queue and back-pressure
- blobs.py: the blob stream protocol (serve and fetch)
- peer_exchange.py: the peer-exchange stream protocol
- relay.py: circuit relay v2 (relaying for others, reservations, dialling through a relay)
- framing.py: length-prefixed framing shared by our stream protocols
- stats.py: the counters
- patches/: every change to py-libp2p's internals, one module per part of py-libp2p changed

docs/LIBP2P.md lists the py-libp2p pitfalls and where each is handled.
"""

from swarm.p2p.libp2p import guard  # noqa: F401, I001 - before any libp2p import: unused parts stay unloaded
from swarm.p2p.libp2p import patches  # noqa: F401, E402 - first: checks the py-libp2p version
from swarm.p2p.libp2p.blobs import BLOB_PROTOCOL  # noqa: E402
from swarm.p2p.libp2p.gossip import (  # noqa: E402
    DEFAULT_MESH_DEGREE,
    MAX_MESSAGE_SIZE,
    Libp2pInboundMessage,
)
from swarm.p2p.libp2p.peer_costs import CostSettings  # noqa: E402
from swarm.p2p.libp2p.peer_exchange import PEER_EXCHANGE_PROTOCOL  # noqa: E402
from swarm.p2p.libp2p.send_queues import SEND_STALL_S  # noqa: E402
from swarm.p2p.libp2p.settings import TransportSettings  # noqa: E402
from swarm.p2p.libp2p.stats import Libp2pStats  # noqa: E402
from swarm.p2p.libp2p.transport import Libp2pTransport  # noqa: E402

__all__ = [
    "BLOB_PROTOCOL",
    "DEFAULT_MESH_DEGREE",
    "MAX_MESSAGE_SIZE",
    "PEER_EXCHANGE_PROTOCOL",
    "SEND_STALL_S",
    "CostSettings",
    "Libp2pInboundMessage",
    "Libp2pStats",
    "Libp2pTransport",
    "TransportSettings",
]
