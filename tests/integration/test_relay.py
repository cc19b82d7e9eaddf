"""Circuit relay v2 between in-process transports on 127.0.0.1: a node that listens on
nothing (no inbound connection can reach it, as behind NAT) is fetched from through a
relay node, in an open and in a private network, and pulls from a peer; without a relay
nobody can fetch from it; it follows its relay through a restart."""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Callable, Iterator

import pytest

from swarm.core.errors import TransportError
from swarm.core.identity import create_identity
from swarm.p2p.libp2p import Libp2pTransport, TransportSettings
from swarm.p2p.libp2p.dcutr import DCUTR_PROTOCOL
from swarm.p2p.transport import Refusal, RefusalReason
from tests.integration.transports import started_transports
from tests.waiting import wait_until

BLOB_SIZE = 1024 * 1024
FETCHES = 5


@pytest.fixture
def started() -> Iterator[Callable[..., Libp2pTransport]]:
    with started_transports(peer_exchange=False, dial_timeout=3.0) as start:
        yield start


def fetch_seconds(peer: Libp2pTransport, node: Libp2pTransport, key: str, blob: bytes) -> float:
    """Seconds per fetch of `key` from `node` by an already connected `peer`, over FETCHES."""
    began = time.monotonic()
    for _ in range(FETCHES):
        assert peer.fetch_blob(node.peer_id, key, timeout=10) == blob
    return (time.monotonic() - began) / FETCHES


def learn(peer: Libp2pTransport, node: Libp2pTransport) -> None:
    """`peer` learns `node`'s addresses as the pull exchange's view hands them on."""
    peer.learn_peer(node.peer_id, [a.rsplit("/p2p/", 1)[0] for a in node.listen_addrs()])


@pytest.mark.timeout(60)
@pytest.mark.parametrize("psk", [None, "ab" * 32], ids=["open", "private"])
def test_a_node_that_listens_on_nothing_is_reached_through_a_relay(
    started: Callable[..., Libp2pTransport], psk: str | None
) -> None:
    relay = started(relay_service=True, psk=psk)
    peer = started(psk=psk)
    hidden = started(listen_addr="", relays=relay.listen_addrs(), psk=psk)
    circuit = f"{relay.listen_addrs()[0]}/p2p-circuit/p2p/{hidden.peer_id}"
    assert hidden.listen_addrs() == [circuit]  # no address of its own: only the relay's

    blob, their_blob = os.urandom(BLOB_SIZE), os.urandom(BLOB_SIZE)
    hidden.serve_blob("mine", blob)
    peer.serve_blob("theirs", their_blob)
    learn(peer, hidden)
    began = time.monotonic()
    assert peer.fetch_blob(hidden.peer_id, "mine", timeout=10) == blob  # dials the circuit
    first = time.monotonic() - began
    relayed = fetch_seconds(peer, hidden, "mine", blob)
    assert hidden.peer_id in {p.peer_id for p in peer.peers()}
    relay.serve_blob("direct", blob)  # the same blob over a direct connection, for scale
    learn(peer, relay)
    peer.fetch_blob(relay.peer_id, "direct", timeout=10)
    direct = fetch_seconds(peer, relay, "direct", blob)
    print(
        f"\n{psk and 'private' or 'open'} network, {BLOB_SIZE} B blob: first relayed fetch (with the circuit's dial) {first:.3f} s, "
        f"then {relayed:.3f} s per relayed fetch; {direct:.3f} s per direct fetch"
    )

    learn(hidden, peer)
    assert hidden.fetch_blob(peer.peer_id, "theirs", timeout=10) == their_blob


@pytest.mark.timeout(60)
def test_without_a_relay_nobody_can_fetch_from_such_a_node(
    started: Callable[..., Libp2pTransport],
) -> None:
    peer = started()
    hidden = started(listen_addr="")
    assert hidden.listen_addrs() == []
    hidden.serve_blob("mine", b"unreachable")
    learn(peer, hidden)
    with pytest.raises(TransportError):
        peer.fetch_blob(hidden.peer_id, "mine", timeout=5)
    # It can still pull: every pull is a connection it opens itself.
    peer.serve_blob("theirs", b"reachable")
    learn(hidden, peer)
    assert hidden.fetch_blob(peer.peer_id, "theirs", timeout=5) == b"reachable"


@pytest.mark.timeout(60)
def test_a_node_follows_its_relay_through_a_restart(
    started: Callable[..., Libp2pTransport],
) -> None:
    key = create_identity()
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        listen = f"/ip4/127.0.0.1/tcp/{probe.getsockname()[1]}"
    relay = started(key_pair=key, listen_addr=listen, relay_service=True)
    hidden = started(listen_addr="", relays=relay.listen_addrs())
    assert len(hidden.listen_addrs()) == 1
    relay.close()
    began = time.monotonic()
    assert wait_until(lambda: hidden.listen_addrs() == [], 15)  # it stops naming the relay
    dropped = time.monotonic() - began
    relay = started(key_pair=key, listen_addr=listen, relay_service=True)
    began = time.monotonic()
    assert wait_until(lambda: len(hidden.listen_addrs()) == 1, 15)
    back = time.monotonic() - began
    print(f"\ncircuit address dropped {dropped:.1f} s after the relay closed, back {back:.1f} s")
    hidden.serve_blob("mine", b"again")
    peer = started()
    learn(peer, hidden)
    assert peer.fetch_blob(hidden.peer_id, "mine", timeout=10) == b"again"


