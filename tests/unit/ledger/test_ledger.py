"""The ledger: schema on first open, WAL mode, per-round transactions, queries."""

import sqlite3

import pytest

from swarm.core.errors import LedgerError
from swarm.ledger import (
    SCHEMA_VERSION,
    EvalRow,
    GroupRow,
    Ledger,
    RejectionCountRow,
    RoundRow,
    UpdateRow,
    add_ban,
    add_rejection_counts,
    counted_rejections,
    get_meta,
    last_round,
    latest_rounds,
    received_outcomes,
    remove_ban,
    set_meta,
    supersede_after,
    update_totals,
)


def _round(i, version=None):
    return RoundRow(
        round=i,
        policy_version=i + 1 if version is None else version,
        started_at=0.0,
        questions=4,
        completions=16,
        mean_reward=0.1 * i,
        accuracy=0.0,
        tokens_generated=10,
        generate_s=1.0,
        score_s=0.1,
        train_s=0.5,
        other_s=0.1,
        total_s=1.7,
    )


def _update(i, skipped=False, reason=""):
    return UpdateRow(
        round=i,
        version_before=i,
        version_after=i if skipped else i + 1,
        skipped=skipped,
        skip_reason=reason,
        local_groups=2,
        shared_groups=0,
        samples=8,
        tokens=30,
        mean_reward=0.5,
        loss=0.0,
        grad_norm=1.0,
        clip_fraction=0.0,
        kl=0.0,
        seconds=0.1,
        created_at=0.0,
    )


