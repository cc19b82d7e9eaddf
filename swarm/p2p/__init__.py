"""Peer-to-peer transport: the `Transport` interface and its implementations.

`transport.py` holds the interface and the in-memory implementation used by tests and by
single-process experiments (`transport_types.py` the values that cross the interface,
`transport_shared.py` what implementations share); the libp2p implementation is the package `libp2p/`, imported
only when a node really goes on the network (it pulls in trio and libp2p).
"""

from swarm.p2p.transport import (
    BlobServed,
    InboundMessage,
    MemoryHub,
    MemoryTransport,
    PeerInfo,
    Refusal,
    RefusalHook,
    RefusalReason,
    Transport,
    TransportStats,
    Validator,
)

__all__ = [
    "BlobServed",
    "InboundMessage",
    "MemoryHub",
    "MemoryTransport",
    "PeerInfo",
    "Refusal",
    "RefusalReason",
    "RefusalHook",
    "Transport",
    "TransportStats",
    "Validator",
]
