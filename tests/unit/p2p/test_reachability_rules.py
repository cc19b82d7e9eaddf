"""AutoNAT's pure rules: when answers decide, and which addresses a dial-back may try."""

from __future__ import annotations

import multiaddr

from swarm.core.reasons import Reason
from swarm.p2p.libp2p.peer_scores import PENALTY
from swarm.p2p.libp2p.reachability import MAX_ADDRS, dial_back_addrs, verdict
from swarm.p2p.transport import Reachability, RefusalReason


def test_three_agreeing_answers_decide_and_a_split_decides_nothing():
    assert verdict({}) == Reachability.UNKNOWN
    assert verdict({"a": True, "b": True}) == Reachability.UNKNOWN
    assert verdict({"a": True, "b": True, "c": True}) == Reachability.PUBLIC
    assert verdict({"a": False, "b": False, "c": False}) == Reachability.PRIVATE
    assert verdict({"a": False, "b": False, "c": False, "d": True}) == Reachability.PRIVATE
    assert verdict({"a": 1, "b": 1, "c": 1, "d": 0, "e": 0, "f": 0}) == Reachability.UNKNOWN
    assert verdict({"a": False, "b": False}, needed=2) == Reachability.PRIVATE


def raw(addr: str) -> bytes:
    return multiaddr.Multiaddr(addr).to_bytes()


def test_a_dial_back_goes_only_to_tcp_addresses_at_the_ip_the_request_came_from():
    asked = [
        raw("/ip4/10.0.0.7/tcp/4001"),
        raw("/ip4/192.0.2.1/tcp/4001"),  # a third party: never dialled
        raw("/ip4/10.0.0.7/udp/4001"),
        b"\xff\xff not a multiaddr",
        raw("/ip4/10.0.0.7/tcp/4002/p2p/12D3KooWGzBkLvR1x5iq4FGxp5W6bzbcdDGxw3SEN1Sx1pmmhu4p"),
    ]
    kept = [str(a).split("/p2p/")[0] for a in dial_back_addrs(asked, "10.0.0.7")]
    assert kept == ["/ip4/10.0.0.7/tcp/4001", "/ip4/10.0.0.7/tcp/4002"]
    assert dial_back_addrs(asked, None) == []
    anywhere = dial_back_addrs([raw("/ip4/0.0.0.0/tcp/4003")], "10.0.0.7")
    assert [str(a) for a in anywhere] == ["/ip4/10.0.0.7/tcp/4003"]
    many = [raw(f"/ip4/10.0.0.7/tcp/{4000 + i}") for i in range(50)]
    assert len(dial_back_addrs(many, "10.0.0.7")) == MAX_ADDRS


def test_every_transport_refusal_has_a_penalty_and_a_ledger_code():
    assert set(PENALTY) == set(RefusalReason)
    assert all(Reason(r.value).unsigned for r in RefusalReason)
