"""Pure verification rules, the bounded state they consult, and the reputation score."""

from __future__ import annotations

import pytest

from swarm.core.errors import RejectedMessage
from swarm.core.reasons import Reason
from swarm.tasks import TaskSpec
from swarm.verify import rules
from swarm.verify.reputation import PeerRecord, Reputation, ReputationSettings
from swarm.verify.tracking import DecodedMessages, NonceCache, RateLimits, RecentGroups


def _reason(fn, *args) -> str | None:
    try:
        fn(*args)
    except RejectedMessage as e:
        return e.reason
    return None


def test_allow_list_and_bans():
    assert _reason(rules.check_allowed, "a", frozenset()) is None
    assert _reason(rules.check_allowed, "a", {"a"}) is None
    assert _reason(rules.check_allowed, "b", {"a"}) == "not_allowed"
    assert _reason(rules.check_not_banned, "b", {"b"}) == "banned"
    assert _reason(rules.check_not_banned, "a", {"b"}) is None


@pytest.mark.parametrize(
    "created_at, reason",
    [
        (1000.0, None),
        (1000.0 - 3599, None),
        (1000.0 - 3601, "stale"),
        (1000.0 + 299, None),
        (1000.0 + 301, "from_future"),
    ],
)
def test_age_and_clock_skew(created_at, reason):
    assert _reason(rules.check_age, created_at, 1000.0, 3600.0, 300.0) == reason


def test_age_zero_means_no_bound_but_the_future_is_still_refused():
    assert _reason(rules.check_age, 0.0, 1e9, 0.0, 300.0) is None
    assert _reason(rules.check_age, 1e9 + 301, 1e9, 0.0, 300.0) == "from_future"


def test_version_staleness_is_relative_to_the_senders_own_newest():
    assert _reason(rules.check_version, 5, None, 10) is None  # first group of a sender
    assert _reason(rules.check_version, 0, 10, 10) is None
    assert _reason(rules.check_version, 0, 11, 10) == "stale_version"
    assert _reason(rules.check_version, 0, 10**6, -1) is None  # bound off


def test_reward_claims_must_match_within_tolerance():
    assert _reason(rules.check_rewards, (1.1, 0.1), (1.1, 0.1 + 1e-9), 1e-6) is None
    assert _reason(rules.check_rewards, (1.1, 0.2), (1.1, 0.1), 1e-6) == "reward_mismatch"
    assert _reason(rules.check_rewards, (float("nan"),), (0.0,), 1e-6) == "reward_mismatch"


def test_overlap_counts_multisets_and_ignores_surrounding_whitespace():
    a = rules.fingerprint(["<answer>7</answer>"] * 3 + ["x"])
    b = rules.fingerprint([" <answer>7</answer>\n"] * 2 + ["y", "z"])
    assert rules.overlap(a, b) == 0.5
    assert rules.overlap(a, a) == 1.0
    assert rules.overlap((), a) == 0.0


def test_copy_needs_another_sender_and_enough_overlap():
    mine = rules.fingerprint(["1", "2", "3", "4"])
    assert _reason(rules.check_not_copy, "b", mine, [("a", mine)], 0.75) == "copycat"
    three = rules.fingerprint(["1", "2", "3", "9"])
    assert _reason(rules.check_not_copy, "b", three, [("a", mine)], 0.75) == "copycat"
    two = rules.fingerprint(["1", "2", "8", "9"])
    assert _reason(rules.check_not_copy, "b", two, [("a", mine)], 0.75) is None
    assert (
        _reason(rules.check_not_copy, "a", mine, [("a", mine)], 0.75) is None
    )  # its own group again
    assert _reason(rules.check_not_copy, "b", mine, [("a", mine)], 0.0) is None  # off


def test_nonce_cache_expires_and_is_bounded():
    cache = NonceCache(ttl_s=10.0, capacity=3)
    cache.add("a", b"n1", "h1", now=0.0)
    assert cache.lookup("a", b"n1") == "h1" and cache.lookup("b", b"n1") is None
    cache.add("a", b"n1", "other", now=1.0)
    assert cache.lookup("a", b"n1") == "h1"  # the first use is what counts
    cache.add("a", b"n2", "h2", now=11.0)
    assert cache.lookup("a", b"n1") is None and cache.lookup("a", b"n2") == "h2"
    for i in range(5):
        cache.add("a", bytes([i]), "h", now=12.0)
    assert len(cache) == 3


def test_rate_limit_is_a_token_bucket_per_sender():
    limits = RateLimits(rate=2.0, burst=5)
    assert limits.allows("a", 5, now=0.0)
    assert not limits.allows("a", 1, now=0.0)
    assert limits.allows("b", 3, now=0.0)  # another sender has its own bucket
    assert limits.allows("a", 2, now=1.0) and not limits.allows("a", 1, now=1.0)
    assert not limits.allows("a", 2, now=1.5, rate_factor=0.5)  # a throttled sender refills slower
    assert not limits.allows("a", 6, now=100.0)  # never more than the burst at once


def test_recent_groups_keep_the_first_few_per_spec_and_a_bounded_number_of_specs():
    recent = RecentGroups(capacity=2)
    specs = [TaskSpec.make("chain_sum", {}, 0, i) for i in range(3)]
    for i in range(10):
        recent.add(specs[0], (f"p{i}", ()))
    assert [s for s, _ in recent.get(specs[0])] == [f"p{i}" for i in range(8)]
    recent.add(specs[1], ("q", ()))
    recent.add(specs[2], ("r", ()))
    assert recent.get(specs[0]) == [] and recent.get(specs[2]) == [("r", ())]