def test_schema_is_created_in_wal_mode(tmp_path):
    path = tmp_path / "ledger.sqlite"
    ledger = Ledger(f"sqlite:///{path}")
    with ledger.transaction() as s:
        set_meta(s, "model", "m")
    ledger.close()
    with sqlite3.connect(path) as raw:
        assert raw.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        tables = {r[0] for r in raw.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert {"meta", "rounds", "updates", "evals", "peers", "rollout_groups"} <= tables
    reopened = Ledger(f"sqlite:///{path}")
    with reopened.reader() as s:
        assert get_meta(s, "model") == "m" and get_meta(s, "schema_version") == str(SCHEMA_VERSION)


def test_readers_never_create_and_concurrent_openers_do_not_collide(tmp_path):
    import threading

    url = f"sqlite:///{tmp_path / 'race.sqlite'}"
    reader = Ledger(url, create=False)
    with pytest.raises(LedgerError, match="no such table"):
        with reader.reader() as s:
            last_round(s)
    errors = []

    def open_writer():
        try:
            Ledger(url).close()
        except LedgerError as e:
            errors.append(e)

    threads = [threading.Thread(target=open_writer) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    with reader.reader() as s:
        assert last_round(s) is None and get_meta(s, "schema_version") == str(SCHEMA_VERSION)


def test_errors_are_one_line(tmp_path):
    ledger = Ledger(f"sqlite:///{tmp_path / 'l.sqlite'}")
    with pytest.raises(LedgerError) as info:
        with ledger.transaction() as s:
            s.execute(__import__("sqlalchemy").text("SELECT * FROM no_such_table"))
    assert "\n" not in str(info.value) and "no such table" in str(info.value)


def test_a_failed_transaction_leaves_nothing(tmp_path):
    ledger = Ledger(f"sqlite:///{tmp_path / 'l.sqlite'}")
    with pytest.raises(RuntimeError):
        with ledger.transaction() as s:
            s.add(_round(0))
            raise RuntimeError("killed mid-round")
    with ledger.reader() as s:
        assert last_round(s) is None


def test_queries_and_supersede(tmp_path):
    ledger = Ledger(f"sqlite:///{tmp_path / 'l.sqlite'}")
    with ledger.transaction() as s:
        for i in range(5):
            s.add(_round(i))
            s.add(_update(i, skipped=(i == 2), reason="zero_advantage" if i == 2 else ""))
        s.add(
            EvalRow(
                round=4,
                policy_version=4,
                questions=8,
                accuracy=0.5,
                mean_reward=0.5,
                created_at=0.0,
            )
        )
    with ledger.transaction() as s:
        assert [r.round for r in latest_rounds(s, 3)] == [4, 3, 2]
        assert update_totals(s) == {"applied": 4, "skipped_zero_advantage": 1}
        assert supersede_after(s, 2) == 2
    with ledger.reader() as s:
        assert last_round(s) == 2
        assert update_totals(s) == {"applied": 2, "skipped_zero_advantage": 1}


def _received(source, sender, status, reason, at):
    return GroupRow(
        content_hash=f"{source}{sender}{at}",
        direction="received",
        status=status,
        reason=reason,
        source=source,
        sender=sender,
        recorded_at=at,
    )


def test_received_outcomes_count_per_peer_and_forget_what_came_before_an_unban(tmp_path):
    ledger = Ledger(f"sqlite:///{tmp_path / 'l.sqlite'}")
    with ledger.transaction() as s:
        s.add_all(
            [
                _received("good", "good", "accepted", "", 1.0),
                _received("good", "good", "accepted", "", 2.0),
                _received("bad", "bad", "rejected", "reward_mismatch", 1.0),
                _received("bad", "bad", "rejected", "reward_mismatch", 5.0),
                _received(
                    "", "relayed", "rejected", "reward_mismatch", 1.0
                ),  # no source: counts for the sender
                _received("sent-good", "", "rejected", "malformed", 1.0),
            ]
        )
        s.add(GroupRow(content_hash="mine", direction="sent", status="sent", recorded_at=1.0))
        add_ban(s, "bad", "auto", "score", 2.0)
    with ledger.transaction() as s:
        remove_ban(s, "bad", lifted_at=3.0)
    with ledger.reader() as s:
        assert sorted(received_outcomes(s)) == sorted(
            [
                ("good", "good", "accepted", "", 2),
                ("bad", "bad", "rejected", "reward_mismatch", 1),  # the one after the unban
                ("", "relayed", "rejected", "reward_mismatch", 1),
                ("sent-good", "", "rejected", "malformed", 1),
            ]
        )


def test_bad_url_is_a_ledger_error(tmp_path):
    with pytest.raises(LedgerError):
        Ledger("nosuchdialect://x")
    with pytest.raises(LedgerError):
        Ledger(f"sqlite:///{tmp_path}/missing/dir/l.sqlite")


def test_counted_rejections_add_up_per_window_and_feed_reputations(tmp_path):
    ledger = Ledger(f"sqlite:///{tmp_path / 'l.sqlite'}")
    with ledger.transaction() as s:
        add_rejection_counts(
            s, {("bad", "duplicate"): 3, ("bad", "rate_limited"): 2}, 100.0, 3600.0
        )
        add_rejection_counts(s, {("bad", "duplicate"): 4}, 200.0, 3600.0)  # same window
        add_rejection_counts(s, {("bad", "duplicate"): 1, ("gone", "banned"): 9}, 3700.0, 3600.0)
        add_ban(s, "gone", "auto", "score", 3000.0)
        s.add(_received("bad", "bad", "rejected", "rate_limited", 50.0))
    with ledger.transaction() as s:
        remove_ban(s, "gone", lifted_at=4000.0)  # its counts (last at 3700) came before
    with ledger.reader() as s:
        rows = s.query(RejectionCountRow).order_by(RejectionCountRow.window_start).all()
        assert [(r.window_start, r.count) for r in rows if r.reason == "duplicate"] == [
            (0, 7),
            (3600, 1),
        ]
        assert counted_rejections(s, "bad") == {"duplicate": 8, "rate_limited": 2}
        assert counted_rejections(s) == {"duplicate": 8, "rate_limited": 2, "banned": 9}
        assert sorted(received_outcomes(s)) == sorted(
            [
                ("bad", "bad", "rejected", "rate_limited", 1),
                ("bad", "", "rejected", "duplicate", 8),
                ("bad", "", "rejected", "rate_limited", 2),
            ]
        )
