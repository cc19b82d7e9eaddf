"""Peers that failed to answer are not asked again until their backoff has passed and they
are heard of anew; banned peers are neither asked nor passed on (pure and in memory)."""

from __future__ import annotations

from lab.network_node import ExchangeKind, NetworkNode, NetworkNodeSettings
from swarm.core.identity import create_identity, peer_id_of
from swarm.exchange.peer_backoff import MOST_BACKOFF, PeerBackoff
from swarm.exchange.peer_view import PeerView
from swarm.exchange.pull import PullSettings
from swarm.p2p.transport import MemoryHub, MemoryTransport, PeerInfo
from swarm.wire import ANNOUNCEMENTS_KEY


def test_a_failed_peer_waits_for_its_backoff_and_to_be_heard_of_anew():
    b = PeerBackoff(first_s=2, most_s=16)
    b.vouch("p")
    b.failed("p", now=10)
    assert b.suspended("p", 10) and not b.vouched("p")
    assert b.suspended("p", 100)  # its backoff passed, but nobody spoke of it since
    b.heard("p")
    assert b.suspended("p", 11) and not b.suspended("p", 12)
    b.failed("p", now=12)  # failed again: twice as long
    b.heard("p")
    assert b.suspended("p", 15) and not b.suspended("p", 16)
    b.answered("p")
    assert not b.suspended("p", 16) and b.vouched("p")


def test_a_peer_that_stalled_waits_the_longest_backoff_at_once():
    b = PeerBackoff()
    b.failed("p", now=0, stalled=True)
    b.heard("p")
    assert b.suspended("p", MOST_BACKOFF - 1) and not b.suspended("p", MOST_BACKOFF)


def test_the_backoff_is_bounded():
    b = PeerBackoff(capacity=8)
    for i in range(100):
        b.failed(f"p{i}", now=0)
        b.vouch(f"q{i}")
    assert b.remembered() == (8, 8)


def pull_nodes(n: int) -> list[NetworkNode]:
    hub = MemoryHub()
    keys = [create_identity(bytes([60 + i]) * 32) for i in range(n)]
    settings = NetworkNodeSettings(
        exchange=ExchangeKind.PULL,
        groups_per_round=2,
        shared_groups=2,
        pull=PullSettings(pull_lists=n, pull_groups=4),
    )
    nodes = [NetworkNode(settings, MemoryTransport(peer_id_of(k), hub), k) for k in keys]
    for node in nodes:
        node.start()
    return nodes


def test_a_banned_peers_announcements_are_not_fetched_and_it_is_not_passed_on():
    nodes = pull_nodes(4)
    node, banned = nodes[0], nodes[1]
    for member in nodes:
        member.run_round()
    fetched: list[tuple[str, str]] = []
    fetch = node.transport.fetch_blob

    def recording(peer, key, *args, **kwargs):
        fetched.append((peer, key))
        return fetch(peer, key, *args, **kwargs)

    node.transport.fetch_blob = recording  # type: ignore[method-assign]
    node.verifier.set_bans([banned.peer_id])
    asked = []
    for _ in range(3):
        for member in nodes:
            member.run_round()
        asked += node.exchange.last_asked
    assert (banned.peer_id, ANNOUNCEMENTS_KEY) not in fetched  # its list never fetched
    assert not [key for peer, key in fetched if peer == banned.peer_id]  # nor anything else
    assert {p for p, k in fetched if k == ANNOUNCEMENTS_KEY} == {nodes[2].peer_id, nodes[3].peer_id}
    assert banned.peer_id not in asked
    assert banned.peer_id not in node.exchange.view.view
    assert banned.peer_id not in {e.id for e in node.exchange.view.entries()}


class _Connected(MemoryTransport):
    """A memory transport that still lists `gone` as connected (its TCP connection stays
    open after its machine went to sleep)."""

    def __init__(self, peer_id: str, hub: MemoryHub, gone: str):
        super().__init__(peer_id, hub)
        self.gone = gone

    def peers(self) -> list[PeerInfo]:
        return [PeerInfo(self.gone, ("/ip4/127.0.0.1/tcp/9",))]


def test_an_open_connection_is_not_news_of_a_peer_that_failed_to_answer():
    """A node whose view ran empty takes its connected peers back, but not one suspended:
    a vanished peer's connection stays open, so it would be asked (and waited on) again as
    soon as its backoff passed, and again after each longer backoff."""
    gone = peer_id_of(create_identity(bytes([90]) * 32))
    transport = _Connected(peer_id_of(create_identity(bytes([91]) * 32)), MemoryHub(), gone)
    view = PeerView(transport, transport.peer_id)
    view.plan()
    assert view.peers() == [gone]  # taken from the connections, as a bootstrap peer
    view.forget(gone, slow=True)  # its list fetch timed out
    for _ in range(4 * MOST_BACKOFF):  # every round with an empty view
        view.plan()
        assert gone not in view.peers()
    assert view.backoff.suspended(gone, view.refreshes)