def test_bad_relay_addresses_raise_transport_error() -> None:
    for bad in ("/ip4/127.0.0.1/tcp/1", "/ip4/127.0.0.1/udp/1/p2p/x", "nonsense"):
        with pytest.raises(TransportError, match="relay address"):
            Libp2pTransport(TransportSettings(relays=(bad,)))


@pytest.mark.timeout(60)
def test_a_reservation_is_logged_at_info_and_a_relay_that_is_down_at_warning(
    started: Callable[..., Libp2pTransport], caplog: pytest.LogCaptureFixture
) -> None:
    relay = started(relay_service=True)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        down = f"/ip4/127.0.0.1/tcp/{probe.getsockname()[1]}/p2p/{started().peer_id}"
    with caplog.at_level(logging.INFO, logger="swarm.p2p.libp2p.relay"):
        started(listen_addr="", relays=relay.listen_addrs())
        started(listen_addr="", relays=[down])
    lines = [(r.levelname, r.getMessage()) for r in caplog.records]
    granted = [m for level, m in lines if level == "INFO" and "holds a reservation" in m]
    assert len(granted) == 1 and relay.peer_id in granted[0] and "/p2p-circuit/" in granted[0]
    warnings = [m for level, m in lines if level == "WARNING"]
    assert any(m.startswith("no reservation on relay") and down in m for m in warnings)
    assert any("no relay of 1 holds a reservation" in m for m in warnings), warnings


@pytest.mark.timeout(60)
def test_a_relay_named_by_dns_is_resolved(started: Callable[..., Libp2pTransport]) -> None:
    relay = started(relay_service=True)
    port = relay.listen_addrs()[0].split("/tcp/")[1].split("/")[0]
    hidden = started(listen_addr="", relays=[f"/dns4/localhost/tcp/{port}/p2p/{relay.peer_id}"])
    assert hidden.listen_addrs() == [
        f"/ip4/127.0.0.1/tcp/{port}/p2p/{relay.peer_id}/p2p-circuit/p2p/{hidden.peer_id}"
    ]


@pytest.mark.timeout(60)
def test_a_malformed_hole_punch_message_is_refused_and_recorded(
    started: Callable[..., Libp2pTransport],
) -> None:
    relay = started(relay_service=True)
    peer = started()
    hidden = started(listen_addr="", relays=relay.listen_addrs())
    refused: list[Refusal] = []
    hidden.set_refusal_hook(refused.append)
    hidden.serve_blob("k", b"x")
    learn(peer, hidden)
    assert peer.fetch_blob(hidden.peer_id, "k", timeout=10) == b"x"  # over the relay
    assert peer.connection_kinds(hidden.peer_id) == ["relayed"]
    peer.write_raw_stream(hidden.peer_id, DCUTR_PROTOCOL, b"\x05" + b"\xff" * 5)
    assert wait_until(
        lambda: any(r.reason == RefusalReason.BAD_HOLE_PUNCH for r in refused), timeout=10
    )
    assert hidden.stats().peer_refusals.get(RefusalReason.BAD_HOLE_PUNCH.value) == 1
    # the hidden node listens on nothing: it could not punch, and says so once
    assert wait_until(lambda: hidden.stats().hole_punches.get("no_listen_port") == 1, 10)


@pytest.mark.timeout(60)
def test_the_hole_punch_exchange_runs_over_a_relayed_connection(
    started: Callable[..., Libp2pTransport], caplog: pytest.LogCaptureFixture
) -> None:
    """Both ends speak DCUtR over the relayed connection; on one machine there is nothing to
    punch (loopback addresses are never dialled on a peer's word), so the node that was
    reached says, once, that it got no address to dial, and the pair stays on the relay.
    The punch itself, through two NATs: tests/integration/test_nat.py (needs root)."""
    relay = started(relay_service=True)
    peer = started()
    hidden = started(relays=relay.listen_addrs())  # listens on 127.0.0.1: a port to punch from
    hidden.serve_blob("k", b"x")
    peer.learn_peer(hidden.peer_id, [a.rsplit("/p2p/", 1)[0] for a in hidden.listen_addrs()[:1]])
    with caplog.at_level(logging.INFO, logger="swarm.p2p.libp2p.holepunch"):
        assert peer.fetch_blob(hidden.peer_id, "k", timeout=10) == b"x"
        assert wait_until(lambda: hidden.stats().hole_punches, 15)
    assert hidden.stats().hole_punches == {"no_addresses": 1}
    assert peer.connection_kinds(hidden.peer_id) == ["relayed"]
    (line,) = [r for r in caplog.records if r.levelname == "WARNING"]
    assert "it sent no address to dial" in line.getMessage()
    assert "stays on the relay" in line.getMessage()


@pytest.mark.timeout(60)
def test_relay_streams_are_billed_to_the_peer_that_opens_them(
    started: Callable[..., Libp2pTransport],
) -> None:
    relay = started(relay_service=True)
    peer = started()
    hidden = started(listen_addr="", relays=relay.listen_addrs())
    hidden.serve_blob("k", b"x")
    learn(peer, hidden)
    assert peer.fetch_blob(hidden.peer_id, "k", timeout=10) == b"x"
    spent = relay.peer_costs()
    # the reservation's hop stream, and the circuit's: each billed to who opened it
    assert spent[hidden.peer_id]["spent"].get("stream", 0) >= 2
    assert spent[peer.peer_id]["spent"].get("stream", 0) >= 2
    # the relay's stop stream, which brought the circuit in, billed to the relay
    assert hidden.peer_costs()[relay.peer_id]["spent"].get("stream", 0) >= 2
