"""A fetch that waited for one of this node's own slots to a peer is told apart from a
peer that took the fetch and never answered: only the second counts against the peer.

Over real libp2p on 127.0.0.1: the peer is a TCP listener that accepts and never speaks,
so every fetch that gets a slot hangs; the transport holds 4 fetches to one peer at once
(half what a server accepts), so of 6 fetches at once 4 wait for a slot their whole time
(or take one in the last instant, when the peer has no time left to answer).
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from swarm.core.errors import FetchTooSlow, NoFetchSlot
from swarm.core.identity import create_identity, peer_id_of
from swarm.exchange.pull_fetch import Fetcher, Request
from tests.integration.transports import started_transports

TIMEOUT_S = 2.5


@pytest.fixture
def silent_peer() -> Iterator[tuple[str, str]]:
    """A peer ID and an address that accepts connections and never says a word."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    held: list[socket.socket] = []

    def accept() -> None:
        while True:
            try:
                held.append(server.accept()[0])
            except OSError:
                return

    threading.Thread(target=accept, daemon=True).start()
    try:
        peer = peer_id_of(create_identity(bytes(32)))
        yield peer, f"/ip4/127.0.0.1/tcp/{server.getsockname()[1]}"
    finally:
        server.close()
        for conn in held:
            conn.close()


def test_a_fetch_that_waited_for_its_own_slot_is_not_blamed_on_the_peer(silent_peer) -> None:
    peer, addr = silent_peer
    with started_transports() as start:
        transport = start()
        transport.learn_peer(peer, [addr])

        def one(i: int) -> Exception | None:
            try:
                transport.fetch_blob(peer, f"pull/group/{i}", TIMEOUT_S)
            except FetchTooSlow as e:
                return e
            return None

        started = time.monotonic()
        with ThreadPoolExecutor(6) as pool:
            errors = list(pool.map(one, range(6)))
        elapsed = time.monotonic() - started
    waited = [e for e in errors if isinstance(e, NoFetchSlot)]
    unanswered = [e for e in errors if e is not None and not isinstance(e, NoFetchSlot)]
    assert len(waited) == 4 and len(unanswered) == 2, errors
    assert all("did not answer" in str(e) for e in unanswered)
    assert elapsed < TIMEOUT_S + 2.0


def test_the_fetcher_counts_only_unanswered_fetches_as_stalls(silent_peer) -> None:
    peer, addr = silent_peer
    with started_transports() as start:
        transport = start()
        transport.learn_peer(peer, [addr])
        fetcher = Fetcher(transport, parallel=8, fetch_timeout_s=TIMEOUT_S)
        fetcher.per_peer = 6  # more than the transport's slots: four wait on this node
        requests = [Request(peer, f"pull/group/{i}", 1024) for i in range(6)]
        try:
            outcomes = fetcher.fetch_all(requests, time.monotonic() + TIMEOUT_S + 1.0)
        finally:
            fetcher.close()
    stalled = [o for o in outcomes if o.stalled]
    waited = [o for o in outcomes if isinstance(o.error, NoFetchSlot)]
    assert len(stalled) == 2 and len(waited) == 4
    assert not any(o.stalled for o in waited)
