"""The SAPO batch choice: zero-advantage filter, sizes, determinism."""

from hypothesis import given
from hypothesis import strategies as st

from swarm.sampling import Candidate, choose_batch

reward_groups = st.lists(st.lists(st.sampled_from([0.0, 0.5, 1.0]), min_size=2, max_size=6), max_size=20)


def _candidates(groups, tag):
    return [Candidate((tag, i), tuple(r)) for i, r in enumerate(groups)]


@given(reward_groups, reward_groups, st.integers(0, 10), st.integers(0, 10), st.integers(0, 1000))
def test_choice_respects_sizes_and_drops_flat_groups(local, shared, i, j, seed):
    lc, sc = _candidates(local, "L"), _candidates(shared, "S")
    choice = choose_batch(lc, sc, i, j, seed)
    useful_l = [c for c in lc if max(c.rewards) != min(c.rewards)]
    useful_s = [c for c in sc if max(c.rewards) != min(c.rewards)]
    assert len(choice.local) == min(i, len(useful_l))
    assert len(choice.shared) == min(j, len(useful_s))
    rewards = {c.group: c.rewards for c in lc + sc}
    assert all(max(rewards[g]) != min(rewards[g]) for g in choice.local + choice.shared)
    assert all(g[0] == "L" for g in choice.local) and all(g[0] == "S" for g in choice.shared)
    assert choice.dropped_zero_advantage == len(lc) + len(sc) - len(useful_l) - len(useful_s)
    assert choice == choose_batch(lc, sc, i, j, seed)  # deterministic under a seed


def test_missing_shared_groups_are_not_replaced_by_local_ones():
    local = _candidates([[0, 1]] * 6, "L")
    choice = choose_batch(local, [], 4, 4, seed=1)
    assert len(choice.local) == 4 and choice.shared == []
    assert choice.not_sampled == 2
