"""Every change swarm-node makes to py-libp2p's own behaviour, pinned to 0.8.1, one module per
part of py-libp2p it changes.

Subclasses that override private behaviour, replaced attributes and tuned private fields
all live here; the rest of the transport uses only what py-libp2p offers as configuration.
Each piece names the failure it fixes, found on py-libp2p 0.8.1; docs/LIBP2P.md describes
each one, with its measured figures where we have them. They depend on that version's
internals, so importing this package with any other version installed raises
`Libp2pVersionError` (version.py, imported first).

- version.py: the version patched, and its check
- rpc_queues.py: the per-peer outbound RPC queues (`TunedQueues`, `coalesce`)
- gossipsub.py: `SwarmGossipSub` and `BlameScorer`
- pubsub.py: `SwarmPubsub`, and the signature check it does not repeat
- network.py: the swarm's connections and dials (`abort_peer_connections`, `dial_as_server`, ...)
- host.py: the host's observed addresses, relay stream handlers and stream-open errors
- yamux.py: `SwarmYamux`, the receive window enforced
"""

from swarm.p2p.libp2p.patches.version import PATCHED_VERSION, check_libp2p_version  # noqa: I001 - first: checks the py-libp2p version
from swarm.p2p.libp2p.patches.gossipsub import BlameScorer, SwarmGossipSub
from swarm.p2p.libp2p.patches.host import (
    guard_relay_streams,
    is_protocol_not_supported,
    keep_observed_ips,
    quiet_protocol_not_supported,
)
from swarm.p2p.libp2p.patches.network import (
    abort_peer_connections,
    dial_as_server,
    keep_dialing_in_one_place,
    lift_dial_block,
    use_spec_private_networks,
)
from swarm.p2p.libp2p.patches.pubsub import OVERSIZE_DISCARD_LIMIT, SwarmPubsub
from swarm.p2p.libp2p.patches.rpc_queues import TunedQueues, coalesce
from swarm.p2p.libp2p.patches.yamux import SwarmYamux, ignore_flow_control, use_bounded_yamux

__all__ = [
    "OVERSIZE_DISCARD_LIMIT",
    "PATCHED_VERSION",
    "BlameScorer",
    "SwarmGossipSub",
    "SwarmPubsub",
    "SwarmYamux",
    "TunedQueues",
    "abort_peer_connections",
    "check_libp2p_version",
    "coalesce",
    "dial_as_server",
    "guard_relay_streams",
    "ignore_flow_control",
    "is_protocol_not_supported",
    "keep_dialing_in_one_place",
    "keep_observed_ips",
    "lift_dial_block",
    "quiet_protocol_not_supported",
    "use_bounded_yamux",
    "use_spec_private_networks",
]
