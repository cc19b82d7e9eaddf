"""Hole punching's pure parts (`swarm.p2p.libp2p.dcutr`): DCUtR messages, which addresses of
a peer's CONNECT are dialled, which of ours are sent, and the outside IPs peers saw."""

from __future__ import annotations

from types import SimpleNamespace

import multiaddr
import pytest
from libp2p.peer.id import ID
from libp2p.relay.circuit_v2.pb.dcutr_pb2 import HolePunch

from swarm.core.identity import create_identity
from swarm.p2p.libp2p.dcutr import (
    MAX_ADDRS,
    MAX_MESSAGE,
    ExchangeBudget,
    ObservedIps,
    dialable,
    leads,
    message,
    predicted,
)
from swarm.p2p.libp2p.framing import StreamProtocolError
from swarm.p2p.libp2p.holepunch import Outcome


def raw(*addrs: str) -> list[bytes]:
    return [multiaddr.Multiaddr(a).to_bytes() for a in addrs]


def a_peer() -> ID:
    return ID.from_pubkey(create_identity().public_key)


def test_a_connect_message_round_trips_and_fits_the_spec_bound():
    addrs = [multiaddr.Multiaddr(f"/ip4/10.0.0.{i}/tcp/4001") for i in range(MAX_ADDRS)]
    data = message(HolePunch.CONNECT, addrs)
    assert data[0] == len(data) - 1 < MAX_MESSAGE  # one varint byte, then the message
    parsed = HolePunch()
    parsed.ParseFromString(data[1:])
    assert parsed.type == HolePunch.CONNECT
    assert dialable(list(parsed.ObsAddrs)) == addrs


def test_only_direct_tcp_addresses_elsewhere_are_dialled():
    relay = a_peer().to_base58()
    got = dialable(
        raw(
            "/ip4/10.77.0.2/tcp/4001",
            f"/ip4/10.77.0.3/tcp/4001/p2p/{relay}",  # a /p2p/ suffix is dropped
            f"/ip4/10.77.0.9/tcp/4001/p2p/{relay}/p2p-circuit",  # a relay: no punch there
            "/ip4/0.0.0.0/tcp/4001",  # "all interfaces" is nowhere
            "/ip4/127.0.0.1/tcp/22",  # this machine's own services
            "/ip4/224.0.0.1/tcp/4001",
            "/ip4/10.77.0.4/udp/4001/quic-v1",  # another transport's
            "/ip4/10.77.0.2/tcp/4001",  # a repeat
        )
    )
    assert [str(a) for a in got] == ["/ip4/10.77.0.2/tcp/4001", "/ip4/10.77.0.3/tcp/4001"]
    many = dialable(raw(*(f"/ip4/10.0.1.{i}/tcp/1" for i in range(40))))
    assert len(many) == MAX_ADDRS


def test_bytes_that_are_no_address_are_a_protocol_error():
    with pytest.raises(StreamProtocolError, match="not an address"):
        dialable([b"\xff\xff\xff"])


def test_what_we_send_is_each_outside_ip_at_our_listen_port():
    assert [str(a) for a in predicted(["198.51.100.4"], ("0.0.0.0", 4001), [])] == [
        "/ip4/198.51.100.4/tcp/4001"
    ]
    # nobody told us our outside IP, and we listen on all interfaces: nothing to send
    assert predicted([], ("0.0.0.0", 4001), []) == []
    # no listen port: nothing to dial us at (only announced addresses)
    assert [str(a) for a in predicted(["198.51.100.4"], None, ["/ip4/198.51.100.4/tcp/9"])] == [
        "/ip4/198.51.100.4/tcp/9"
    ]
    # a specific listen IP (a public one, say) is sent too; a loopback one is not
    assert len(predicted(["198.51.100.4"], ("198.51.100.4", 4001), [])) == 1
    assert [str(a) for a in predicted([], ("203.0.113.5", 4001), [])] == [
        "/ip4/203.0.113.5/tcp/4001"
    ]
    assert predicted([], ("127.0.0.1", 4001), []) == []


def test_observed_ips_are_kept_per_observer_and_never_advertised():
    observed = ObservedIps()
    relay, stranger = a_peer(), a_peer()
    for peer, ip in ((relay, "198.51.100.4"), (stranger, "192.0.2.66")):
        conn = SimpleNamespace(muxed_conn=SimpleNamespace(peer_id=peer))
        observed.record_observation(conn, multiaddr.Multiaddr(f"/ip4/{ip}/tcp/50123"), [])
    observed.record_observation(
        SimpleNamespace(muxed_conn=SimpleNamespace(peer_id=relay)), "garbage", []
    )  # ignored, not raised
    assert observed.ips([relay]) == ["198.51.100.4"]  # only the observers we trust
    assert observed.ips([]) == []
    assert observed.addrs() == [] and observed.addrs(min_observers=1) == []


def test_outcomes_are_stable_names():
    assert {o.value for o in Outcome} == {
        "direct",
        "unilateral",
        "no_listen_port",
        "no_addresses",
        "failed",
        "already_direct",
        "yielded",
    }


def test_a_peer_may_start_a_few_exchanges_a_minute():
    budget, peer = ExchangeBudget(4), a_peer()
    assert [budget.allow(peer, 1000.0 + i) for i in range(5)] == [True] * 4 + [False]
    assert budget.allow(a_peer(), 1005.0)  # another peer has its own allowance
    assert not budget.allow(peer, 1059.0)
    assert budget.allow(peer, 1061.0)  # the first of the four is a minute old


def test_when_both_ends_punch_at_once_exactly_one_leads():
    one, other = a_peer(), a_peer()
    assert leads(one, other) != leads(other, one)
    low = min(one, other, key=lambda p: p.to_bytes())
    assert leads(low, other if low == one else one)
