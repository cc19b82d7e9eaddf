"""How long a pull node serves its groups: `keep_rounds` rounds, and over libp2p at least
`linger_s` after its list stopped naming them (peers pull from lists fetched a moment ago)."""

from __future__ import annotations

import pytest

from swarm.core.errors import TransportError
from swarm.core.identity import create_identity
from swarm.exchange.pull_serve import PullServer
from swarm.exchange.pull_settings import PullCounters, PullSettings
from swarm.p2p.transport import MemoryHub, MemoryTransport
from swarm.wire import group_key

ROUND_S = 0.125  # a node with short rounds: a list is 2 rounds, 0.25 s


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def server_and_peer(linger_s: float, clock: Clock) -> tuple[PullServer, MemoryTransport]:
    hub = MemoryHub()
    own, peer = MemoryTransport("own", hub), MemoryTransport("peer", hub)
    own.start()
    peer.start()
    server = PullServer(
        own,
        create_identity(),
        "own",
        PullSettings(),  # announced 2 rounds, served 3
        PullCounters(),
        linger_s=linger_s,
        monotonic=clock,
    )
    server.start()
    return server, peer


def run_rounds(server: PullServer, clock: Clock, first: int, last: int) -> None:
    """Rounds `first`..`last` of `ROUND_S` each, every one serving a group of its own."""
    for r in range(first, last + 1):
        clock.now = r * ROUND_S
        server.publish([], r)
        server.serve(group_key(f"{r:064x}"), b"group %d" % r, r)


def test_a_group_stays_served_while_a_list_that_named_it_may_still_be_pulled_from():
    clock = Clock()
    server, peer = server_and_peer(linger_s=5.5, clock=clock)
    run_rounds(server, clock, 0, 3)  # round 0's group left the list at round 2 (0.125 s ago)
    # a peer that read the list of round 1 (0.25 s ago: fresh) pulls round 0's group
    assert peer.fetch_blob("own", group_key(f"{0:064x}")) == b"group 0"
    run_rounds(server, clock, 4, 45)  # 5.375 s after round 2: still within linger_s
    assert peer.fetch_blob("own", group_key(f"{0:064x}")) == b"group 0"
    run_rounds(server, clock, 46, 46)  # 5.5 s: no list a peer may use names it
    with pytest.raises(TransportError):
        peer.fetch_blob("own", group_key(f"{0:064x}"))
    # served: the groups of the last linger_s and of the 2 rounds still listed, no more
    served = []
    for r in range(47):
        try:
            served.append(peer.fetch_blob("own", group_key(f"{r:064x}")) == b"group %d" % r)
        except TransportError:
            served.append(False)
    assert served == [False] + [True] * 46


def test_without_linger_a_group_is_served_keep_rounds_rounds():
    clock = Clock()
    server, peer = server_and_peer(linger_s=0.0, clock=clock)
    run_rounds(server, clock, 0, 2)
    assert peer.fetch_blob("own", group_key(f"{0:064x}")) == b"group 0"
    run_rounds(server, clock, 3, 3)
    with pytest.raises(TransportError):
        peer.fetch_blob("own", group_key(f"{0:064x}"))
    assert peer.fetch_blob("own", group_key(f"{1:064x}")) == b"group 1"
