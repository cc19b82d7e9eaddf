"""What a peer can make a node write: rows within a quota per window, counts beyond (swarm.node.rejection_log)."""

from __future__ import annotations

from swarm.node.rejection_log import MAX_PENDING_BYTES, RejectionLog, RowQuota
from swarm.verify.message import Rejection
from swarm.verify.reasons import Reason
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
