"""AutoNAT between in-process transports on 127.0.0.1: peers dial a node back on a new
connection; a node they cannot reach (it announces a port nobody listens on, as a node
behind NAT announces an address nobody outside can reach) learns that it is private and
stops handing out that address, while a reachable one learns that it is public; a
malformed request is refused and recorded."""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterator

import pytest

from swarm.p2p.libp2p import Libp2pTransport
from swarm.p2p.libp2p.reachability import AUTONAT_PROTOCOL
from swarm.p2p.transport import Reachability, Refusal, RefusalReason
from tests.integration.transports import started_transports
from tests.waiting import wait_until


@pytest.fixture
def started() -> Iterator[Callable[..., Libp2pTransport]]:
    with started_transports(peer_exchange=False, dial_timeout=3.0, autonat_interval=0) as start:
        yield start


def closed_port() -> int:
    """A port nobody listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def servers(started: Callable[..., Libp2pTransport], n: int) -> list[Libp2pTransport]:
    nodes = [started()]
    for _ in range(n - 1):
        nodes.append(started(bootstrap=nodes[0].listen_addrs()))
    return nodes


@pytest.mark.timeout(60)
def test_a_node_peers_cannot_dial_learns_it_is_private_and_stops_handing_out_its_address(
    started: Callable[..., Libp2pTransport],
) -> None:
    peers = servers(started, 3)
    bootstrap = [a for p in peers for a in p.listen_addrs()]
    hidden = started(bootstrap=bootstrap, announce=[f"/ip4/127.0.0.1/tcp/{closed_port()}"])
    open_node = started(bootstrap=bootstrap)
    for node in (hidden, open_node):
        wait_until(lambda node=node: len(node.peers()) >= 3, timeout=15)
    assert hidden.listen_addrs()  # the announced address, until a check says otherwise

    assert hidden.check_reachability() == Reachability.PRIVATE
    assert hidden.reachability() == Reachability.PRIVATE
    assert hidden.listen_addrs() == []  # no relay: nothing to hand out

    assert open_node.check_reachability() == Reachability.PUBLIC
    assert open_node.listen_addrs()
    # the hidden node still reaches its peers itself
    peers[0].serve_blob("k", b"x" * 1000)
    assert hidden.fetch_blob(peers[0].peer_id, "k", timeout=10) == b"x" * 1000


@pytest.mark.timeout(60)
def test_gossip_between_two_peers_survives_their_dial_backs(
    started: Callable[..., Libp2pTransport],
) -> None:
    """A dial-back opens and closes a second connection between the two peers; the first,
    and the gossip session on it, must outlive it."""
    first = started(topics=["t"])
    second = started(topics=["t"], bootstrap=first.listen_addrs())
    assert second.wait_for_topic_peers("t", 1, timeout=15) == 1
    assert second.check_reachability() == Reachability.UNKNOWN  # one answer decides nothing
    assert first.check_reachability() == Reachability.UNKNOWN
    got: list[bytes] = []
    for i in range(20):
        first.publish("t", b"after %d" % i)
        got += [m.data for m in second.receive(timeout=0.5)]
        if got:
            break
    assert got and got[0].startswith(b"after")
    assert first.stats().dial_backs == 1 and second.stats().dial_backs == 1
    assert first.stats().peer_refusals == {}


@pytest.mark.timeout(60)
def test_fewer_peers_than_it_takes_to_decide_leave_it_unknown(
    started: Callable[..., Libp2pTransport],
) -> None:
    first = started()
    second = started(bootstrap=first.listen_addrs())
    wait_until(lambda: second.peers(), timeout=15)
    assert second.check_reachability() == Reachability.UNKNOWN
    assert second.listen_addrs()


@pytest.mark.timeout(60)
def test_a_malformed_request_is_refused_and_recorded(
    started: Callable[..., Libp2pTransport],
) -> None:
    server = started()
    attacker = started(bootstrap=server.listen_addrs())
    refused: list[Refusal] = []
    server.set_refusal_hook(refused.append)
    wait_until(lambda: attacker.peers(), timeout=15)
    stream = attacker.open_raw_stream(server.peer_id, AUTONAT_PROTOCOL)
    stream.write(b"\x05hello")  # a five-byte "protobuf" that is not a dial request
    answer = stream.read()
    assert answer  # E_BAD_REQUEST, then the stream ends
    wait_until(
        lambda: any(r.reason == RefusalReason.BAD_AUTONAT_REQUEST for r in refused), timeout=10
    )
    assert server.stats().peer_refusals.get(RefusalReason.BAD_AUTONAT_REQUEST.value, 0) >= 1


@pytest.mark.timeout(60)
def test_a_served_blob_records_where_its_fetcher_listens(
    started: Callable[..., Libp2pTransport],
) -> None:
    """The pull exchange's view enters a fetcher with the addresses it had when it fetched,
    so a fetcher whose connection is gone by then can still be passed on and dialled."""
    server = started()
    fetcher = started(bootstrap=server.listen_addrs())
    server.serve_blob("view", b"v")
    assert fetcher.fetch_blob(server.peer_id, "view", timeout=10) == b"v"
    served: list = []
    wait_until(lambda: served.extend(server.served_blobs("view")) or served, timeout=10)
    assert [s.peer_id for s in served] == [fetcher.peer_id]
    listening = {a.rsplit("/p2p/", 1)[0] for a in fetcher.listen_addrs()}
    assert listening & set(served[0].addrs)
