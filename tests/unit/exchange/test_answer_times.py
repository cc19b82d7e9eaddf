"""A peer's patience from its measured answer times (`swarm.exchange.answer_times`)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from swarm.exchange.answer_times import (
    MIN_PATIENCE_S,
    SPREAD,
    UNMEASURED_FACTOR,
    AnswerTimes,
    Estimate,
    batch_patience,
    patience,
    updated,
)

answers = st.lists(st.floats(0.0, 3.0, allow_nan=False), min_size=1, max_size=60)
ceilings = st.floats(0.05, 10.0, allow_nan=False)


def estimate_of(samples: list[float]) -> Estimate:
    estimate = None
    for sample in samples:
        estimate = updated(estimate, sample)
    assert estimate is not None
    return estimate


def test_the_estimate_follows_rfc_6298():
    e = updated(None, 0.1)
    assert (e.srtt, e.rttvar, e.samples) == (0.1, 0.05, 1)
    e = updated(e, 0.3)  # rttvar first, from the old srtt (2.3)
    assert e.rttvar == pytest.approx(0.75 * 0.05 + 0.25 * 0.2)
    assert e.srtt == pytest.approx(0.875 * 0.1 + 0.125 * 0.3)
    assert e.samples == 2
    assert patience(e, 10.0, floor=0.0) == pytest.approx(e.srtt + 4 * e.rttvar)


@given(answers, ceilings)
def test_patience_is_never_below_the_floor_nor_above_the_fetch_timeout(samples, ceiling):
    p = patience(estimate_of(samples), ceiling)
    assert p <= ceiling
    assert p >= min(MIN_PATIENCE_S, ceiling)


@given(answers)
def test_a_peer_is_given_up_on_within_five_times_its_slowest_answer_or_the_floor(samples):
    """srtt never exceeds the slowest answer, nor rttvar the slowest answer: a peer that
    left costs a round at most 5x the slowest answer it ever gave (or the floor)."""
    p = patience(estimate_of(samples), 60.0)
    assert p <= max(MIN_PATIENCE_S, 5 * max(samples)) + 1e-9


@given(st.floats(0.0, 3.0, allow_nan=False), st.integers(30, 60))
def test_steady_answers_are_waited_for_and_little_more(answer, n):
    """A peer that always answers in `answer` is given at least that (it is never given up
    on while it answers as always), and after 30 such answers hardly more."""
    p = patience(estimate_of([answer] * n), 60.0)
    assert p >= answer
    assert p <= max(MIN_PATIENCE_S, answer * 1.001)


@given(answers, answers)
def test_a_peer_never_measured_gets_twice_the_swarms_patience(others, own):
    times = AnswerTimes()
    assert times.patience("new", 5.0) == 5.0  # nothing measured yet: the fetch's own timeout
    for i, sample in enumerate(others):
        times.note(f"peer-{i % 3}", sample)
    swarm = estimate_of(others)
    expected = min(5.0, UNMEASURED_FACTOR * patience(swarm, 5.0))
    assert times.patience("new", 5.0) == pytest.approx(expected)
    for sample in own:
        times.note("new", sample)
    assert times.patience("new", 5.0) == pytest.approx(patience(estimate_of(own), 5.0))


def test_estimates_are_kept_for_at_most_capacity_peers():
    times = AnswerTimes(capacity=4)
    for i in range(10):
        times.note(f"peer-{i}", 0.01)
    assert [times.estimate(f"peer-{i}") is not None for i in range(10)] == [False] * 6 + [True] * 4


@given(answers, st.integers(1, 40))
def test_a_batch_bounds_its_stragglers_only_once_half_of_it_has_answered(answered, batch):
    bound = batch_patience(answered, batch)
    if len(answered) < max(2, batch / 2):
        assert bound is None
        return
    assert bound is not None and bound >= MIN_PATIENCE_S
    # within SPREAD times the fastest and the slowest answer (a median), or the floor
    assert SPREAD * min(answered) - 1e-9 <= bound or bound == MIN_PATIENCE_S
    assert bound <= max(MIN_PATIENCE_S, SPREAD * max(answered)) + 1e-9


@given(st.lists(st.floats(0.01, 0.5), min_size=5, max_size=10), st.floats(0.0, 100.0))
def test_one_answer_however_fast_or_slow_moves_the_bound_no_further_than_its_neighbours(
    honest, odd
):
    """A median: one answer (an attacker's, at any speed) among five or more honest ones
    leaves the bound between the honest answers' neighbouring order statistics."""
    with_odd = batch_patience([*honest, odd], len(honest) + 1, floor=0.0)
    ordered = sorted(honest)
    mid = len(ordered) // 2
    low, high = ordered[max(mid - 1, 0)], ordered[min(mid + 1, len(ordered) - 1)]
    assert with_odd is not None
    assert SPREAD * low - 1e-9 <= with_odd <= SPREAD * high + 1e-9
