"""Budget keys are checked against what an honest peer needs: `config` refuses, in one line
with the fix, any value that would graylist, ban or starve a peer sending one connection and
one group of the largest allowed size; 0 turns every `verify.rate_*` key off."""

from __future__ import annotations

import pytest

from swarm.config import build_config
from swarm.config.validate import HONEST_PEER_COST
from swarm.core.errors import ConfigError
from swarm.verify.gate import VerifySettings
from swarm.verify.tracking import RateLimits
from swarm.wire.limits import MAX_MESSAGE_BYTES, MAX_PULLED_GROUP_BYTES


def refused(raw: dict) -> str:
    with pytest.raises(ConfigError) as info:
        build_config(raw, "t")
    message = str(info.value)
    assert "\n" not in message
    return message


def test_the_config_check_mirrors_what_the_transport_charges_an_honest_peer():
    from swarm.p2p.libp2p.peer_costs import honest_peer_cost

    assert HONEST_PEER_COST == honest_peer_cost(MAX_MESSAGE_BYTES) == 22


@pytest.mark.parametrize(
    "p2p, key",
    [
        ({"cost_graylist_at": 5, "cost_ban_at": 6}, "cost_graylist_at"),
        ({"cost_ban_at": 6}, "cost_ban_at"),
        ({"cost_graylist_at": 22, "cost_ban_at": 40}, "cost_graylist_at"),
    ],
)
def test_cost_levels_an_honest_peer_reaches_at_once_are_refused(p2p, key):
    message = refused({"p2p": p2p})
    assert f"p2p.{key}" in message and "set it above that" in message


def test_cost_levels_just_above_an_honest_peer_are_accepted():
    config = build_config({"p2p": {"cost_graylist_at": 23, "cost_ban_at": 24}}, "t")
    assert config.p2p.cost_graylist_at == 23


def test_a_byte_burst_smaller_than_the_largest_group_is_refused():
    message = refused({"verify": {"rate_bytes_burst": 1}})
    assert "verify.rate_bytes_burst (1)" in message
    assert f"at least {MAX_PULLED_GROUP_BYTES}" in message and "-1 (automatic)" in message
    gossip = refused({"p2p": {"exchange": "gossip"}, "verify": {"rate_bytes_burst": 1000}})
    assert "at least 262144" in gossip  # a gossiped group is smaller
    build_config({"verify": {"rate_bytes_burst": MAX_PULLED_GROUP_BYTES}}, "t")


@pytest.mark.parametrize("key, value", [("rate_bytes_per_s", 1.0), ("rate_groups_per_s", 1e-4)])
def test_a_refill_that_starves_every_sender_is_refused(key, value):
    message = refused({"verify": {key: value}})
    assert f"verify.{key}" in message and "or 0 (off)" in message


def test_zero_means_off_in_every_rate_key_and_minus_one_an_automatic_byte_burst():
    for key in ("rate_groups_per_s", "rate_burst", "rate_bytes_per_s", "rate_bytes_burst"):
        config = build_config({"verify": {key: 0}}, "t")
        settings = VerifySettings.from_config(config)
        if key == "rate_groups_per_s" or key == "rate_burst":
            limits = RateLimits(settings.rate_groups_per_s, settings.rate_burst)
            asked = 10**9  # groups
        else:
            limits = RateLimits(settings.rate_bytes_per_s, settings.rate_bytes_burst)
            asked = 10**12  # bytes
        assert limits.allows("peer", asked, 0.0) and limits.allows("peer", asked, 0.0), key
    default = VerifySettings.from_config(build_config({}, "t"))
    assert default.rate_bytes_burst == 8 * 2**20  # -1, the default: automatic
    on = RateLimits(default.rate_bytes_per_s, default.rate_bytes_burst)
    assert not on.allows("peer", 10**12, 0.0)


@pytest.mark.parametrize("key, value", [("rate_bytes_per_s", 1.0), ("rate_groups_per_s", 1e-4)])
def test_no_refill_starves_a_sender_when_groups_never_grow_too_old(key, value):
    # verify.max_age_s = 0: no age bound, so no slow refill makes a group stale (no hidden hour)
    config = build_config({"verify": {key: value, "max_age_s": 0.0}}, "t")
    assert getattr(config.verify, key) == value
