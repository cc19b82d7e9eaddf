"""The connection bound: the least recently used idle connections go first, down to 3/4."""

from __future__ import annotations

from libp2p.peer.id import ID

from swarm.p2p.libp2p.stats import Counters
from swarm.p2p.libp2p.trimming import ConnectionTrimmer


def peers(n: int) -> list[ID]:
    return [ID(bytes([i]) * 8) for i in range(n)]


def test_under_the_bound_nothing_is_closed():
    trimmer = ConnectionTrimmer(8, Counters(), idle_s=0.0)
    assert trimmer.victims(peers(7), set(), lambda p: False, now=100.0) == []


def test_at_the_bound_idle_peers_go_so_that_inbound_connections_find_room():
    trimmer = ConnectionTrimmer(8, Counters(), idle_s=0.0)  # the host refuses a ninth
    assert len(trimmer.victims(peers(8), set(), lambda p: False, now=100.0)) == 2


def test_a_dial_at_the_bound_makes_room_by_the_least_recently_used_free_peer():
    trimmer = ConnectionTrimmer(3, Counters())
    ps = peers(3)
    for i, p in enumerate(ps):
        trimmer.touch(p, now=float(i))
    assert trimmer.room_victim(ps, lambda p: False) == ps[0]
    assert trimmer.room_victim(ps, {ps[0]}.__contains__) == ps[1]  # a fetch running: kept
    assert trimmer.room_victim(ps, lambda p: True) is None


def test_over_the_bound_the_least_recently_used_idle_peers_go_down_to_three_quarters():
    trimmer = ConnectionTrimmer(8, Counters(), idle_s=10.0)
    ps = peers(12)
    for i, p in enumerate(ps):
        trimmer.touch(p, now=float(i))
    protected = {ps[0]}  # a bootstrap peer
    busy = {ps[1]}  # a fetch running
    victims = trimmer.victims(ps, protected, busy.__contains__, now=15.0)
    # 12 connected, target 6: six go, oldest first, skipping the protected, busy and recent
    assert victims == ps[2:6]  # ps[6..] were used within 10 s: only four idle ones exist


def test_peers_that_left_are_forgotten():
    trimmer = ConnectionTrimmer(3, Counters(), idle_s=0.0)
    ps = peers(3)
    trimmer.victims(ps, set(), lambda p: False, now=0.0)
    trimmer.victims(ps[:1], set(), lambda p: False, now=1.0)
    assert trimmer.victims(ps[:1] + peers(4)[3:], set(), lambda p: False, now=2.0) == []


def test_the_bound_is_hard_even_when_every_connection_was_used_recently():
    trimmer = ConnectionTrimmer(8, Counters(), idle_s=10.0)
    ps = peers(12)
    for i, p in enumerate(ps):
        trimmer.touch(p, now=100.0 + i)  # all within the last 10 s
    busy = {ps[0]}
    victims = trimmer.victims(ps, set(), busy.__contains__, now=112.0)
    assert victims == ps[1:5]  # the least recently used, never a fetch running: 12 - 4 = 8
    # connections opened or used in the last 2 s have time to start their fetch
    assert trimmer.victims(ps, set(), busy.__contains__, now=103.5) == ps[1:2]


def test_a_bootstrap_peer_is_special_only_until_the_node_knows_others():
    from swarm.p2p.libp2p.trimming import SETTLED_PEERS, bootstrap_kept

    ps = peers(SETTLED_PEERS + 2)
    boot = {ps[0]}
    assert bootstrap_kept(ps[:SETTLED_PEERS], boot)  # the bootstrap peer and too few others
    assert not bootstrap_kept(ps[: SETTLED_PEERS + 1], boot)
    trimmer = ConnectionTrimmer(2, Counters(), idle_s=0.0)
    settled = trimmer.victims(ps, set(), lambda p: False, now=1.0)
    assert ps[0] in settled  # no longer protected: trimmed like any idle peer
