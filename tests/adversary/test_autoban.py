"""A node bans a forger by itself, refuses it from then on, and takes it back once unbanned."""

from __future__ import annotations

from swarm.core.identity import create_identity, peer_id_of
from swarm.ledger import BanRow, GroupRow, Ledger, counted_rejections
from swarm.node import Node
from swarm.p2p import MemoryHub, MemoryTransport
from swarm.verify.bans import unban
from swarm.wire import SignedGroup, encode_group, pack_messages, rollout_topic
from swarm.wire.signing import sign_group
from tests.adversary.test_hostile_peer import MALLORY, ME, mallory_group
from tests.conftest import small_config


def _rows(url, model):
    ledger = Ledger(url, create=False)
    try:
        with ledger.reader() as s:
            return s.query(model).all()
    finally:
        ledger.close()


def test_forger_is_banned_automatically_then_unbanned_by_the_user(tmp_path, tiny_model_path):
    hub = MemoryHub()
    key = create_identity(b"\x03" * 32)
    config = small_config(
        tmp_path / "a",
        tasks={"eval_size": 0},
        verify={"ban_after": 3, "ban_below": 0.5},
        generation={"questions_per_round": 2},
    )
    node = Node(config, transport=MemoryTransport(peer_id_of(key), hub), key_pair=key)
    node.start()
    mallory = MemoryTransport(ME, hub)
    mallory.start()
    topic = rollout_topic("swarm-local")
    try:
        for i in range(3):  # forged signatures: hard failures
            mallory.publish(
                topic,
                pack_messages([SignedGroup(encode_group(mallory_group(30 + i)), b"\x02" * 64)])[0],
            )
        mallory.publish(
            topic, pack_messages([sign_group(mallory_group(40), MALLORY)])[0]
        )  # valid, arrives before the ban
        node.run_round()
        bans = _rows(config.ledger_url, BanRow)
        assert [(b.peer_id, b.source) for b in bans] == [(ME, "auto")]
        mallory.publish(
            topic, pack_messages([sign_group(mallory_group(41), MALLORY)])[0]
        )  # valid, but banned now
        node.run_round()
        unban(config.ledger_url, ME)
        node.run_round()  # reads the lifted ban
        mallory.publish(topic, pack_messages([sign_group(mallory_group(42), MALLORY)])[0])
        node.run_round()
    finally:
        node.close()
    got = sorted(
        (r.status, r.reason, r.round) for r in _rows(config.ledger_url, GroupRow) if r.source == ME
    )
    # forged groups never decode far enough to name their round (-1); the banned peer's
    # group is only counted, not stored
    assert got == [
        ("accepted", "", 40),
        ("accepted", "", 42),
        ("rejected", "bad_signature", -1),
        ("rejected", "bad_signature", -1),
        ("rejected", "bad_signature", -1),
    ]
    ledger = Ledger(config.ledger_url, create=False)
    try:
        with ledger.reader() as s:
            assert counted_rejections(s, ME) == {"banned": 1}
    finally:
        ledger.close()
    assert _rows(config.ledger_url, BanRow) == []
