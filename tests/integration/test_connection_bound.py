"""`p2p.max_connections` is a hard bound: a node at it makes room before it dials, and
refuses inbound connections past it; its count never goes over."""

from __future__ import annotations

import pytest

from swarm.core.errors import TransportError
from swarm.p2p.libp2p import Libp2pTransport


@pytest.fixture()
def started():
    transports: list[Libp2pTransport] = []

    def start(**kwargs) -> Libp2pTransport:
        transport = Libp2pTransport(peer_exchange=False, **kwargs)
        transports.append(transport)
        transport.start()
        return transport

    yield start
    for transport in transports:
        transport.close()


@pytest.mark.timeout(90)
def test_a_node_at_its_bound_dials_by_making_room_and_never_goes_over(started):
    node = started(max_connections=2)
    peers = [started() for _ in range(5)]
    for peer in peers:
        peer.serve_blob("k", peer.peer_id.encode())
    most = 0
    for peer in peers:  # five peers, one after another, through a bound of two
        node.learn_peer(peer.peer_id, peer.listen_addrs())
        assert node.fetch_blob(peer.peer_id, "k", timeout=10) == peer.peer_id.encode()
        most = max(most, len(node.peers()))
    assert most <= 2 and node.stats().connections_trimmed >= 3
    # at the bound with connections just used, a sixth peer dialling in is refused
    node.serve_blob("mine", b"x")
    outsider = started()
    outsider.learn_peer(node.peer_id, node.listen_addrs())
    with pytest.raises(TransportError):
        outsider.fetch_blob(node.peer_id, "mine", timeout=3)
    assert len(node.peers()) <= 2
