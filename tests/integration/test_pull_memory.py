"""Trainer nodes speaking the pull exchange over the in-memory transport: what they train on
was announced, pulled and verified; lies in announcements and in pulled bytes are recorded."""

from __future__ import annotations

import hashlib
import time

import msgspec

from lab.synthetic import SyntheticRollouts, SyntheticShape, wire_group
from swarm.core.identity import create_identity, peer_id_of
from swarm.ledger import BanRow, GroupRow, GroupUseRow, Ledger
from swarm.node import Node
from swarm.p2p import MemoryHub, MemoryTransport
from swarm.tasks import EASY_MIX, Scoring, stream_seed
from swarm.wire import (
    ANNOUNCEMENTS_KEY,
    GroupAnnouncement,
    decode_group,
    encode_signed_group,
    group_key,
    pack_announcements,
)
from swarm.wire.signing import sign_announcement, sign_group
from swarm.wire.streams import VIEW_KEY, ViewEntry, encode_view
from tests.conftest import small_config

PULL = {"exchange": "pull", "pull_groups": 64}  # pull every candidate: nothing left to chance


def _node(tmp_path, hub, name: str, seed: int) -> Node:
    key = create_identity(bytes([seed]) * 32)
    config = small_config(
        tmp_path / name,
        node={"name": name, "seed": seed},
        tasks={"eval_size": 0},
        sharing={"shared_groups": 2, "per_peer_cap": 0},
        p2p=PULL,
    )
    return Node(config, transport=MemoryTransport(peer_id_of(key), hub), key_pair=key)


def _rows(node: Node, table=GroupRow) -> list:
    ledger = Ledger(node.config.ledger_url)
    try:
        with ledger.reader() as s:
            return s.query(table).all()
    finally:
        ledger.close()


def _mallory(hub: MemoryHub) -> MemoryTransport:
    """A peer that announces a group of its own stream but serves other bytes for it, and a
    group of someone else's task stream."""
    key = create_identity(b"\x09" * 32)
    me = peer_id_of(key)
    transport = MemoryTransport(me, hub)
    transport.start()
    announcements = []
    for i, seed in enumerate([stream_seed(me, 0), 777]):
        rollouts = SyntheticRollouts(EASY_MIX, seed, SyntheticShape(completions=4), Scoring(0.1))
        g = next(g for g in rollouts.round_groups(0, 8) if len(set(g.rewards)) > 1)
        group = wire_group(
            g,
            swarm_id="swarm-local",
            sender=me,
            model="m",
            base_hash="0" * 64,
            policy_version=0,
            round_index=0,
            created_at=time.time(),
            format_bonus=0.1,
        )
        signed = sign_group(group, key)
        served = encode_signed_group(signed)  # what the announcement's hash and size cover
        announcements.append(
            sign_announcement(
                GroupAnnouncement(
                    base_hash=group.base_hash,
                    blob_hash=hashlib.sha256(served).hexdigest(),
                    created_at=group.created_at,
                    model="m",
                    policy_version=0,
                    rewards=group.rewards,
                    round=0,
                    seed_salt=0,
                    sender=me,
                    size=len(served),
                    swarm_id="swarm-local",
                    task=group.task,
                ),
                key,
            )
        )
        if i == 0:  # serves another body under the announced group's key
            other = msgspec.structs.replace(decode_group(signed.body), nonce=b"n" * 16)
            transport.serve_blob(
                group_key(hashlib.sha256(served).hexdigest()),
                encode_signed_group(sign_group(other, key)),
            )
    transport.serve_blob(ANNOUNCEMENTS_KEY, pack_announcements(announcements))
    transport.serve_blob(VIEW_KEY, encode_view([ViewEntry(me, (), 0)]))  # it takes part
    return transport


def test_pull_nodes_train_on_verified_pulled_groups_and_record_lies(tmp_path, tiny_model_path):
    hub = MemoryHub()
    nodes = [_node(tmp_path, hub, name, seed) for name, seed in (("a", 1), ("b", 2), ("c", 3))]
    mallory = _mallory(hub)
    try:
        for node in nodes:
            node.start()
        for _ in range(3):
            for node in nodes:
                node.run_round()
        for node in nodes:
            rows = _rows(node)
            sent = [r for r in rows if r.direction == "sent"]
            accepted = [r for r in rows if r.status == "accepted"]
            rejected = [r for r in rows if r.status == "rejected"]
            # its own groups come from its own stream, bound to its peer ID
            assert {r.task and msgspec.json.decode(r.task)["seed"] for r in sent} == {
                stream_seed(node.peer_id, node.config.task_seed)
            }
            peers = {n.peer_id for n in nodes} - {node.peer_id}
            assert accepted and {r.sender for r in accepted} <= peers
            assert node.sharing.stats.exchange["pulls_failed"] == 1  # mallory's, below
            # every accepted group was pulled and verified; mallory's lies are on record
            assert sorted({(r.reason, r.source) for r in rejected}) == [
                ("foreign_task", mallory.peer_id),
                ("pull_failed", mallory.peer_id),  # no other holder: the pull failed
                ("wrong_bytes", mallory.peer_id),  # served bytes not as announced: proof
            ]
            bans = [(b.peer_id, b.source) for b in _rows(node, BanRow)]
            assert bans == [(mallory.peer_id, "auto")]  # at once, on that proof
            uses = _rows(node, GroupUseRow)
            assert uses and {u.content_hash for u in uses} <= {r.content_hash for r in accepted}
    finally:
        for node in nodes:
            node.close()
