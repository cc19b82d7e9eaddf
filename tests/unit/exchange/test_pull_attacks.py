"""Hostile peers against the pull exchange: each attack refused, blamed on whoever did it."""

from __future__ import annotations

import time

from lab.network_node import ExchangeKind, NetworkNode, NetworkNodeSettings, RoundCost
from swarm.core.errors import FetchTooSlow, RejectedMessage
from swarm.core.identity import create_identity, peer_id_of
from swarm.core.reasons import Reason
from swarm.exchange.pull import PullSettings
from swarm.exchange.pull_fetch import Fetcher, Request
from swarm.p2p.transport import FetchLimits, MemoryHub, MemoryTransport
from swarm.verify.gate import VerifySettings
from swarm.verify.reputation import ReputationSettings
from swarm.wire import (
    ANNOUNCEMENTS_KEY,
    SignedGroup,
    decode_announcement,
    decode_group,
    decode_signed_group,
    encode_signed_group,
    group_key,
    pack_announcements,
    unpack_announcements,
)
from swarm.wire.signing import sign_announcement


def swarm_of(n: int, **pull) -> tuple[list[NetworkNode], list[MemoryTransport]]:
    """`n` pull nodes on one fully connected memory hub, one group a round each."""
    hub = MemoryHub()
    keys = [create_identity(bytes([i]) * 32) for i in range(n)]  # the same swarm every run
    transports = [MemoryTransport(peer_id_of(k), hub) for k in keys]
    verify = VerifySettings(swarm_id="swarm-local", reputation=ReputationSettings(ban_after=3))
    settings = NetworkNodeSettings(
        exchange=ExchangeKind.PULL,
        groups_per_round=1,
        shared_groups=1,
        verify=verify,
        pull=PullSettings(**{"pull_groups": 1, "pull_lists": n, **pull}),
    )
    nodes = [NetworkNode(settings, t, k) for t, k in zip(transports, keys, strict=True)]
    for t in transports:
        t.start()
    return nodes, transports


def published(sender: NetworkNode) -> tuple[str, bytes]:
    """The sender's one announced group: (blob hash, served bytes)."""
    sender.exchange.start()
    sender.publish_round(RoundCost(round=0))
    (digest,) = sender.exchange.announced()
    return digest, sender.transport.fetch_blob(sender.peer_id, group_key(digest))


def broken_signature(data: bytes) -> bytes:
    signed = decode_signed_group(data)
    return encode_signed_group(SignedGroup(signed.body, bytes(64)))


def test_a_holder_serving_the_body_with_a_broken_signature_is_blamed_not_the_sender():
    nodes, _ = swarm_of(10)
    sender, liar, good, pullers = nodes[0], nodes[1], nodes[2], nodes[3:]
    digest, data = published(sender)
    liar.transport.fetch_blob(sender.peer_id, group_key(digest))  # both become hinted holders
    good.transport.fetch_blob(sender.peer_id, group_key(digest))
    liar.transport.serve_blob(group_key(digest), broken_signature(data))
    good.transport.serve_blob(group_key(digest), data)
    sender.exchange.collect()  # its list now hints both holders
    sender.transport.unserve_blob(group_key(digest))
    blamed = []
    for puller in pullers:  # each tries the holders in its own random order
        puller.exchange.start()
        accepted, rejected = puller.exchange.collect()
        assert [a.group.sender for a in accepted] == [sender.peer_id]
        assert all(r.reason == Reason.PULL_FAILED or r.sender == "" for r in rejected)
        blamed += [(r.reason, r.source) for r in rejected if r.reason != Reason.PULL_FAILED]
    # bytes of the announced size that are not the group: proof against the holder alone
    assert blamed and set(blamed) == {(Reason.WRONG_BYTES, liar.peer_id)}


