"""The per-peer cost budget (`swarm.p2p.libp2p.peer_costs`): leaks at its rate, graylists,
then bans for a while with the reason, and forgets a ban that has run out."""

from __future__ import annotations

import pytest

from swarm.core.errors import ConfigError
from swarm.p2p.libp2p.peer_costs import MAX_TRACKED, UNITS, Cost, CostSettings, PeerCosts, Verdict


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


SETTINGS = CostSettings(rate=100.0, graylist_at=1000.0, ban_at=2000.0, ban_s=60.0)


def test_an_honest_rate_never_adds_up() -> None:
    clock = Clock()
    costs = PeerCosts(SETTINGS, clock)
    for _ in range(10_000):  # 50 messages a second for 200 s, each in its own RPC
        clock.now += 0.02
        assert costs.charge("p", Cost.RPC) is Verdict.OK
        assert costs.charge("p", Cost.MESSAGE) is Verdict.OK
    assert costs.level("p") < 10 and not costs.graylisted("p") and not costs.banned("p")


def test_a_flood_of_refusals_is_graylisted_then_banned_with_its_reason() -> None:
    clock = Clock()
    costs = PeerCosts(SETTINGS, clock)
    verdicts = []
    for _ in range(400):  # 200 refused messages a second
        clock.now += 0.005
        costs.charge("bad", Cost.MESSAGE)
        verdicts.append(costs.charge("bad", Cost.REFUSAL))
    assert Verdict.GRAYLISTED in verdicts
    assert verdicts.count(Verdict.BANNED) == 1
    first_gray = verdicts.index(Verdict.GRAYLISTED)
    assert first_gray < verdicts.index(Verdict.BANNED)
    assert costs.banned("bad") and costs.graylisted("bad")
    ban = costs.ban("bad")
    assert ban is not None and "refusal" in ban.reason and 60.0 < ban.until < 62.0
    assert costs.bans_made == 1
    assert "bad" in costs.snapshot() and "reason" in costs.snapshot()["bad"]
    assert not costs.banned("good")
    clock.now += 61.0
    assert not costs.banned("bad") and costs.level("bad") == 0.0  # served its time


def test_a_graylisted_peer_that_stops_recovers() -> None:
    clock = Clock()
    costs = PeerCosts(SETTINGS, clock)
    costs.charge("p", Cost.REFUSAL, 120)  # 1,200 units at once
    assert costs.graylisted("p") and not costs.banned("p")
    clock.now += 3.0  # 300 units leak away
    assert not costs.graylisted("p")


def test_a_relayed_refusal_costs_the_relay_a_tenth_of_the_signers_share() -> None:
    assert UNITS[Cost.RELAYED_REFUSAL] * 10 == UNITS[Cost.REFUSAL]


def test_bans_that_ran_out_are_forgotten_when_many_pile_up() -> None:
    clock = Clock()
    costs = PeerCosts(SETTINGS, clock)
    for i in range(MAX_TRACKED):
        costs.charge(f"p{i}", Cost.REFUSAL, 300)
    assert costs.bans_made == MAX_TRACKED
    clock.now += 61.0
    costs.charge("late", Cost.REFUSAL, 300)
    assert len(costs.snapshot()) == 1 and costs.banned("late")


def test_the_budget_and_the_connection_bound_are_config_keys():
    from swarm.config import build_config
    from swarm.core.identity import create_identity
    from swarm.node import make_transport

    config = build_config(
        {
            "p2p": {
                "cost_rate": 50.0,
                "cost_graylist_at": 500.0,
                "cost_ban_at": 900.0,
                "cost_ban_s": 30.0,
                "max_connections": 16,
            }
        }
    )
    transport = make_transport(config, create_identity(b"\x01" * 32))
    try:
        assert transport.settings.costs == CostSettings(
            rate=50.0, graylist_at=500.0, ban_at=900.0, ban_s=30.0
        )
        assert transport.settings.max_connections == 16
    finally:
        transport.close()


def test_a_ban_level_under_the_graylist_level_is_one_line():
    from swarm.config import build_config

    with pytest.raises(
        ConfigError, match=r"p2p.cost_ban_at \(100\) must be above p2p.cost_graylist_at \(3000\)"
    ):
        build_config({"p2p": {"cost_ban_at": 100.0}})
