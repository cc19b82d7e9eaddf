"""`replay` on rows a ledger holds no bytes of: an accepted group whose bytes retention
pruned and a rejected group refused before its bytes came are counted apart (not as
failures) and named; an export with nothing to write says why and writes nothing."""

from __future__ import annotations

import subprocess
import sys

import msgspec
import pytest

from swarm.core.identity import create_identity, peer_id_of
from swarm.core.reasons import Reason
from swarm.ledger import GroupRow, Ledger
from swarm.ledger.retention import DAY_S, Retention, prune
from swarm.ops.replay import StoredGroup, VerifyReport, empty_export_reason, verify_ledger
from swarm.tasks import EASY_MIX, TaskSpec, build_task
from swarm.verify.rescore import rescore
from swarm.wire import RolloutGroup, Sampling
from swarm.wire.signing import sign_group

ME, PEER = create_identity(b"\x05" * 32), create_identity(b"\x06" * 32)
NOW = 1_700_000_000.0


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "swarm.cli", *args], capture_output=True, text=True, timeout=120
    )


def _signed(key, index: int):
    """An honest signed group: its claimed rewards are what re-scoring gives."""
    spec = TaskSpec.make("chain_sum", dict(EASY_MIX[0].config), seed=5, index=index)
    task = build_task(spec)
    group = RolloutGroup(
        swarm_id="swarm-test",
        sender=peer_id_of(key),
        task=spec,
        question=task.question,
        completions=(f"<answer>{task.answer}</answer>", "no idea"),
        rewards=(0.0, 0.0),
        finished=(True, True),
        model="swarm-tiny",
        base_hash="ab" * 16,
        policy_version=1,
        sampling=Sampling(temperature=1.0, top_p=1.0, top_k=0, max_new_tokens=8),
        round=1,
        created_at=NOW,
        nonce=bytes([index]) * 16,
        token_ids=(),
        format_bonus=0.1,
    )
    group = msgspec.structs.replace(group, rewards=rescore(group, 0.1)[1])
    return sign_group(group, key)


def _row(signed, direction: str, status: str, at: float, reason: str = "") -> GroupRow:
    return GroupRow(
        content_hash=signed.content_hash,
        direction=direction,
        status=status,
        reason=reason,
        sender=peer_id_of(ME if direction == "sent" else PEER),
        recorded_at=at,
        local_round=0,
        body=signed.body,
        signature=signed.signature,
    )


def _ledger(path, sent: bool) -> str:
    """A ledger with an accepted group whose bytes retention pruned, a rejected group never
    fetched (no bytes), and, if `sent`, one group this node sent (bytes kept)."""
    url = f"sqlite:///{path}"
    ledger = Ledger(url)
    old = NOW - 10 * DAY_S
    with ledger.transaction() as s:
        s.add(_row(_signed(PEER, 1), "received", "accepted", old))
        never = _row(_signed(PEER, 2), "received", "rejected", NOW, reason="pull_failed")
        never.body = never.signature = None  # as the node records a pull nobody served
        s.add(never)
        if sent:
            s.add(_row(_signed(ME, 3), "sent", "sent", NOW))
    pruned = prune(ledger, Retention(keep_bodies_days=1.0, protect_s=3600.0), now=NOW)
    ledger.close()
    assert sum(pruned.rows.values()) == 1  # the accepted group's bytes, by the node's own code
    return url


def test_pruned_and_never_fetched_groups_are_counted_apart_and_named(tmp_path):
    path = tmp_path / "ledger.sqlite"
    url = _ledger(path, sent=True)
    report, groups = verify_ledger(url, 0.1)
    verify = report.as_dict()
    assert [g.direction for g in groups] == ["sent"]
    assert verify["total"] == 3 and verify["passed"] == 1 and verify["failed"] == 0
    assert verify["failed_by_reason"] == {}
    assert verify["without_bytes"] == {"body_pruned": 1, "never_stored": 1}
    assert verify["by_status"]["accepted"] == {"passed": 0, "failed": 0, "without_bytes": 1}
    text = _cli("replay", "--ledger", str(path))
    assert text.returncode == 0, text.stderr
    line = text.stdout.strip()
    assert line.startswith("3 stored groups: 1 pass, 0 fail (none); 2 without bytes to check:")
    assert "1 sent or accepted whose bytes were pruned (ledger.keep_bodies_days" in line
    assert "1 rejected before their bytes were fetched or decoded" in line


def test_an_export_with_nothing_to_write_says_why_and_writes_nothing(tmp_path):
    path = tmp_path / "ledger.sqlite"
    _ledger(path, sent=False)
    out = tmp_path / "groups.jsonl"
    result = _cli("replay", "--ledger", str(path), "--export", str(out))
    assert result.returncode == 2 and not out.exists()
    assert result.stderr.strip() == (
        f"error: nothing to export, {out} not written: none of its 1 sent or accepted groups "
        "passed: 1 had their bytes pruned (ledger.keep_bodies_days, ledger.max_mb)"
    )


def test_an_export_of_an_empty_ledger_says_so(tmp_path):
    path = tmp_path / "ledger.sqlite"
    Ledger(f"sqlite:///{path}").close()
    out = tmp_path / "groups.jsonl"
    result = _cli("replay", "--ledger", str(path), "--export", str(out), "--json")
    assert result.returncode == 2 and not out.exists()
    assert result.stderr.strip() == (
        f"error: nothing to export, {out} not written: the ledger holds no rollout groups"
    )
    assert "Traceback" not in result.stderr


def _item(status: str, reason: str = "") -> StoredGroup:
    direction = "sent" if status == "sent" else "received"
    return StoredGroup(0, direction, status, "h", Reason(reason) if reason else "")


@pytest.mark.parametrize(
    "items, swarm_id, why",
    [
        (
            [("rejected", "never_stored"), ("rejected", "stale")],
            None,
            "its 2 stored groups are all rejected ones, and only groups this node sent or "
            "accepted are exported",
        ),
        (
            [("accepted", "reward_mismatch"), ("accepted", "body_pruned"), ("sent", "bad_task")],
            None,
            "none of its 3 sent or accepted groups passed: 1 had their bytes pruned "
            "(ledger.keep_bodies_days, ledger.max_mb); 2 failed verification "
            "(reward_mismatch 1, bad_task 1)",
        ),
        (
            [("sent", "wrong_swarm"), ("rejected", "")],
            "other",
            "none of its 1 sent or accepted groups passed: 1 failed verification "
            "(wrong_swarm 1); --swarm-id other keeps only that swarm's groups",
        ),
        ([("sent", ""), ("accepted", "body_pruned")], None, ""),
    ],
)
def test_why_nothing_can_be_exported(items, swarm_id, why):
    report = VerifyReport()
    for status, reason in items:
        report.add(_item(status, reason))
    report.trainable = sum(1 for status, reason in items if status != "rejected" and not reason)
    assert empty_export_reason(report, swarm_id) == why
    assert report.total == report.passed + report.failed + sum(report.without_bytes.values())
