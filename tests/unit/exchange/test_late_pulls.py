"""A group fetch the round stopped waiting on is taken when it ends: a group served late is
admitted in a later round, once, and one served by a holder meanwhile is not admitted twice.

Pull nodes on a memory hub whose fetches run on worker threads (the transport is wrapped,
so the fetcher treats it as a network one, as over libp2p); the sender answers its group
fetches `SLOW_S` late, past its patience (its lists answer at once: measured fast).
"""

from __future__ import annotations

import time

from lab.network_node import ExchangeKind, NetworkNode, NetworkNodeSettings, RoundCost
from swarm.core.identity import create_identity, peer_id_of
from swarm.exchange.answer_times import MIN_PATIENCE_S
from swarm.exchange.pull import PullSettings
from swarm.p2p.transport import FetchLimits, MemoryHub, MemoryTransport
from swarm.wire import decode_signed_group, group_key

SLOW_S = 3 * MIN_PATIENCE_S


class Threaded:
    """A `MemoryTransport` the fetcher does not recognise (so it fetches on threads); group
    fetches from `slow` are answered `SLOW_S` late."""

    def __init__(self, inner: MemoryTransport):
        self._inner = inner
        self.slow: set[str] = set()

    def __getattr__(self, name: str):
        return getattr(self._inner, name)

    def fetch_blob(self, peer_id, key, timeout=30.0, limits: FetchLimits | None = None):
        if peer_id in self.slow and key.startswith("pull/group/"):
            time.sleep(SLOW_S)
        return self._inner.fetch_blob(peer_id, key, timeout, limits)


def nodes(n: int) -> list[NetworkNode]:
    hub = MemoryHub()
    keys = [create_identity(bytes([i + 40]) * 32) for i in range(n)]
    settings = NetworkNodeSettings(
        exchange=ExchangeKind.PULL,
        groups_per_round=1,
        shared_groups=1,
        pull=PullSettings(pull_groups=1, pull_lists=n, list_wait_s=1.0),
    )
    out = []
    for key in keys:
        inner = MemoryTransport(peer_id_of(key), hub)
        inner.start()
        out.append(NetworkNode(settings, Threaded(inner), key))  # type: ignore[arg-type]
    return out


def published(sender: NetworkNode) -> tuple[str, bytes, str]:
    """The sender's one announced group: (blob hash, served bytes, content hash)."""
    sender.exchange.start()
    sender.publish_round(RoundCost(round=0))
    (digest,) = sender.exchange.announced()
    data = sender.transport.fetch_blob(sender.peer_id, group_key(digest))
    return digest, data, decode_signed_group(data).content_hash


def collect(node: NetworkNode) -> tuple[list, list, dict, float]:
    began = time.monotonic()
    accepted, rejected = node.exchange.collect()
    return accepted, rejected, node.exchange.take_counters(), time.monotonic() - began


def test_a_group_served_past_the_senders_patience_is_admitted_in_the_next_round():
    sender, puller = nodes(2)
    _, _, content = published(sender)
    puller.transport.slow.add(sender.peer_id)
    puller.exchange.start()  # asks the sender's list (off the round)
    try:
        # the list comes at once (the sender's answers measured: fast); its group does not
        accepted, _, counters, took = collect(puller)
        assert counters["pulls"] == 1 and counters["unwaited"] == 1, counters
        assert accepted == [] and took < SLOW_S  # the round did not wait for it
        time.sleep(SLOW_S)
        accepted, rejected, counters, _ = collect(puller)
        assert [a.signed.content_hash for a in accepted] == [content]
        assert rejected == [] and counters["late"] == 1 and counters["pulls_failed"] == 0
        accepted, _, _, _ = collect(puller)
        assert content not in [a.signed.content_hash for a in accepted]
    finally:
        puller.exchange.close()


def test_a_group_a_holder_served_while_the_sender_was_late_is_admitted_once():
    all_nodes = nodes(12)
    sender, holder, pullers = all_nodes[0], all_nodes[1], all_nodes[2:]
    digest, data, content = published(sender)
    holder.transport.fetch_blob(sender.peer_id, group_key(digest))  # a hinted holder
    holder.transport.serve_blob(group_key(digest), data)
    sender.exchange.collect()  # its list now hints the holder
    hedged = 0
    for puller in pullers:  # each tries the two in its own random order
        puller.transport.slow.add(sender.peer_id)
        puller.exchange.start()
        admitted = []
        for _ in range(2):  # the round that pulls it, and one after its late fetch ended
            accepted, rejected, counters, _ = collect(puller)
            admitted += [a.signed.content_hash for a in accepted]
            hedged += counters["unwaited"]
            assert rejected == [] and counters["pulls_failed"] == 0, counters
            if counters["unwaited"]:
                time.sleep(SLOW_S)  # the sender's late bytes come meanwhile: not admitted
        assert admitted == [content]
        puller.exchange.close()
    assert hedged >= 1  # some asked the sender first: the holder served while it was late