def test_decoded_messages_are_found_by_bytes_and_source_and_bounded():
    kept: DecodedMessages[str] = DecodedMessages(max_messages=2, max_bytes=10)
    kept.put("a", b"1234", "one")
    assert kept.take("b", b"1234") is None and kept.take("a", bytes(bytearray(b"1234"))) == "one"
    assert kept.take("a", b"1234") is None  # taken once
    kept.put("a", b"x", "x")
    kept.put("a", b"y", "y")
    kept.put("a", b"z", "z")  # over the message bound: the oldest goes
    assert len(kept) == 2 and kept.evicted == 1 and kept.take("a", b"x") is None
    kept.put("a", b"0123456789", "big")  # over the byte bound: older ones go
    assert (
        kept.take("a", b"y") is None
        and kept.take("a", b"0123456789") == "big"
        and kept.evicted == 3
    )


def test_every_reason_has_a_weight_and_the_soft_ones_never_ban():
    assert Reason("duplicate") is Reason.DUPLICATE and Reason.DUPLICATE == "duplicate"
    assert {r: r.weight for r in Reason if r.weight != 1.0} == {
        "duplicate": 0.0,
        "in_rejected_message": 0.0,
        "banned": 0.0,
        "not_allowed": 0.0,
        "rate_limited": 0.2,
        "stale": 0.25,
        "from_future": 0.25,
        "stale_version": 0.25,
        "copycat": 0.5,
        "implausible_tokens": 0.5,
        "unlisted_task": 0.5,
        "pull_failed": 0.2,
        "verify_budget": 0.2,
        "unsigned_message": 0.5,
        "gossip_control_flood": 0.5,
        "gossip_backoff_violation": 0.5,
        "blob_fetch_limit": 0.5,
        "bad_autonat_request": 0.5,
        "bad_hole_punch": 0.5,
        "inbound_budget": 0.2,
        "below_publish_score": 0.2,
    }
    assert {r for r in Reason if r.unsigned} == {
        "oversize",
        "undecodable",
        "unknown_schema",
        "malformed",
        "bad_reward",
        "non_canonical",
        "bad_signature",
        # what the transport refuses: blamed on the peer that sent it, never a claimed sender
        "oversize_message",
        "unsigned_message",
        "bad_message_signature",
        "gossip_control_flood",
        "gossip_backoff_violation",
        "blob_fetch_limit",
        "flow_control_violation",
        "inbound_budget",
        "below_publish_score",
        "over_cost_budget",
        "bad_autonat_request",
        "bad_hole_punch",
    }
    assert Reason.BAD_SIGNATURE.unsigned and not Reason.REWARD_MISMATCH.unsigned
    assert Reason.from_stored("no_such_code") is Reason.UNKNOWN and Reason.UNKNOWN.weight == 1.0


def test_score_weighs_rejections_by_how_surely_they_mean_bad_faith():
    honest = PeerRecord(
        accepted=20, rejected={Reason.STALE: 2, Reason.DUPLICATE: 5, Reason.IN_REJECTED_MESSAGE: 3}
    )
    assert honest.score > 0.95
    forger = PeerRecord(accepted=0, rejected={Reason.BAD_SIGNATURE: 9})
    assert forger.score == pytest.approx(0.1)
    unterminated = PeerRecord(accepted=10, unterminated=10)
    assert unterminated.score > 0.9  # a weak model that rambles is not a cheat


def test_reputation_throttles_then_bans_and_forgets_on_request():
    rep = Reputation(ReputationSettings(throttle_below=0.5, ban_after=10, ban_below=0.2))
    rep.accepted("p", [True])
    assert rep.rate_factor("p") == 1.0 and rep.rate_factor("unknown") == 1.0
    for _ in range(3):
        rep.rejected("p", Reason.REWARD_MISMATCH)
    assert rep.rate_factor("p") == pytest.approx(2 / 5) and not rep.should_ban("p")
    for _ in range(7):
        rep.rejected("p", Reason.REWARD_MISMATCH)
    assert rep.should_ban("p")
    rep.forget("p")
    assert not rep.should_ban("p") and rep.rate_factor("p") == 1.0


def test_many_soft_rejections_alone_do_not_reach_a_ban_quickly():
    rep = Reputation(ReputationSettings(ban_after=10, ban_below=0.2))
    for _ in range(30):
        rep.accepted("p", [True])
        rep.rejected("p", Reason.STALE)
    assert not rep.should_ban("p")


def test_bans_can_be_turned_off():
    rep = Reputation(ReputationSettings(ban_after=0))
    for _ in range(1000):
        rep.rejected("p", Reason.BAD_SIGNATURE)
    assert not rep.should_ban("p")


def test_groups_of_one_repeated_answer_are_never_copycats():
    same = rules.fingerprint(["<answer>7</answer>"] * 8)
    assert _reason(rules.check_not_copy, "b", same, [("a", same)], 0.75) is None


def test_soft_signals_throttle_but_never_ban():
    rep = Reputation(ReputationSettings(throttle_below=0.5, ban_after=10, ban_below=0.2))
    for _ in range(1000):
        rep.rejected("p", Reason.COPYCAT)
        rep.rejected("p", Reason.RATE_LIMITED)
    assert rep.rate_factor("p") < 0.01 and not rep.should_ban("p")
