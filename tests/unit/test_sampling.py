"""The SAPO batch choice: zero-advantage filter, staleness, per-peer cap, sizes, determinism."""

from collections import Counter

from hypothesis import given
from hypothesis import strategies as st

from swarm.sampling import Candidate, Staleness, choose_batch, is_stale

reward_groups = st.lists(
    st.lists(st.sampled_from([0.0, 0.5, 1.0]), min_size=2, max_size=6), max_size=20
)
shared_groups = st.lists(
    st.tuples(
        st.lists(st.sampled_from([0.0, 1.0]), min_size=2, max_size=4),
        st.sampled_from(["p1", "p2", "p3"]),
        st.booleans(),
        st.integers(0, 20),
        st.floats(0, 1000),
    ),
    max_size=30,
)


def _local(groups):
    return [Candidate(("L", i), tuple(r)) for i, r in enumerate(groups)]


def _shared(items):
    return [
        Candidate(("S", i), tuple(r), sender=s, same_model=m, policy_version=v, received_at=t)
        for i, (r, s, m, v, t) in enumerate(items)
    ]


def _signal(c):
    return max(c.rewards) != min(c.rewards)


@given(
    reward_groups,
    shared_groups,
    st.integers(0, 10),
    st.integers(0, 10),
    st.integers(0, 1000),
    st.none() | st.integers(1, 4),
    st.integers(0, 20),
    st.none() | st.integers(0, 10),
    st.none() | st.floats(0, 1000),
)
def test_batch_choice_properties(local, shared, i, j, seed, cap, version, gap, age):
    lc, sc = _local(local), _shared(shared)
    staleness = Staleness(max_version_gap=gap, max_age_s=age)
    now = 1000.0
    choice = choose_batch(
        lc, sc, i, j, seed, local_version=version, now=now, staleness=staleness, per_peer_cap=cap
    )
    by_id = {c.group: c for c in lc + sc}
    fresh = [c for c in sc if is_stale(c, version, now, staleness) is None]
    useful_local = [c for c in lc if _signal(c)]
    useful_shared = [c for c in fresh if _signal(c)]
    # sizes: as many as asked for, as far as useful groups (and the cap) allow
    assert len(choice.local) == min(i, len(useful_local))
    per_sender = Counter(c.sender for c in useful_shared)
    available = (
        sum(per_sender.values()) if cap is None else sum(min(cap, n) for n in per_sender.values())
    )
    assert len(choice.shared) == min(j, available)
    # zero-advantage filter and origin
    assert all(_signal(by_id[g]) for g in choice.local + choice.shared)
    assert all(g[0] == "L" for g in choice.local) and all(g[0] == "S" for g in choice.shared)
    # staleness: nothing too old or too far behind
    for g in choice.shared:
        c = by_id[g]
        assert age is None or now - c.received_at <= age
        assert gap is None or not c.same_model or version - c.policy_version <= gap
    # per-peer cap
    if cap is not None:
        assert max(Counter(by_id[g].sender for g in choice.shared).values(), default=0) <= cap
    # accounting and determinism
    assert sum(choice.dropped.values()) == len(lc) + len(sc) - len(useful_local) - len(
        useful_shared
    )
    assert choice == choose_batch(
        lc, sc, i, j, seed, local_version=version, now=now, staleness=staleness, per_peer_cap=cap
    )


def test_missing_shared_groups_are_not_replaced_by_local_ones():
    local = _local([[0, 1]] * 6)
    choice = choose_batch(local, [], 4, 4, seed=1)
    assert len(choice.local) == 4 and choice.shared == []
    assert choice.not_sampled == 2


def test_version_gap_only_applies_to_senders_of_the_same_model():
    old_same = Candidate(
        "a", (0.0, 1.0), sender="p", same_model=True, policy_version=0, received_at=10.0
    )
    old_other = Candidate(
        "b", (0.0, 1.0), sender="q", same_model=False, policy_version=0, received_at=10.0
    )
    choice = choose_batch(
        [], [old_same, old_other], 0, 4, 0, local_version=50, now=20.0, staleness=Staleness(8, 60.0)
    )
    assert choice.shared == ["b"] and choice.dropped["stale_version"] == 1
    late = choose_batch(
        [], [old_other], 0, 4, 0, local_version=50, now=100.0, staleness=Staleness(8, 60.0)
    )
    assert late.shared == [] and late.dropped["stale_age"] == 1


def test_one_peer_cannot_fill_the_batch():
    flood = [Candidate(("x", i), (0.0, 1.0), sender="spammer") for i in range(100)]
    honest = [Candidate(("h", i), (0.0, 1.0), sender=f"p{i}") for i in range(3)]
    choice = choose_batch([], flood + honest, 0, 8, seed=3, per_peer_cap=2)
    senders = Counter(g[0] for g in choice.shared)
    assert senders == {"x": 2, "h": 3}
