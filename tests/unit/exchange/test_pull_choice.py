"""Which announcements a node pulls: by their age since created (`verify.max_age_s`), and
by version as the batch would judge them (`sharing.max_version_lag`).

How long a node has held a group (`sharing.max_held_s`) starts when it pulls the group, so
it must not filter announcements; and a 0 age bound means no bound, as everywhere else.
"""

from __future__ import annotations

import pytest

from swarm.batch_choice import Candidate, Staleness, choose_batch
from swarm.exchange.pull_choice import OwnVersion, choose_pulls
from tests.unit.exchange.builders import announcement

OFFERED = [announcement("a", 0, created_at=0.0), announcement("b", 1, created_at=900.0)]


@pytest.mark.parametrize("every_group", [False, True])
def test_announcements_older_than_max_age_are_not_pulled(every_group):
    chosen = choose_pulls(
        OFFERED, 4, seed="x", now=1000.0, max_age_s=600.0, per_peer_cap=0, every_group=every_group
    )
    assert [a.sender for a in chosen] == ["b"]


@pytest.mark.parametrize("every_group", [False, True])
def test_a_zero_max_age_pulls_any_age(every_group):
    chosen = choose_pulls(
        OFFERED, 4, seed="x", now=1000.0, max_age_s=0.0, per_peer_cap=0, every_group=every_group
    )
    assert sorted(a.sender for a in chosen) == ["a", "b"]


# This node runs model "m" at version 5; the batch skips its model's groups more than
# sharing.max_version_lag versions behind that, so pulling them would be verifying for nothing.
OWN = OwnVersion(model="m", base_hash="0", version=5)
BEHIND = [announcement("old", 10, policy_version=3), announcement("new", 11, policy_version=4)]


def chosen_senders(offered, **kwargs) -> list[str]:
    chosen = choose_pulls(offered, 99, seed="x", now=0.0, max_age_s=0.0, per_peer_cap=0, **kwargs)
    return sorted(a.sender for a in chosen)


def test_a_group_the_batch_would_skip_as_too_many_versions_behind_is_not_pulled():
    assert chosen_senders(BEHIND, own=OWN, max_version_lag=1) == ["new"]


def test_no_version_bound_pulls_any_version():
    assert chosen_senders(BEHIND, own=OWN, max_version_lag=None) == ["new", "old"]


def test_before_this_node_publishes_its_version_is_unknown_and_any_version_is_pulled():
    assert chosen_senders(BEHIND, own=None, max_version_lag=1) == ["new", "old"]


def test_another_models_versions_say_nothing_of_ours_so_they_are_pulled():
    offered = [announcement("other", 12, policy_version=0, model="another")]
    assert chosen_senders(offered, own=OWN, max_version_lag=1) == ["other"]


def test_an_observer_pulls_every_version():
    kwargs = {"own": OWN, "max_version_lag": 1, "every_group": True}
    assert chosen_senders(BEHIND, **kwargs) == ["new", "old"]


def test_the_pull_choice_skips_exactly_what_the_batch_skips():
    offered = [announcement(f"s{v}", v, policy_version=v) for v in range(8)]
    for lag in (0, 1, 3):
        batch = choose_batch(
            [],
            [
                Candidate(a, a.rewards, sender=a.sender, policy_version=a.policy_version)
                for a in offered
            ],
            0,
            len(offered),
            seed="x",
            local_version=OWN.version,
            staleness=Staleness(max_version_lag=lag, max_held_s=None),
        )
        expected = sorted(a.sender for a in batch.shared)
        assert chosen_senders(offered, own=OWN, max_version_lag=lag) == expected
        assert len(expected) == min(8, lag + 3)  # versions 5 - lag .. 7
