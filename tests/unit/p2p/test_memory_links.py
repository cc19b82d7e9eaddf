"""The in-memory transport with connections: bootstrap links, dial on fetch, a bound."""

from __future__ import annotations

import pytest

from swarm.core.errors import TransportError
from swarm.p2p.memory_links import LinkedMemoryTransport
from swarm.p2p.transport import MemoryHub


def swarm(n: int, max_links: int = 64) -> list[LinkedMemoryTransport]:
    hub = MemoryHub()
    nodes = [
        LinkedMemoryTransport(f"p{i}", hub, bootstrap=["p0"], max_links=max_links) for i in range(n)
    ]
    for node in nodes:
        node.start()
    return nodes


def test_a_node_starts_linked_to_its_bootstrap_peer_and_dials_whom_it_fetches_from():
    nodes = swarm(4)
    assert [p.peer_id for p in nodes[3].peers()] == ["p0"]
    nodes[1].serve_blob("k", b"v")
    assert nodes[3].fetch_blob("p1", "k") == b"v"
    assert {p.peer_id for p in nodes[3].peers()} == {"p0", "p1"}
    assert "p3" in {p.peer_id for p in nodes[1].peers()}  # a link is both ways
    with pytest.raises(TransportError):
        nodes[3].fetch_blob("nobody", "k")


def test_links_stay_within_the_bound_least_recently_used_first():
    nodes = swarm(6, max_links=2)
    for i in (1, 2, 4):
        nodes[i].serve_blob("k", b"v")
        nodes[5].fetch_blob(f"p{i}", "k")
    assert [p.peer_id for p in nodes[5].peers()] == ["p2", "p4"]
    assert all(len(n.peers()) <= 2 for n in nodes)


def test_gossip_reaches_linked_peers_only():
    nodes = swarm(3)
    received = []
    for node in nodes:
        node.subscribe("t", lambda m, me=node.peer_id: received.append((me, m.source)) and None)
    nodes[1].publish("t", b"x")
    assert received == [("p0", "p1")]  # p1 is linked to its bootstrap peer only
