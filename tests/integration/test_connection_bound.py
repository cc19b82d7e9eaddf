"""`p2p.max_connections` holds: a node at it makes room before it dials, and peers dialling
in past it (never refused, so newcomers can join) are trimmed back to the bound."""

from __future__ import annotations

import threading
import time

import pytest

from tests.integration.transports import started_transports


@pytest.fixture()
def started():
    with started_transports(peer_exchange=False) as start:
        yield start


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
    # newcomers dialling in at once: each served, then trimmed back to the bound
    node.serve_blob("mine", b"x")
    outsiders = [started() for _ in range(8)]
    counts: list[int] = []
    watching = threading.Event()

    def watch() -> None:
        while not watching.is_set():
            counts.append(len(node.peers()))
            time.sleep(0.02)

    watcher = threading.Thread(target=watch)
    watcher.start()
    fetches, got = [], []
    for outsider in outsiders:
        outsider.learn_peer(node.peer_id, node.listen_addrs())
        fetches.append(threading.Thread(target=_fetch, args=(outsider, node.peer_id, got)))
    for fetch in fetches:
        fetch.start()
    for fetch in fetches:
        fetch.join()
    time.sleep(4.0)  # past the trimmer's grace for young connections
    watching.set()
    watcher.join()
    assert got == [b"x"] * len(outsiders)  # every newcomer was let in and served
    assert max(counts) > 2
    assert len(node.peers()) <= 2


def _fetch(transport, peer_id, got: list[bytes]) -> None:
    got.append(transport.fetch_blob(peer_id, "mine", timeout=10))
