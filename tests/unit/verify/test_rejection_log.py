"""What a peer can make a node write: rows within a quota per window, counts beyond (swarm.node.rejection_log)."""

from __future__ import annotations

import collections

from swarm.core.reasons import Reason
from swarm.node.rejection_log import MAX_PENDING_BYTES, RejectionLog, RowQuota
from swarm.verify.message import Rejection
from swarm.wire import SignedGroup


def rejection(reason: Reason, source: str = "mallory", body: bytes = b"x" * 100) -> Rejection:
    return Rejection(reason, "", source, "hash", source, SignedGroup(body, b"s" * 64))


def test_the_quota_is_per_peer_and_per_window():
    quota = RowQuota(rows_per_window=2, window_s=60.0)
    assert [quota.take("a", 10.0) for _ in range(3)] == [True, True, False]
    assert quota.take("b", 10.0)
    assert quota.take("a", 61.0)  # a new window


def test_rows_within_quota_then_counts_and_some_reasons_are_always_counted():
    log = RejectionLog(rows_per_window=3, window_s=3600.0)
    for _ in range(10):
        log.note(rejection(Reason.REWARD_MISMATCH), 5.0)
    for reason in (Reason.DUPLICATE, Reason.BANNED, Reason.IN_REJECTED_MESSAGE):
        log.note(rejection(reason, "other"), 5.0)
    log.refused("flooder", Reason.GOSSIP_CONTROL_FLOOD, 500)
    assert log.waiting()
    taken = log.take()
    assert [r.reason for r in taken.rows] == [Reason.REWARD_MISMATCH] * 3
    assert taken.counts == {
        ("mallory", Reason.REWARD_MISMATCH): 7,
        ("other", Reason.DUPLICATE): 1,
        ("other", Reason.BANNED): 1,
        ("other", Reason.IN_REJECTED_MESSAGE): 1,
    }
    assert taken.refused == {("flooder", Reason.GOSSIP_CONTROL_FLOOD): 500}
    assert not log.waiting() and log.take().rows == []


def test_rows_waiting_are_bounded_in_bytes_and_the_rest_counted():
    log = RejectionLog(rows_per_window=10**9, window_s=3600.0)
    body = b"x" * (1 << 20)
    n = MAX_PENDING_BYTES // len(body) + 5
    for i in range(n):
        log.note(rejection(Reason.REWARD_MISMATCH, f"peer{i}", body), 5.0)
    taken = log.take()
    assert sum(len(r.signed.body) for r in taken.rows) <= MAX_PENDING_BYTES
    assert len(taken.rows) + sum(taken.counts.values()) == n  # nothing dropped


def test_rows_written_before_a_restart_count_against_the_quota_of_their_window():
    log = RejectionLog(rows_per_window=3, window_s=3600.0)
    assert log.window_start(3700.0) == 3600.0
    # the ledger says: 2 rows blamed on mallory (the source), 1 on a claimed sender whose
    # signature was good (no source), 1 unsigned one that blames only its (empty) source
    log.restore(
        [
            ("mallory", "x", "reward_mismatch", 2),
            ("", "bob", "reward_mismatch", 1),
            ("", "bob", "bad_signature", 1),
            ("", "carol", "no_longer_a_reason", 1),
        ],
        3700.0,
    )
    for peer in ("mallory", "bob", "carol"):
        for _ in range(3):
            log.note(rejection(Reason.REWARD_MISMATCH, peer), 3700.0)
    taken = log.take()
    rows = collections.Counter(r.source for r in taken.rows)
    assert rows == {"mallory": 1, "bob": 2, "carol": 2}
    # the next window renews every quota
    log.note(rejection(Reason.REWARD_MISMATCH, "mallory"), 7300.0)
    assert [r.source for r in log.take().rows] == ["mallory"]
