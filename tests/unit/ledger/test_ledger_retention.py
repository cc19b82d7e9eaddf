"""Ledger retention: pruning by age and size never touches what replay needs; the doctor reports size."""

from __future__ import annotations

import os

from swarm.ledger import (
    GroupRow,
    GroupUseRow,
    Ledger,
    RejectionCountRow,
    RoundRow,
    add_rejection_counts,
)
from swarm.ledger.retention import DAY_S, Retention, ledger_size, prune, used_bytes
from swarm.ops.doctor import diagnose

NOW = 100 * DAY_S


def _group(i: int, direction: str, status: str, at: float, body: int = 20_000) -> GroupRow:
    return GroupRow(
        content_hash=f"h{i}",
        direction=direction,
        status=status,
        reason="x" if status == "rejected" else "",
        recorded_at=at,
        body=os.urandom(body),
        sender="peer",
        source="peer",
    )


def _filled(tmp_path, n: int = 60) -> Ledger:
    """n each of rejected, sent and accepted groups, one a day back from NOW, plus counters."""
    ledger = Ledger(f"sqlite:///{tmp_path / 'ledger.sqlite'}")
    with ledger.transaction() as s:
        for i in range(n):
            at = NOW - i * DAY_S
            s.add(_group(3 * i, "received", "rejected", at))
            s.add(_group(3 * i + 1, "sent", "sent", at))
            s.add(_group(3 * i + 2, "received", "accepted", at))
            add_rejection_counts(s, {("peer", "duplicate"): 5}, at, 3600.0)
        s.flush()
        accepted = s.query(GroupRow).filter(GroupRow.status == "accepted").first()
        s.add(
            GroupUseRow(
                group_id=accepted.id,
                content_hash=accepted.content_hash,
                sender="peer",
                round=0,
                version_after=1,
                advantages="[]",
                advantage_abs_sum=0.0,
                mean_reward=0.0,
            )
        )
        s.add(
            RoundRow(
                round=0,
                policy_version=1,
                started_at=0.0,
                questions=1,
                completions=1,
                mean_reward=0.0,
                accuracy=0.0,
                tokens_generated=0,
                generate_s=0.0,
                score_s=0.0,
                train_s=0.0,
                other_s=0.0,
                total_s=0.0,
            )
        )
    return ledger


def _count(ledger: Ledger, status: str) -> int:
    with ledger.reader() as s:
        return s.query(GroupRow).filter(GroupRow.status == status).count()


def test_nothing_is_pruned_without_a_policy(tmp_path):
    ledger = _filled(tmp_path)
    assert prune(ledger, Retention(), NOW).total == 0
    ledger.close()


def test_keep_days_prunes_old_rejected_counted_and_sent_rows_only(tmp_path):
    ledger = _filled(tmp_path)
    pruned = prune(ledger, Retention(keep_days=10), NOW)
    assert pruned.rows == {"rejected groups": 49, "rejection counters": 49, "sent groups": 49}
    assert (_count(ledger, "rejected"), _count(ledger, "sent"), _count(ledger, "accepted")) == (
        11,
        11,
        60,
    )
    with ledger.reader() as s:
        assert s.query(RejectionCountRow).count() == 11
        assert s.query(GroupUseRow).count() == 1 and s.query(RoundRow).count() == 1
    ledger.close()


def test_max_mb_prunes_oldest_first_in_order_and_says_when_it_cannot_reach_the_cap(tmp_path):
    ledger = _filled(tmp_path)
    before = used_bytes(ledger)
    assert before > 3.5e6  # 180 groups of 20 KB
    pruned = prune(ledger, Retention(max_mb=2), NOW)
    assert used_bytes(ledger) <= 2 << 20 and pruned.over_bytes == 0
    assert _count(ledger, "rejected") == 0 and _count(ledger, "accepted") == 60
    assert 0 < _count(ledger, "sent") < 60
    with ledger.reader() as s:
        newest_sent = (
            s.query(GroupRow)
            .filter(GroupRow.status == "sent")
            .order_by(GroupRow.recorded_at)
            .first()
        )
    assert newest_sent.recorded_at > NOW - 60 * DAY_S  # the oldest went first
    size = ledger_size(ledger)
    assert size.file_bytes < before  # pages given back to the file system
    assert _bodies(ledger) == 60  # accepted bytes go only once nothing else is left
    tight = prune(ledger, Retention(max_mb=1), NOW)
    assert _count(ledger, "sent") == 0 and _count(ledger, "accepted") == 60  # rows stay
    assert tight.rows["accepted bodies"] > 0 and 0 < _bodies(ledger) < 60
    assert used_bytes(ledger) <= 1 << 20 and tight.over_bytes == 0
    none_left = prune(ledger, Retention(max_mb=1, protect_s=70 * DAY_S), NOW)
    assert "accepted bodies" not in none_left.rows  # nothing old enough: nothing dropped
    ledger.close()


def _bodies(ledger: Ledger) -> int:
    """Accepted groups that still hold their signed bytes."""
    with ledger.reader() as s:
        q = s.query(GroupRow).filter(GroupRow.status == "accepted", GroupRow.body.is_not(None))
        return q.count()


def test_keep_bodies_days_drops_old_accepted_bytes_and_keeps_rows_and_recent_bytes(tmp_path):
    ledger = _filled(tmp_path)
    before = used_bytes(ledger)
    pruned = prune(ledger, Retention(keep_bodies_days=10), NOW)
    assert pruned.rows == {"accepted bodies": 49}
    assert _count(ledger, "accepted") == 60 and _bodies(ledger) == 11
    assert (_count(ledger, "rejected"), _count(ledger, "sent")) == (60, 60)
    assert used_bytes(ledger) < before - 40 * 20_000  # 49 bodies of 20 KB, in whole pages
    with ledger.reader() as s:
        old = (
            s.query(GroupRow)
            .filter(GroupRow.status == "accepted")
            .order_by(GroupRow.recorded_at)
            .first()
        )
        assert old.body is None and old.signature is None and old.sender == "peer"
        assert s.query(GroupUseRow).count() == 1
    # never the bytes a restart reads back: those younger than verify.max_age_s
    young = prune(ledger, Retention(keep_bodies_days=1e-9, protect_s=1.5 * DAY_S), NOW)
    assert young.rows == {"accepted bodies": 9} and _bodies(ledger) == 2
    ledger.close()


def test_the_doctor_reports_the_ledgers_size(tmp_path):
    ledger = _filled(tmp_path, n=5)
    ledger.close()
    findings = diagnose(f"sqlite:///{tmp_path / 'ledger.sqlite'}", None)
    size = next(f for f in findings if f.check == "size")
    assert (
        size.level == "ok"
        and "MB on disk" in size.message
        and "15 group rows, 5 rejection counters" in size.message
    )
