"""The SAPO batch choice: zero-advantage filter, staleness, per-peer cap, sizes, determinism."""

from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from swarm.batch_choice import (
    Candidate,
    DropReason,
    SignalFilter,
    Staleness,
    choose_batch,
    family_success,
    freshest_rounds,
    is_stale,
    need_weight,
)
from swarm.core.errors import ConfigError

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


def _own(groups):
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
def test_batch_choice_properties(own, shared, i, j, seed, cap, version, gap, age):
    lc, sc = _own(own), _shared(shared)
    staleness = Staleness(max_version_lag=gap, max_held_s=age)
    now = 1000.0
    choice = choose_batch(
        lc, sc, i, j, seed, local_version=version, now=now, staleness=staleness, per_peer_cap=cap
    )
    by_id = {c.group: c for c in lc + sc}
    fresh = [c for c in sc if is_stale(c, version, now, staleness) is None]
    useful_own = [c for c in lc if _signal(c)]
    useful_shared = [c for c in fresh if _signal(c)]
    # sizes: as many as asked for, as far as useful groups (and the cap) allow
    assert len(choice.own) == min(i, len(useful_own))
    per_sender = Counter(c.sender for c in useful_shared)
    available = (
        sum(per_sender.values()) if cap is None else sum(min(cap, n) for n in per_sender.values())
    )
    assert len(choice.shared) == min(j, available)
    # zero-advantage filter and origin
    assert all(_signal(by_id[g]) for g in choice.own + choice.shared)
    assert all(g[0] == "L" for g in choice.own) and all(g[0] == "S" for g in choice.shared)
    # staleness: nothing too old or too far behind
    for g in choice.shared:
        c = by_id[g]
        assert age is None or now - c.received_at <= age
        assert gap is None or not c.same_model or version - c.policy_version <= gap
    # per-peer cap
    if cap is not None:
        assert max(Counter(by_id[g].sender for g in choice.shared).values(), default=0) <= cap
    # accounting and determinism
    assert sum(choice.dropped.values()) == len(lc) + len(sc) - len(useful_own) - len(useful_shared)
    assert choice == choose_batch(
        lc, sc, i, j, seed, local_version=version, now=now, staleness=staleness, per_peer_cap=cap
    )


def test_missing_shared_groups_are_not_replaced_by_own_ones():
    own = _own([[0, 1]] * 6)
    choice = choose_batch(own, [], 4, 4, seed=1)
    assert len(choice.own) == 4 and choice.shared == []
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
    assert late.shared == [] and late.dropped["held_too_long"] == 1


def test_one_peer_cannot_fill_the_batch():
    flood = [Candidate(("x", i), (0.0, 1.0), sender="spammer") for i in range(100)]
    honest = [Candidate(("h", i), (0.0, 1.0), sender=f"p{i}") for i in range(3)]
    choice = choose_batch([], flood + honest, 0, 8, seed=3, per_peer_cap=2)
    senders = Counter(g[0] for g in choice.shared)
    assert senders == {"x": 2, "h": 3}


# -- the paper's protocol: filter on shared groups only, freshest rounds, need-based sampling --


@given(reward_groups, st.integers(0, 25), st.integers(0, 1000))
def test_shared_only_filter_keeps_every_own_group(own, i, seed):
    lc = _own(own)
    choice = choose_batch(lc, [], i, 0, seed, signal_filter=SignalFilter.SHARED)
    assert len(choice.own) == min(i, len(lc))  # zero-advantage own groups count too
    assert choice.dropped[DropReason.ZERO_ADVANTAGE] == 0
    assert len(set(choice.own)) == len(choice.own)


def test_shared_only_filter_still_drops_flat_shared_groups():
    flat = Candidate("flat", (1.0, 1.0), sender="p")
    mixed = Candidate("mixed", (0.0, 1.0), sender="p")
    own = [Candidate("own-flat", (0.0, 0.0))]
    choice = choose_batch(own, [flat, mixed], 4, 4, 0, signal_filter=SignalFilter.SHARED)
    assert choice.own == ["own-flat"] and choice.shared == ["mixed"]
    assert choice.dropped_zero_advantage == 1


rounds_of_senders = st.lists(
    st.tuples(st.sampled_from(["p1", "p2", "p3"]), st.integers(0, 8)), max_size=30
)