def test_only_a_broken_signature_served_the_pull_fails_and_the_sender_is_not_blamed_for_it():
    nodes, _ = swarm_of(3)
    sender, puller, liar = nodes
    digest, data = published(sender)
    liar.transport.fetch_blob(sender.peer_id, group_key(digest))
    liar.transport.serve_blob(group_key(digest), broken_signature(data))
    sender.exchange.collect()
    sender.transport.unserve_blob(group_key(digest))
    puller.exchange.start()
    accepted, rejected = puller.exchange.collect()
    assert accepted == []
    assert puller.exchange.take_counters()["pulls_failed"] == 1
    assert (Reason.WRONG_BYTES, liar.peer_id) in [(r.reason, r.source) for r in rejected]
    assert Reason.BAD_SIGNATURE not in [r.reason for r in rejected]


def test_a_sender_whose_own_announced_bytes_are_bad_is_blamed_and_the_pull_fails():
    nodes, _ = swarm_of(2)
    sender, puller = nodes
    digest, data = published(sender)
    bad = broken_signature(data)
    # announce the broken bytes themselves: the hash matches, the signature does not
    sender.exchange.publish([])
    signed = decode_signed_group(data)
    forged = sender.exchange.announcement_of(signed, decode_group(signed.body), bad)
    sender.transport.serve_blob(group_key(forged.blob_hash), bad)
    sender.transport.serve_blob(
        ANNOUNCEMENTS_KEY, pack_announcements([sign_announcement(forged, sender.key_pair)])
    )
    puller.exchange.start()
    accepted, rejected = puller.exchange.collect()
    assert accepted == []
    assert [(r.reason, r.source) for r in rejected] == [(Reason.BAD_SIGNATURE, sender.peer_id)]
    counters = puller.exchange.take_counters()
    assert counters["pulls_failed"] == counters["pulls_refused"] == 1


def test_a_sender_that_announces_and_never_serves_leaves_the_view_and_is_banned():
    nodes, _ = swarm_of(2, unserved_ban_after=2)
    sender, puller = nodes
    sender.exchange.start()
    puller.exchange.start()
    for r in range(8):
        sender.publish_round(RoundCost(round=r))
        for digest in sender.exchange.announced():
            sender.transport.unserve_blob(group_key(digest))
        cost = RoundCost(round=r)
        puller.collect(cost)
        assert sender.peer_id not in puller.exchange.view.peers()
        if sender.peer_id in puller.verifier.banned:
            break
    record = puller.verifier.reputation.record(sender.peer_id)
    assert record.rejected[Reason.PULL_FAILED] == 2
    assert record.rejected[Reason.NOT_SERVED] >= 3
    assert sender.peer_id in puller.verifier.banned


class StallingTransport:
    """Answers every fetch only when its timeout is up (a peer that accepts and stalls), or
    announces `size` bytes first, refused by the fetch's check before anything is read."""

    def __init__(self, size: int = 0):
        self.size = size
        self.read = 0

    def fetch_blob(self, peer_id: str, key: str, timeout: float, limits: FetchLimits) -> bytes:
        if self.size:
            assert limits.check is not None
            limits.check.size(self.size)
            self.read += self.size
            return bytes(self.size)
        time.sleep(timeout)
        raise FetchTooSlow(f"{key} from {peer_id}: nothing in {timeout} s")


def test_stalling_peers_cost_one_round_budget_not_one_timeout_each():
    fetcher = Fetcher(StallingTransport(), parallel=8, fetch_timeout_s=5.0)  # type: ignore[arg-type]
    requests = [Request(f"peer-{i}", ANNOUNCEMENTS_KEY, 1024) for i in range(16)]
    started = time.monotonic()
    outcomes = fetcher.fetch_all(requests, started + 0.6)
    elapsed = time.monotonic() - started
    fetcher.close()
    assert all(isinstance(o.error, FetchTooSlow) for o in outcomes)
    assert elapsed < 2.0  # 16 stalls one after another would take 16 x 5 s


def test_a_blob_larger_than_it_may_be_is_refused_before_it_is_read():
    transport = StallingTransport(size=64 << 20)
    fetcher = Fetcher(transport, parallel=1)  # type: ignore[arg-type]
    (outcome,) = fetcher.fetch_all(
        [Request("peer", group_key("ab" * 32), 9_000, exact=True)], time.monotonic() + 5
    )
    assert isinstance(outcome.error, RejectedMessage) and outcome.data is None
    assert outcome.error.reason == Reason.ANNOUNCEMENT_MISMATCH
    (outcome,) = fetcher.fetch_all(
        [Request("peer", ANNOUNCEMENTS_KEY, 1 << 20)], time.monotonic() + 5
    )
    assert isinstance(outcome.error, RejectedMessage)
    assert outcome.error.reason == Reason.OVERSIZE
    assert transport.read == 0


