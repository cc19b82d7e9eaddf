"""A list is read once, and a peer serving wrong bytes is banned at once: real processes on
127.0.0.1 (`lab.list_bench`: a network-only pull node and one attacker process).

Before: a peer serving 256 announcements of a version the node skips as too old had its list
fetched twice a round and every announcement checked each time (119 fetches and 15,104
checks in 60 rounds of 1 s); a peer serving other bytes for every group was banned after 50
of them, 25 rounds at 2 pulls a round (53 s with rounds of 2 s). `scripts/bench_lists.py`
measures the same at length (docs/SCALE.md).
"""

from __future__ import annotations

import pytest

from lab.list_bench import run


@pytest.mark.timeout(180)
def test_a_list_that_offers_nothing_is_checked_once_and_asked_less_and_less():
    result = run("old-lists", seconds=20, period=0.5, version=5)
    print(result)
    assert result["rounds"] >= 30
    # rests of 1, 2, 4, 8 rounds: about 6 fetches in 40 rounds (every round twice, before)
    assert 1 <= result["lists_served"] <= 10
    assert result["cheap_checked"] <= 256  # its 256 announcements, checked once at most
    assert result["lists_unchanged"] >= 2 and result["pulls"] == 0


@pytest.mark.timeout(180)
@pytest.mark.parametrize(("period", "per_peer_cap"), [(2.0, 1), (0.3, 2)])
def test_a_peer_serving_wrong_bytes_is_banned_within_15_s_however_its_pulls_are_paced(
    period, per_peer_cap
):
    result = run("wrong-bytes", seconds=40, period=period, per_peer_cap=per_peer_cap)
    print(result)
    assert result["banned_after_s"] is not None and result["banned_after_s"] <= 15
    assert 1 <= result["pulls"] <= 2 * per_peer_cap  # banned on its first wrong group
