"""A peer that serves wrong bytes is banned at once, however few of its groups a round pulls:
bytes of the announced size that do not hash to the key they were served under (no honest
peer serves them), or the sender's own group at another size than it signed, are proof
(`wrong_bytes`). Another size from a holder is not: the sender may have announced a wrong
size to frame the holders it hints."""

from __future__ import annotations

import dataclasses

from lab.network_node import ExchangeKind, NetworkNode, NetworkNodeSettings, RoundCost
from swarm.core.errors import RejectedMessage
from swarm.core.identity import create_identity, peer_id_of
from swarm.core.reasons import Reason
from swarm.exchange.pull import PullSettings
from swarm.p2p.transport import MemoryHub, MemoryTransport
from swarm.verify.announcements import wrong_bytes_proven
from swarm.verify.message import Rejection
from swarm.verify.reputation import ReputationSettings
from swarm.verify.standing import PeerStanding
from swarm.wire import ANNOUNCEMENTS_KEY, group_key
from tests.unit.exchange.builders import announcement

MISMATCH = RejectedMessage(Reason.ANNOUNCEMENT_MISMATCH, "not the announced bytes")


def test_only_answers_that_prove_other_bytes_are_proof():
    a = announcement("sender", 1)
    assert wrong_bytes_proven(a, "holder", MISMATCH, sized=True)  # right size, other hash
    assert wrong_bytes_proven(a, "sender", MISMATCH, sized=False)  # its own, another size
    assert not wrong_bytes_proven(a, "holder", MISMATCH, sized=False)  # may be framed
    oversize = RejectedMessage(Reason.OVERSIZE, "too large")
    assert not wrong_bytes_proven(a, "sender", oversize, sized=True)


def wrong(peer: str) -> Rejection:
    return Rejection(Reason.WRONG_BYTES, "other bytes", peer, "ab" * 32)


def test_one_proof_bans_at_once_whatever_the_score_unless_automatic_bans_are_off():
    assert {r for r in Reason if r.proof} == {Reason.WRONG_BYTES}
    standing = PeerStanding(ReputationSettings(ban_after=50, ban_below=0.2))
    standing.reputation.record("p").accepted = 1000  # a good record does not save it
    assert standing.record([], [wrong("p")]) == [("p", "proof of bad faith: wrong_bytes")]
    assert "p" in standing.banned
    # one hard rejection of another kind bans nobody
    assert (
        PeerStanding(ReputationSettings()).record(
            [], [Rejection(Reason.ANNOUNCEMENT_MISMATCH, "size", "q", "ab" * 32)]
        )
        == []
    )
    assert PeerStanding(ReputationSettings(ban_after=0)).record([], [wrong("p")]) == []
    assert PeerStanding(ReputationSettings(), allow_list=["p"]).record([], [wrong("p")]) == []


def pull_nodes(n: int) -> list[NetworkNode]:
    """`n` pull nodes on one memory hub; each pulls one group a round, one per sender."""
    hub = MemoryHub()
    nodes = []
    for _ in range(n):
        key_pair = create_identity()
        settings = NetworkNodeSettings(
            exchange=ExchangeKind.PULL,
            groups_per_round=8,
            shared_groups=1,
            per_peer_cap=1,
            pull=PullSettings(pull_groups=1, per_peer_cap=1),
        )
        nodes.append(NetworkNode(settings, MemoryTransport(peer_id_of(key_pair), hub), key_pair))
    for node in nodes:
        node.start()
    return nodes


def test_a_sender_serving_other_bytes_is_banned_by_the_first_pull_and_asked_no_more():
    puller, liar = pull_nodes(2)
    liar.publish_round(RoundCost(round=0))
    for digest in liar.exchange.announced():  # every group: other bytes of the same size
        data = liar.transport.fetch_blob(liar.peer_id, group_key(digest))
        liar.transport.serve_blob(group_key(digest), data[:-1] + bytes([data[-1] ^ 1]))
    cost = puller.run_round()
    assert cost.extra["pulls"] == 1  # one group of its 8 pulled this round
    assert liar.peer_id in puller.verifier.banned
    liar.transport.served_blobs()
    for _ in range(3):
        assert puller.run_round().extra["pulls"] == 0
    fetched = liar.transport.served_blobs(ANNOUNCEMENTS_KEY)
    assert not [f for f in fetched if f.peer_id == puller.peer_id]  # its list is not asked


def test_a_holder_serving_another_size_is_refused_but_not_banned_for_it():
    puller, sender, holder = pull_nodes(3)
    sender.settings = dataclasses.replace(sender.settings, groups_per_round=1)
    sender.publish_round(RoundCost(round=0))
    (digest,) = sender.exchange.announced()
    data = holder.transport.fetch_blob(sender.peer_id, group_key(digest))
    holder.transport.serve_blob(group_key(digest), data + b"\0")
    sender.exchange.collect()  # its list now hints the holder
    sender.transport.unserve_blob(group_key(digest))
    cost = RoundCost(round=0)
    puller.collect(cost)
    blamed = puller.verifier.reputation.record(holder.peer_id).rejected
    assert blamed[Reason.ANNOUNCEMENT_MISMATCH] >= 1 and blamed[Reason.WRONG_BYTES] == 0
    assert holder.peer_id not in puller.verifier.banned
