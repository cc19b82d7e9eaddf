"""A list is read once: an unchanged list is not checked again (its verdict is kept by the
bytes' hash), and a peer whose list offers nothing this node would pull (every group of a
version it skips as too old) is asked for it less and less often, until it offers
something. The pure parts, then two nodes over in-memory transports."""

from __future__ import annotations

import dataclasses

from lab.network_node import ExchangeKind, NetworkNode, NetworkNodeSettings, RoundCost
from swarm.core.identity import create_identity, peer_id_of
from swarm.exchange.pull import PullSettings
from swarm.exchange.pull_lists import MOST_REST, ListBackoff, ListVerdicts, Verdict
from swarm.p2p.transport import MemoryHub, MemoryTransport
from swarm.wire import ANNOUNCEMENTS_KEY
from tests.unit.exchange.builders import announcement


def test_a_verdict_is_kept_for_the_same_bytes_only():
    verdicts = ListVerdicts(capacity=2)
    verdict = Verdict((announcement("a", 1),), ())
    verdicts.put("a", "h1", verdict)
    assert verdicts.get("a", "h1") is verdict
    assert verdicts.get("a", "h2") is None  # the list changed: checked again
    assert verdicts.get("b", "h1") is None  # the same bytes from another peer: its own check
    verdicts.put("b", "h1", verdict)
    verdicts.put("c", "h1", verdict)
    assert len(verdicts) == 2 and verdicts.get("a", "h1") is None  # bounded, oldest out


def test_a_peer_whose_lists_offer_nothing_rests_longer_each_time_and_a_useful_list_clears_it():
    backoff = ListBackoff(first=1, most=8)
    asked = []
    for round_ in range(40):
        if not backoff.resting("p", round_):
            asked.append(round_)
            backoff.offered("p", False, round_)
    # the first such list rests nothing (a peer just started offers nothing yet), then
    # rests of 1, 2, 4, 8, then at most 8 rounds
    assert asked == [0, 1, 3, 6, 11, 20, 29, 38]
    backoff.offered("p", True, 40)
    assert not backoff.resting("p", 41) and backoff.resting_peers(41) == set()


def test_the_backoff_is_bounded():
    backoff = ListBackoff(capacity=3)
    for i in range(10):
        backoff.offered(f"p{i}", False, 0)
        backoff.offered(f"p{i}", False, 1)
    assert backoff.resting_peers(2) == {"p7", "p8", "p9"}


def two_nodes(groups: int, peer_version: int = 0) -> tuple[NetworkNode, NetworkNode]:
    """A node at policy version 5 (pulling at most 1 version behind) and a peer that has
    published `groups` groups of `peer_version` (0: too old for the node), once."""
    hub = MemoryHub()
    nodes = []
    for version in (5, peer_version):
        key_pair = create_identity()
        settings = NetworkNodeSettings(
            exchange=ExchangeKind.PULL,
            groups_per_round=groups,
            shared_groups=4,
            policy_version=version,
            pull=PullSettings(pull_groups=6),
        )
        nodes.append(NetworkNode(settings, MemoryTransport(peer_id_of(key_pair), hub), key_pair))
    node, peer = nodes
    for n in nodes:
        n.start()
    peer.publish_round(RoundCost(round=0))
    return node, peer


def run(node: NetworkNode, peer: NetworkNode, rounds: int) -> tuple[list[int], list[RoundCost]]:
    """The node's rounds: those in which it took the peer's list, and each round's cost."""
    asked, costs = [], []
    for _ in range(rounds):
        costs.append(node.run_round())
        fetches = peer.transport.served_blobs(ANNOUNCEMENTS_KEY)
        if any(f.peer_id == node.peer_id for f in fetches):
            asked.append(costs[-1].round)
    return asked, costs


def test_a_list_of_groups_too_old_to_pull_is_checked_once_and_asked_less_and_less():
    node, peer = two_nodes(groups=64)
    asked, costs = run(node, peer, 40)
    # rests of 0, 1, 2, 4, 8 and 16 rounds (every round before: 40 lists, 2,560 checks)
    assert asked == [0, 1, 3, 6, 11, 20, 37]
    assert sum(c.extra["cheap_checked"] for c in costs) == 64  # each announcement once
    assert sum(c.extra["lists_unchanged"] for c in costs) == len(asked) - 1
    assert sum(c.extra["pulls"] for c in costs) == 0
    assert costs[-1].extra["resting"] == 1


def test_once_its_list_offers_groups_to_pull_the_peer_is_asked_every_round_again():
    node, peer = two_nodes(groups=16)
    run(node, peer, 12)  # resting now, until round 20
    peer.settings = dataclasses.replace(peer.settings, policy_version=5)
    peer.publish_round(RoundCost(round=1))  # now groups the node would train on
    asked, costs = run(node, peer, MOST_REST + 4)
    first = asked[0]
    assert first <= 12 + MOST_REST
    # then every round while it offers groups: 2 of its 16 a round (`per_peer_cap`)
    assert asked[:8] == list(range(first, first + 8))
    assert sum(c.extra["pulls"] for c in costs) == 16
    assert sum(c.rejected for c in costs) == 0


def test_an_unchanged_list_that_still_offers_groups_is_not_checked_again():
    node, peer = two_nodes(groups=16, peer_version=5)  # groups of the node's version
    asked, costs = run(node, peer, 4)
    assert asked == [0, 1, 2, 3]  # it offers groups: asked every round
    pulled = sum(c.extra["pulls"] for c in costs)
    assert pulled == 8  # 2 a round (`per_peer_cap`), each verified
    assert sum(c.extra["lists_unchanged"] for c in costs) == 3
    # 16 announcements checked once, and each pulled group admitted
    assert sum(c.extra["cheap_checked"] for c in costs) == 16 + pulled
