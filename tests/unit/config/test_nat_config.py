"""The NAT keys (`p2p.listen`, `p2p.relays`, `p2p.relay_service`): a relay-only node with no
listen address is accepted; what cannot work is refused in one line naming the key and the
fix; what works poorly is one WARNING line; relay addresses with a DNS name are accepted,
and a bad relay address is called a relay address."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from swarm.config.load import load_with_origins
from swarm.config.nat import relay_warnings
from swarm.config.preflight import check_addresses, check_identity
from swarm.core.errors import ConfigError
from swarm.core.identity import create_identity, peer_id_of, save_identity

RELAY_ID = "12D3KooWLp6Fy6k9RjqjvRL2FaZg1x1A1uvBmUuUxsyDAzDzE7oa"
RELAY = f"/ip4/203.0.113.7/tcp/4001/p2p/{RELAY_ID}"


def load(tmp_path: Path, p2p: str):
    path = tmp_path / "node.toml"
    path.write_text(f'[node]\nrun_dir = "run"\n[p2p]\n{p2p}\n')
    return load_with_origins(path, env={})


def refused(tmp_path: Path, p2p: str) -> str:
    with pytest.raises(ConfigError) as info:
        loaded = load(tmp_path, p2p)
        check_addresses(loaded.config, loaded.where)
        check_identity(loaded.config, loaded.where)
    message = str(info.value)
    assert "\n" not in message and str(tmp_path / "node.toml") in message
    return message


def test_a_relay_only_node_with_no_listen_address_is_accepted(tmp_path, caplog):
    loaded = load(tmp_path, f'listen = ""\nrelays = ["{RELAY}"]')
    with caplog.at_level(logging.WARNING, logger="swarm.config"):
        check_addresses(loaded.config, loaded.where)
    assert loaded.config.p2p.listen == ""
    assert not caplog.records  # nothing to warn about: it is reached through its relay


def test_no_listen_address_and_no_relay_is_one_warning(tmp_path, caplog):
    loaded = load(tmp_path, 'listen = ""')
    with caplog.at_level(logging.WARNING, logger="swarm.config"):
        check_addresses(loaded.config, loaded.where)
    assert [r.levelname for r in caplog.records] == ["WARNING"]
    assert "no peer can reach it" in caplog.records[0].getMessage()
    assert "p2p.relays" in caplog.records[0].getMessage()


def test_a_relay_service_on_loopback_is_one_warning_and_on_all_interfaces_none(tmp_path):
    loopback = load(tmp_path, 'listen = "/ip4/127.0.0.1/tcp/0"\nrelay_service = true').config
    (line,) = relay_warnings(loopback)
    assert "loopback" in line and "/ip4/0.0.0.0/tcp/" in line
    public = load(tmp_path, 'listen = "/ip4/0.0.0.0/tcp/0"\nrelay_service = true').config
    assert relay_warnings(public) == []


def test_a_relay_service_that_listens_on_nothing_is_refused(tmp_path):
    message = refused(tmp_path, 'listen = ""\nrelay_service = true')
    assert "p2p.relay_service = true needs an address peers can dial" in message


def test_relays_with_the_gossip_exchange_are_refused(tmp_path):
    message = refused(tmp_path, f'exchange = "gossip"\nrelays = ["{RELAY}"]')
    assert "p2p.relays is used only by the pull exchange" in message
    assert "remove p2p.relays" in message


def test_a_relay_missing_from_the_allow_list_is_refused(tmp_path):
    other = peer_id_of(create_identity())
    message = refused(tmp_path, f'allow_list = ["{other}"]\nrelays = ["{RELAY}"]')
    assert f"p2p.relays[0] is peer {RELAY_ID}, which is not on p2p.allow_list" in message
    assert "add it to p2p.allow_list" in message


def test_the_nodes_own_id_as_its_relay_is_refused(tmp_path):
    key = create_identity()
    (tmp_path / "run").mkdir()
    save_identity(key, tmp_path / "run" / "identity.key")
    own = f"/ip4/203.0.113.7/tcp/4001/p2p/{peer_id_of(key)}"
    message = refused(tmp_path, f'relays = ["{own}"]')
    assert "p2p.relays[0] is this node itself" in message


def test_dns_relay_addresses_are_accepted(tmp_path):
    for addr in (
        f"/dns4/relay.example.org/tcp/4001/p2p/{RELAY_ID}",
        f"/dns6/relay.example.org/tcp/4001/p2p/{RELAY_ID}",
    ):
        loaded = load(tmp_path, f'relays = ["{addr}"]')
        check_addresses(loaded.config, loaded.where)


@pytest.mark.parametrize(
    "addr, words",
    [
        (f"/dns4/relay.example.org/udp/4001/p2p/{RELAY_ID}", "relay address"),
        ("/ip4/203.0.113.7/tcp/4001/p2p/12D3KooWnotanid", "relay address"),
        (f"/dnsaddr/relay.example.org/p2p/{RELAY_ID}", "relay address"),
    ],
)
def test_a_bad_relay_address_is_called_a_relay_address(tmp_path, addr, words):
    message = refused(tmp_path, f'relays = ["{addr}"]')
    assert f"p2p.relays[0]: {words}" in message
    assert "bootstrap" not in message


def test_a_relay_service_in_a_gossip_swarm_is_one_warning(tmp_path):
    config = load(
        tmp_path, 'listen = "/ip4/0.0.0.0/tcp/0"\nrelay_service = true\nexchange = "gossip"'
    )
    (line,) = relay_warnings(config.config)
    assert "gossip nodes never dial through a relay" in line
