"""The libp2p transport's pure parts: the version pin, argument parsing, access policy, peer exchange."""

from __future__ import annotations

import importlib.metadata
import json

import pytest
from libp2p.peer.id import ID

from swarm.core.errors import Libp2pVersionError, SwarmError, TransportError
from swarm.core.identity import create_identity, peer_id_of
from swarm.p2p.libp2p import host, patches, peer_exchange


def test_the_patched_version_is_the_installed_one() -> None:
    assert importlib.metadata.version("libp2p") == patches.PATCHED_VERSION == "0.8.1"
    patches.check_libp2p_version()  # does not raise


def test_another_libp2p_version_is_refused_with_a_clear_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(importlib.metadata, "version", lambda name: "0.9.0")
    with pytest.raises(Libp2pVersionError, match=r"0\.9\.0 is installed.*written for 0\.8\.1"):
        patches.check_libp2p_version()
    assert issubclass(Libp2pVersionError, SwarmError)


def test_a_missing_libp2p_is_refused_with_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    def missing(name: str) -> str:
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "version", missing)
    with pytest.raises(Libp2pVersionError, match=r"not installed.*libp2p==0\.8\.1"):
        patches.check_libp2p_version()


def test_listen_addresses_must_be_plain_tcp() -> None:
    assert str(host.parse_listen_addr("/ip6/::1/tcp/4001")) == "/ip6/::1/tcp/4001"
    for bad in ("/ip4/127.0.0.1/udp/1", "/ip4/127.0.0.1", "not an address"):
        with pytest.raises(TransportError, match="listen address"):
            host.parse_listen_addr(bad)


def test_bootstrap_addresses_of_one_peer_are_merged() -> None:
    peer = peer_id_of(create_identity())
    infos = host.parse_bootstrap(
        [f"/ip4/127.0.0.1/tcp/1/p2p/{peer}", f"/ip4/127.0.0.2/tcp/2/p2p/{peer}"]
    )
    assert len(infos) == 1 and len(infos[0].addrs) == 2
    with pytest.raises(TransportError, match="/p2p/<peer id>"):
        host.parse_bootstrap(["/ip4/127.0.0.1/tcp/1"])


def test_psk_and_allow_list_are_checked_and_canonical() -> None:
    assert host.parse_psk("AB" * 32) == "ab" * 32
    assert host.parse_psk(None) is None
    with pytest.raises(TransportError, match="64 hex"):
        host.parse_psk("ab" * 31)
    with pytest.raises(TransportError, match="allow-list"):
        host.parse_allow_list(["not-a-peer-id"])
    assert host.parse_allow_list(None) is None


def test_access_policy_admits_itself_and_listed_peers_only() -> None:
    me, listed, other = (create_identity() for _ in range(3))
    ids = [ID.from_pubkey(k.public_key) for k in (me, listed, other)]
    policy = host.AccessPolicy(ids[0], host.parse_allow_list([peer_id_of(listed)]))
    assert [policy.allows(i) for i in ids] == [True, True, False]
    assert [policy.allows_str(i.to_base58()) for i in ids] == [True, True, False]
    assert policy.peer_str(ids[2].to_bytes()) == peer_id_of(other)
    assert host.AccessPolicy(ids[0], None).allows(ids[2])


def test_peer_exchange_answers_keep_only_well_formed_tcp_entries() -> None:
    good, bad_addr = peer_id_of(create_identity()), peer_id_of(create_identity())
    payload = json.dumps(
        {
            "peers": [
                {"id": good, "addrs": ["/ip4/10.0.0.1/tcp/4001", "/ip4/10.0.0.1/udp/1"]},
                {"id": bad_addr, "addrs": ["/ip4/10.0.0.2/udp/4001"]},
                {"id": "0OIl is not base58", "addrs": ["/ip4/10.0.0.3/tcp/1"]},
                {"addrs": []},
                "not an object",
            ]
        }
    ).encode()
    found = peer_exchange.parse_px_payload(payload)
    assert [(p.to_base58(), [str(a) for a in addrs]) for p, addrs in found] == [
        (good, ["/ip4/10.0.0.1/tcp/4001"])
    ]
    assert peer_exchange.parse_px_payload(b"\xff not json") == []
    assert peer_exchange.parse_px_payload(b'{"peers": 5}') == []
