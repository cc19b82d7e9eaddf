"""What an observer counts and stores of what a peer sends: one outcome per group, and a
bounded number of ledger rows per peer however much it sends.

An observer (no model) over the in-memory transport, and a peer that sends groups: good
ones, ones that pass the gossip validator but fail a round-loop check (false claimed
rewards), duplicates, and more once it is banned.
"""

from __future__ import annotations

import collections
import time
from pathlib import Path

import msgspec

from swarm.core.identity import create_identity, peer_id_of
from swarm.core.reasons import Reason
from swarm.node import Observer
from swarm.p2p import MemoryHub, MemoryTransport
from swarm.tasks import EASY_MIX, TaskSpec, build_task
from swarm.verify.rescore import rescore
from swarm.wire import RolloutGroup, Sampling, pack_messages, rollout_topic
from swarm.wire.signing import sign_group
from tests.conftest import small_config

PEER_KEY = create_identity(b"\x31" * 32)


def peer_group(index: int, created_at: float) -> RolloutGroup:
    """A group the peer could honestly send (its claimed rewards recomputed here)."""
    spec = TaskSpec.make("chain_sum", dict(EASY_MIX[0].config), seed=5, index=index)
    task = build_task(spec)
    group = RolloutGroup(
        swarm_id="swarm-local",
        sender=peer_id_of(PEER_KEY),
        task=spec,
        question=task.question,
        completions=(f"<answer>{task.answer}</answer>", "<answer>0</answer>"),
        rewards=(0.0, 0.0),
        finished=(True, True),
        model="swarm-tiny",
        base_hash="00" * 16,
        policy_version=0,
        sampling=Sampling(temperature=1.0, top_p=1.0, top_k=0, max_new_tokens=8),
        round=index,
        created_at=created_at,
        nonce=index.to_bytes(16, "big"),
        format_bonus=0.1,
    )
    return msgspec.structs.replace(group, rewards=rescore(group, 0.1)[1])


def false_claims(group: RolloutGroup) -> RolloutGroup:
    """Wrong answers claimed right: passes the gossip validator, fails re-scoring."""
    return msgspec.structs.replace(
        group, completions=("<answer>x</answer>", "<answer>y</answer>"), rewards=(1.1, 1.1)
    )


def test_a_group_failing_a_round_loop_check_is_received_once(tmp_path):
    hub = MemoryHub()
    key = create_identity(b"\x32" * 32)
    config = small_config(tmp_path / "o", node={"role": "observer"})
    observer = Observer(config, transport=MemoryTransport(peer_id_of(key), hub), key_pair=key)
    peer = MemoryTransport(peer_id_of(PEER_KEY), hub)
    now = time.time()
    good = peer_group(1, now)
    wrong = false_claims(peer_group(2, now))
    try:
        observer.start()
        peer.start()
        topic = rollout_topic("swarm-local")
        for group in (good, wrong, good):
            peer.publish(topic, pack_messages([sign_group(group, PEER_KEY)])[0])
        sample = observer.observe()
    finally:
        observer.close()
        peer.close()
    assert sample.groups_received == 2  # the good group and the false one; the repeat is not new
    assert sample.groups_accepted == 1
    assert sample.rejected == {"reward_mismatch": 1, "duplicate": 1}


def _observer(tmp_path, **ledger):
    hub = MemoryHub()
    key = create_identity(b"\x32" * 32)
    config = small_config(tmp_path / "o", node={"role": "observer"}, ledger=ledger)
    observer = Observer(config, transport=MemoryTransport(peer_id_of(key), hub), key_pair=key)
    peer = MemoryTransport(peer_id_of(PEER_KEY), hub)
    observer.start()
    peer.start()
    return observer, peer


def _send(peer, groups) -> None:
    for group in groups:
        peer.publish(rollout_topic("swarm-local"), pack_messages([sign_group(group, PEER_KEY)])[0])


def _ledger(observer):
    from swarm.ledger import GroupRow, Ledger, counted_rejections

    ledger = Ledger(observer.config.ledger_url, create=False)
    try:
        with ledger.reader() as s:
            rows = collections.Counter(
                (r.status, r.reason) for r in s.query(GroupRow) if r.direction == "received"
            )
            return rows, counted_rejections(s, peer_id_of(PEER_KEY))
    finally:
        ledger.close()


def test_a_peer_gets_a_quota_of_rows_per_window_and_is_counted_beyond(tmp_path):
    observer, peer = _observer(tmp_path, rejected_rows_per_peer=5)
    now = time.time()
    try:
        _send(peer, [false_claims(peer_group(i, now)) for i in range(40)])
        sample = observer.observe()
        rows, counted = _ledger(observer)
        record = observer.verifier.reputation.record(peer_id_of(PEER_KEY))
    finally:
        observer.close()
        peer.close()
    assert rows == {("rejected", "reward_mismatch"): 5}
    assert counted == {"reward_mismatch": 35}
    assert sample.rejected == {"reward_mismatch": 40} and sample.groups_received == 40
    assert record.rejected[Reason.REWARD_MISMATCH] == 40  # every one counts against the peer


def test_duplicates_and_a_banned_peers_messages_are_counted_not_stored(tmp_path):
    from swarm.verify.bans import ban

    observer, peer = _observer(tmp_path)
    now = time.time()
    good = peer_group(1, now)
    try:
        _send(peer, [good] * 50)
        observer.observe()
        size_after_first = Path(observer.config.run_dir / "ledger.sqlite").stat().st_size
        ban(observer.config.ledger_url, peer_id_of(PEER_KEY), "test")
        observer.observe()  # reads the ban
        _send(peer, [peer_group(i, now) for i in range(100, 300)])
        observer.observe()
        rows, counted = _ledger(observer)
        grown = Path(observer.config.run_dir / "ledger.sqlite").stat().st_size - size_after_first
    finally:
        observer.close()
        peer.close()
    assert rows == {("accepted", ""): 1}
    assert counted == {"duplicate": 49, "banned": 200}
    assert grown < 64 * 1024  # a few counter rows, not 200 groups (each ~1 KB with its bytes)


def test_a_restart_does_not_renew_a_peers_quota_of_rows(tmp_path):
    quota = {"rejected_rows_per_peer": 5, "count_window_s": 10.0**9}  # one window for the test
    now = time.time()
    observer, peer = _observer(tmp_path, **quota)
    try:
        _send(peer, [false_claims(peer_group(i, now)) for i in range(3)])
        observer.observe()
    finally:
        observer.close()
        peer.close()
    observer, peer = _observer(tmp_path, **quota)  # the same run folder and ledger
    try:
        _send(peer, [false_claims(peer_group(i, now)) for i in range(100, 110)])
        observer.observe()
        rows, counted = _ledger(observer)
    finally:
        observer.close()
        peer.close()
    assert rows == {("rejected", "reward_mismatch"): 5}  # 3 before the restart, 2 after
    assert counted == {"reward_mismatch": 8}