def test_a_popular_group_is_served_mostly_by_its_holders_not_its_sender():
    nodes, _ = swarm_of(24)
    sender, holders, pullers = nodes[0], nodes[1:5], nodes[5:]
    digest, data = published(sender)
    for holder in holders:
        holder.transport.fetch_blob(sender.peer_id, group_key(digest))
        holder.transport.serve_blob(group_key(digest), data)
    sender.exchange.collect()  # its list now hints the four holders
    from_holders = 0
    for puller in pullers:
        puller.exchange.start()
        accepted, _ = puller.exchange.collect()
        assert len(accepted) == 1
        from_holders += puller.exchange.take_counters()["pulled_from_holders"]
    # 4 holders and the sender in a random order: about 4 pulls in 5 from a holder
    assert from_holders >= len(pullers) // 2


def served_list(sender: NetworkNode) -> tuple[list[str], dict[str, set[str]]]:
    """The blob hashes a sender's list announces, and the holders it hints for each."""
    items, hints = unpack_announcements(
        sender.transport.fetch_blob(sender.peer_id, ANNOUNCEMENTS_KEY)
    )
    holders: dict[str, set[str]] = {}
    for hint in hints:
        holders.setdefault(hint.content_hash, set()).add(hint.peer_id)
    return [decode_announcement(i.body).blob_hash for i in items], holders


def test_last_rounds_groups_stay_announced_with_the_holders_who_fetched_them_since():
    """Holders fetch a group after it was announced; the next round's list still names it,
    with them, so a node pulling it then can pull from a holder. Announced only while served."""
    for announce_rounds, keep_rounds, expect_old in ((2, 3, True), (1, 3, False), (2, 1, False)):
        nodes, _ = swarm_of(6, announce_rounds=announce_rounds, keep_rounds=keep_rounds)
        sender, holders = nodes[0], nodes[1:5]
        old, data = published(sender)
        for holder in holders:
            holder.transport.fetch_blob(sender.peer_id, group_key(old))
        sender.exchange.collect()  # the round ends
        sender.publish_round(RoundCost(round=1))
        announced, hinted = served_list(sender)
        assert len(announced) == (2 if expect_old else 1) and announced[-1] != old
        if expect_old:
            assert announced[0] == old and hinted[old] == {h.peer_id for h in holders}
        assert all(d == old or d == announced[-1] for d in announced)


def test_a_group_seen_but_not_pulled_is_pulled_later_from_the_holders_its_list_names():
    """A node that saw a group announced and chose another one pulls it when the sender's
    list announces it again, from the holders the list names by then."""
    nodes, _ = swarm_of(16, per_peer_cap=1)
    senders, holders, pullers = nodes[:2], nodes[2:6], nodes[6:]
    digests = [published(sender)[0] for sender in senders]
    first = {}
    for puller in pullers:
        puller.exchange.start()
        (item,) = puller.exchange.collect()[0]  # one of the two; the other is seen only
        first[puller.peer_id] = item.signed.content_hash
    for holder in holders:  # the holders fetch both groups and serve them on
        for sender, digest in zip(senders, digests, strict=True):
            data = holder.transport.fetch_blob(sender.peer_id, group_key(digest))
            holder.transport.serve_blob(group_key(digest), data)
    for sender in senders:
        sender.exchange.collect()  # its list now hints the holders
    from_holders = 0
    for puller in pullers:
        puller.exchange.take_counters()
        (item,) = puller.exchange.collect()[0]
        assert item.signed.content_hash != first[puller.peer_id]  # the other one, now
        from_holders += puller.exchange.take_counters()["pulled_from_holders"]
    assert from_holders >= len(pullers) // 2  # 4 holders and the sender in a random order
