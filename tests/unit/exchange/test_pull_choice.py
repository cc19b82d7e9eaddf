"""Which announcements a node pulls: by their age since created (`verify.max_age_s`) only.

How long a node has held a group (`sharing.max_held_s`) starts when it pulls the group, so
it must not filter announcements; and a 0 age bound means no bound, as everywhere else.
"""

from __future__ import annotations

import pytest

from swarm.exchange.pull_choice import choose_pulls
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