@given(rounds_of_senders, st.integers(1, 4))
def test_freshest_rounds_keeps_each_senders_newest_rounds(items, rounds):
    candidates = [
        Candidate((i, s, r), (0.0, 1.0), sender=s, round=r) for i, (s, r) in enumerate(items)
    ]
    kept = freshest_rounds(candidates, rounds)
    newest = {}
    for c in candidates:
        newest[c.sender] = max(newest.get(c.sender, c.round), c.round)
    assert kept == [c for c in candidates if c.round > newest[c.sender] - rounds]
    assert all(any(k.sender == s and k.round == r for k in kept) for s, r in newest.items())


def test_fresh_rounds_drops_older_rounds_and_counts_them():
    shared = [
        Candidate("p-old", (0.0, 1.0), sender="p", round=3),
        Candidate("p-new", (0.0, 1.0), sender="p", round=4),
        Candidate("q-only", (0.0, 1.0), sender="q", round=1),  # q is slower: its latest counts
    ]
    choice = choose_batch([], shared, 0, 8, 0, fresh_rounds=1)
    assert sorted(choice.shared) == ["p-new", "q-only"]
    assert choice.dropped[DropReason.OLD_ROUND] == 1
    assert sorted(choose_batch([], shared, 0, 8, 0).shared) == ["p-new", "p-old", "q-only"]


@given(
    st.lists(
        st.tuples(
            st.sampled_from(["a", "b", "c"]),
            st.lists(st.sampled_from([0.0, 0.5, 1.0]), max_size=4),
        )
    ),
)
def test_family_success_is_the_mean_reward_per_family(groups):
    success = family_success(groups)
    for family in {f for f, r in groups if r}:
        rewards = [x for f, r in groups if f == family for x in r]
        assert abs(success[family] - sum(rewards) / len(rewards)) < 1e-9
    assert set(success) == {f for f, r in groups if r}


@given(st.floats(0, 1), st.floats(0, 1), st.floats(1e-3, 1))
def test_need_weight_falls_with_success_and_stays_above_the_floor(s1, s2, floor):
    low, high = sorted((s1, s2))
    assert need_weight(low, floor) >= need_weight(high, floor) >= floor - 1e-12
    assert abs(need_weight(0.0, floor) - 1.0) < 1e-12


shared_with_families = st.lists(
    st.tuples(st.sampled_from(["p1", "p2", "p3"]), st.sampled_from(["sum", "word", "list"])),
    max_size=30,
)


@given(
    shared_with_families,
    st.integers(0, 12),
    st.integers(0, 1000),
    st.none() | st.integers(1, 4),
    st.dictionaries(st.sampled_from(["sum", "word", "list"]), st.floats(0, 1)),
)
def test_need_based_choice_keeps_sizes_caps_and_determinism(items, j, seed, cap, need):
    sc = [Candidate(("S", i), (0.0, 1.0), sender=s, family=f) for i, (s, f) in enumerate(items)]
    args = dict(per_peer_cap=cap, need=need)
    choice = choose_batch([], sc, 0, j, seed, **args)
    per_sender = Counter(c.sender for c in sc)
    available = len(sc) if cap is None else sum(min(cap, n) for n in per_sender.values())
    assert len(choice.shared) == min(j, available)
    assert len(set(choice.shared)) == len(choice.shared)
    if cap is not None:
        by_id = {c.group: c for c in sc}
        assert max(Counter(by_id[g].sender for g in choice.shared).values(), default=0) <= cap
    assert choice == choose_batch([], sc, 0, j, seed, **args)


def test_need_based_choice_prefers_the_families_the_node_fails_on():
    pool = [
        Candidate((kind, i), (0.0, 1.0), sender=f"p{i % 8}", family=family)
        for kind, family in (("known", "sum"), ("unknown", "word"))
        for i in range(200)
    ]
    need = {"sum": 0.9, "word": 0.0}  # weights 0.145 and 1: about 87 % of draws should be "word"
    drawn = Counter()
    for seed in range(200):
        drawn.update(g[0] for g in choose_batch([], pool, 0, 4, seed, need=need).shared)
    assert 0.80 < drawn["unknown"] / sum(drawn.values()) < 0.95
    uniform = Counter()
    for seed in range(200):
        uniform.update(g[0] for g in choose_batch([], pool, 0, 4, seed).shared)
    assert 0.40 < uniform["unknown"] / sum(uniform.values()) < 0.60


def test_need_floor_must_be_positive():
    with pytest.raises(ConfigError):
        choose_batch([], [Candidate("x", (0.0, 1.0))], 0, 1, 0, need={}, need_floor=0.0)
