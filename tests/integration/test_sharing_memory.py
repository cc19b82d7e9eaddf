"""Two real nodes sharing signed rollouts over the in-memory transport; forgeries are recorded."""

from __future__ import annotations

import msgspec

from swarm.core.identity import create_identity, peer_id_of
from swarm.ledger import GroupRow, Ledger, PeerRow
from swarm.node import Node
from swarm.p2p import MemoryHub, MemoryTransport
from swarm.wire import SignedGroup, decode_group, encode_group, pack_messages, rollout_topic
from swarm.wire.signing import sign_group
from tests.conftest import small_config


def _node(tmp_path, hub, name, seed):
    key = create_identity(bytes([seed]) * 32)
    config = small_config(
        tmp_path / name, node={"name": name, "rounds": 2, "seed": seed}, tasks={"eval_size": 0}
    )
    return Node(config, transport=MemoryTransport(peer_id_of(key), hub), key_pair=key)


def _a_round_each(tmp_path, hub):
    """Nodes a and b, both subscribed before either publishes; a runs a round, then b (which drains a's)."""
    a, b = _node(tmp_path, hub, "a", 1), _node(tmp_path, hub, "b", 2)
    for node in (a, b):
        node.start()
    a.run_round()
    b.run_round()
    return a, b


def _rows(node) -> list[GroupRow]:
    ledger = Ledger(node.config.ledger_url)
    with ledger.reader() as s:
        return s.query(GroupRow).order_by(GroupRow.id).all()


def test_nodes_exchange_signed_groups_and_record_forgeries(tmp_path, tiny_model_path):
    hub = MemoryHub()
    a, b = _a_round_each(tmp_path, hub)
    # Both were at policy version 0 with the same model: b spot-checked a's tokens, and they passed.
    assert b.spot_checker.checked > 0

    # A hostile peer on the hub: a forged signature (claiming to be a itself), and a valid
    # signature over a tampered body.
    mallory_key = create_identity(b"\x09" * 32)
    mallory = MemoryTransport(peer_id_of(mallory_key), hub)
    mallory.start()
    sent_by_a = [r for r in _rows(a) if r.direction == "sent"][0]
    honest = decode_group(sent_by_a.body)
    claimed = msgspec.structs.replace(
        honest, sender=a.peer_id, rewards=(5.0,) * len(honest.rewards)
    )
    forged = SignedGroup(encode_group(claimed), b"\x00" * 64)
    tampered_body = bytearray(
        sign_group(
            msgspec.structs.replace(honest, sender=mallory.peer_id, nonce=b"z" * 16), mallory_key
        ).body
    )
    good = sign_group(
        msgspec.structs.replace(honest, sender=mallory.peer_id, nonce=b"y" * 16), mallory_key
    )
    at = bytes(tampered_body).index(b"arithmetic")
    tampered_body[at] ^= 0x01  # still a valid, canonical body: only the signature can catch it
    tampered = SignedGroup(bytes(tampered_body), good.signature)
    for message in pack_messages([forged]) + pack_messages([tampered]) + [b"\xc1 not msgpack"]:
        mallory.publish(rollout_topic("swarm-local"), message)
    a.run_round()  # a drains b's round-0 groups and mallory's messages

    rows_a = _rows(a)
    accepted = [r for r in rows_a if r.status == "accepted"]
    rejected = [r for r in rows_a if r.status == "rejected"]
    sent_b = [r for r in _rows(b) if r.direction == "sent"]
    assert {r.content_hash for r in accepted} == {r.content_hash for r in sent_b}
    assert all(r.sender == b.peer_id and r.body for r in accepted)
    assert sorted(r.reason for r in rejected) == ["bad_signature", "bad_signature", "undecodable"]
    assert {r.sender for r in rejected if r.reason == "bad_signature"} == {
        a.peer_id,
        mallory.peer_id,
    }
    assert len(a.pool) == len(sent_b)
    # b received a's first round only; both recorded who they heard from
    assert {r.content_hash for r in _rows(b) if r.status == "accepted"} == {
        r.content_hash for r in rows_a if r.direction == "sent" and r.local_round == 0
    }
    ledger = Ledger(a.config.ledger_url)
    with ledger.reader() as s:
        # who sent them (the transport's peer), never a sender that an unchecked signature claims
        assert {p.peer_id for p in s.query(PeerRow)} == {b.peer_id, mallory.peer_id}
    assert a.transport.stats().rejected == {"bad_signature": 2, "undecodable": 1}
    for node in (a, b):
        node.close()


def test_a_restarted_node_still_refuses_replayed_nonces(tmp_path, tiny_model_path):
    a, b = _a_round_each(tmp_path, MemoryHub())  # b accepts a's round-0 groups and records them
    accepted = [r for r in _rows(b) if r.status == "accepted"]
    assert accepted
    b.close()

    again = _node(tmp_path, MemoryHub(), "b", 2)  # same run folder: a restart
    reused = msgspec.structs.replace(
        decode_group(accepted[0].body), round=999
    )  # a's own nonce, new content
    data = pack_messages([sign_group(reused, a.key_pair)])[0]
    replay = accepted[0]
    same = pack_messages([SignedGroup(replay.body, replay.signature)])[0]
    assert again.verifier.reputation.snapshot()[a.peer_id]["accepted"] == len(accepted)
    assert again.verifier.admit(data, a.peer_id)[1][0].reason == "replayed_nonce"
    assert again.verifier.admit(same, a.peer_id)[1][0].reason == "duplicate"
    again.close()
    a.close()
