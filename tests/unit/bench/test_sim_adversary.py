"""The simulation's adversary report (`lab.sim_conditions.Adversary`), on hand-made
rounds: what a greedy viewer is compared with when honest nodes come and go."""

from __future__ import annotations

from types import SimpleNamespace

from lab.sim_conditions import Adversary


def node(peer_id: str) -> SimpleNamespace:
    return SimpleNamespace(peer_id=peer_id, exchange=SimpleNamespace(last_asked=()))


def test_under_churn_a_greedy_viewer_is_compared_with_honest_peers_there_every_round():
    """Every honest node names every peer there once a round, the greedy viewer included:
    it gains nothing, and the report says 1.0. Counting the newcomer, there for one round
    of three, among the honest peers would have made it look asked 1.2 times as often."""
    nodes = [node(f"n{i}") for i in range(5)]
    adversary = Adversary(nodes, hostile=0.2, greedy=1, seed=0)
    (greedy,) = adversary.greedy

    def one_round():
        present = [n.peer_id for n in nodes]
        for n in nodes:
            n.exchange.last_asked = present  # hand-made: each names every peer there
        adversary.measure()

    one_round()
    one_round()
    leaving = next(i for i, n in enumerate(nodes) if n is not greedy and i > 0)
    nodes[leaving] = node("newcomer")  # churn replaces it, as `scale_sim.churn` does
    one_round()
    report = adversary.report()
    assert report["hostile_identities"] == 1
    assert report["greedy_ratio"] == 1.0, report
