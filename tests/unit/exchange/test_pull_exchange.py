"""The pull exchange over the memory transport: announce, sample, pull, verify what is pulled."""

from __future__ import annotations

import hashlib

import msgspec

from lab.network_node import (
    ExchangeKind,
    NetworkNode,
    NetworkNodeSettings,
    RoundCost,
)
from swarm.core.identity import create_identity, peer_id_of
from swarm.core.reasons import Reason
from swarm.exchange.pull import PullSettings
from swarm.p2p.memory_links import LinkedMemoryTransport
from swarm.p2p.transport import MemoryHub, MemoryTransport
from swarm.wire import decode_group, decode_signed_group, encode_signed_group, group_key
from swarm.wire.signing import sign_group


def served_hash(signed) -> str:
    """The blob hash a group is announced and served under."""
    return hashlib.sha256(encode_signed_group(signed)).hexdigest()


def pull_nodes(n: int, linked: bool = True, **settings) -> list[NetworkNode]:
    """`n` network-only nodes speaking the pull exchange, each joined through the first."""
    hub, nodes, first = MemoryHub(), [], None
    for _ in range(n):
        key_pair = create_identity()
        peer_id = peer_id_of(key_pair)
        if linked:
            transport = LinkedMemoryTransport(peer_id, hub, bootstrap=[first] if first else [])
        else:
            transport = MemoryTransport(peer_id, hub)
        first = first or peer_id
        node_settings = NetworkNodeSettings(exchange=ExchangeKind.PULL, **settings)
        nodes.append(NetworkNode(node_settings, transport, key_pair))
    for node in nodes:
        node.start()
    return nodes


def run_rounds(nodes: list[NetworkNode], rounds: int) -> list[list[RoundCost]]:
    return [[node.run_round() for node in nodes] for _ in range(rounds)]


def test_a_node_verifies_only_what_it_pulls_and_every_pull_is_delivered():
    nodes = pull_nodes(12, groups_per_round=6, shared_groups=4)
    costs = run_rounds(nodes, 4)
    for cost in costs[-1]:
        pulls = cost.extra["pulls"]
        assert 0 < pulls <= PullSettings().pull_groups
        assert cost.extra["pulls_failed"] == 0 and cost.rejected == 0
        assert cost.verified == cost.accepted == pulls  # every pulled group verified fully
        senders = [s for s, _ in cost.chosen]
        assert len(senders) == 4 and max(senders.count(s) for s in senders) <= 2
        assert cost.peers <= 64
    # the view fills with peers nobody was bootstrapped with
    assert all(len(n.exchange.view.peers()) >= 6 for n in nodes)


def test_cost_per_node_does_not_grow_with_the_swarm():
    def last_round(n: int) -> list[RoundCost]:
        return run_rounds(pull_nodes(n, groups_per_round=4, shared_groups=4), 4)[-1]

    small, large = last_round(6), last_round(30)

    def mean(costs, field):
        return sum(getattr(c, field) for c in costs) / len(costs)

    for field in ("cheap_checked", "verified", "ledger_rows", "bytes_in"):
        # 6 nodes: 5 lists of 4; 30 nodes: 8 lists of 4, then flat however large
        assert mean(large, field) <= 2.0 * mean(small, field), field


def test_an_announcement_for_another_senders_task_is_refused_and_recorded():
    nodes = pull_nodes(3, linked=False, groups_per_round=3)
    honest, liar = nodes[0], nodes[1]
    # the liar's stream is not bound to its peer ID: its tasks are another stream's
    liar.rollouts.task_seed = 12345
    costs = run_rounds(nodes, 2)
    refused = (
        costs[-1][0].extra["announcements_refused"] + costs[0][0].extra["announcements_refused"]
    )
    assert refused >= 3
    assert liar.peer_id in honest.verifier.reputation.snapshot()
    record = honest.verifier.reputation.record(liar.peer_id)
    assert record.rejected[Reason.FOREIGN_TASK] >= 3


def _holder_setup(bad_holders: int, good_holders: int):
    """A sender whose group was fetched by holders; the sender then stops serving it."""
    hub = MemoryHub()
    keys = [create_identity() for _ in range(2 + bad_holders + good_holders)]
    transports = [MemoryTransport(peer_id_of(k), hub) for k in keys]
    settings = NetworkNodeSettings(
        exchange=ExchangeKind.PULL,
        groups_per_round=1,
        shared_groups=1,
        pull=PullSettings(pull_groups=1),
    )
    sender = NetworkNode(settings, transports[0], keys[0])
    puller = NetworkNode(settings, transports[1], keys[1])
    for t in transports:
        t.start()
    sender.exchange.start()
    sender.publish_round(RoundCost(round=0))
    (digest,) = sender.exchange.announced()
    key = group_key(digest)
    holders = transports[2:]
    for i, holder in enumerate(holders):
        data = holder.fetch_blob(sender.peer_id, key)
        if i < bad_holders:  # serves another group (signed by itself) under the same key
            original = decode_signed_group(data)
            group = decode_group(original.body)
            forged = msgspec.structs.replace(group, sender=holder.peer_id, rewards=(1.0,) * 8)
            size = len(data)
            data = encode_signed_group(sign_group(forged, keys[2 + i]))
            assert len(data) == size  # of the announced size: only its hash differs
        holder.serve_blob(key, data)
    sender.exchange.collect()  # serves its list again, with the holders as hints
    transports[0].unserve_blob(key)
    return sender, puller, [t.peer_id for t in holders[:bad_holders]], digest


def test_a_holder_serving_other_bytes_is_refused_and_blamed_then_a_good_holder_serves():
    sender, puller, bad, digest = _holder_setup(bad_holders=2, good_holders=1)
    puller.exchange.start()
    accepted, rejected = puller.exchange.collect()
    assert [served_hash(a.signed) for a in accepted] == [digest]
    counters = puller.exchange.take_counters()
    assert counters["pulled_from_holders"] == 1
    # bytes of the announced size that are not the group: proof against whoever served them
    mismatches = [r for r in rejected if r.reason == Reason.WRONG_BYTES]
    assert len(mismatches) == counters["bad_holders"]
    assert {r.source for r in mismatches} <= set(bad)


def test_only_bad_holders_left_the_pull_fails_and_every_bad_holder_is_recorded():
    sender, puller, bad, digest = _holder_setup(bad_holders=2, good_holders=0)
    puller.exchange.start()
    accepted, rejected = puller.exchange.collect()
    assert accepted == []
    reasons = sorted((r.reason, r.source) for r in rejected)
    expected = [(Reason.WRONG_BYTES, b) for b in bad]
    assert reasons == sorted([*expected, (Reason.PULL_FAILED, sender.peer_id)])
    assert puller.exchange.take_counters()["pulls_failed"] == 1


def test_a_node_that_trains_on_no_shared_group_asks_pulls_and_verifies_nothing():
    nodes = pull_nodes(6, groups_per_round=4, pull=PullSettings(pull_groups=0))
    costs = run_rounds(nodes, 3)
    for cost in costs[-1]:
        assert cost.extra["lists_asked"] == cost.extra["pulls"] == 0
        assert cost.verified == cost.cheap_checked == 0
        assert cost.published == 4  # it still serves its own groups to whoever asks
