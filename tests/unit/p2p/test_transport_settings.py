"""`TransportSettings`: its defaults are the config's `[p2p]` defaults, and bad values are
refused when the settings are made."""

from __future__ import annotations

import dataclasses

import pytest

from swarm.config import build_config
from swarm.core.errors import TransportError
from swarm.node import transport_settings
from swarm.p2p.libp2p import CostSettings, TransportSettings

# Settings fields the config does not set: the same on every node, or for tests and benches.
NOT_CONFIGURED = {
    "topics",
    "max_message_size",
    "inbox_capacity",
    "dial_timeout",
    "max_peers",
    "mesh_degree",
    "peer_exchange",
    "answer_peer_exchange",
    "max_blob_size",
    "publish_wait",
}


def test_every_configured_field_defaults_to_its_config_keys_default():
    from_config = transport_settings(build_config({}))
    defaults = TransportSettings()
    for field in dataclasses.fields(TransportSettings):
        assert getattr(from_config, field.name) == getattr(defaults, field.name), field.name


def test_every_field_the_config_sets_follows_its_key():
    config = build_config(
        {
            "p2p": {
                "listen": "/ip4/0.0.0.0/tcp/4001",
                "bootstrap": [
                    "/ip4/10.0.0.1/tcp/4001/p2p/12D3KooWQYhTNQdmr3ArTeUHRYzFg94BKyTkoWBDWez9kSCVe2Xo"
                ],
                "allow_list": ["12D3KooWQYhTNQdmr3ArTeUHRYzFg94BKyTkoWBDWez9kSCVe2Xo"],
                "max_connections": 16,
                "relays": [
                    "/ip4/10.0.0.2/tcp/4001/p2p/12D3KooWQYhTNQdmr3ArTeUHRYzFg94BKyTkoWBDWez9kSCVe2Xo"
                ],
                "announce": ["/ip4/203.0.113.5/tcp/4001"],
                "autonat_interval": 60.0,
                "hole_punch": False,
                "cost_rate": 50.0,
                "cost_graylist_at": 500.0,
                "cost_ban_at": 900.0,
                "cost_ban_s": 30.0,
            }
        }
    )
    settings = transport_settings(config)
    defaults = TransportSettings()
    changed = {
        f.name
        for f in dataclasses.fields(TransportSettings)
        if getattr(settings, f.name) != getattr(defaults, f.name)
    }
    configured = {f.name for f in dataclasses.fields(TransportSettings)} - NOT_CONFIGURED
    assert changed == configured - {"psk", "relay_service"}  # each needs a file or a listen port
    assert settings.costs == CostSettings(rate=50.0, graylist_at=500.0, ban_at=900.0, ban_s=30.0)
    assert settings.bootstrap == tuple(config.p2p.bootstrap)


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        ({"max_message_size": 0}, "max_message_size must be positive"),
        ({"dial_timeout": 0.0}, "dial_timeout must be positive"),
        ({"inbox_capacity": 0}, "inbox capacity must be at least 1"),
        ({"mesh_degree": 0}, "mesh_degree must be at least 1"),
        ({"autonat_interval": -1.0}, "autonat_interval must be 0"),
        ({"bootstrap": "/ip4/127.0.0.1/tcp/1"}, "bootstrap must be a list"),
    ],
)
def test_a_value_out_of_range_is_refused_when_the_settings_are_made(change, problem):
    with pytest.raises(TransportError, match=problem):
        dataclasses.replace(TransportSettings(), **change)


def test_lists_are_kept_as_tuples():
    settings = TransportSettings(topics=["a", "b"])  # type: ignore[arg-type]
    assert settings.topics == ("a", "b")
    assert dataclasses.replace(settings, mesh_degree=3).topics == ("a", "b")
