"""A group of real-model size (16 completions of 16,384 tokens) travels by pull and is
verified, in bounded memory: far above the 256 KB a gossip message may carry a group."""

from __future__ import annotations

import tracemalloc

from lab.network_node import ExchangeKind, NetworkNode, NetworkNodeSettings
from lab.synthetic import SyntheticShape
from swarm.core.identity import create_identity, peer_id_of
from swarm.exchange.pull import PullSettings
from swarm.p2p.transport import MemoryHub, MemoryTransport
from swarm.wire import MAX_GROUP_BYTES, MAX_PULLED_GROUP_BYTES, group_key

LONG = SyntheticShape(completions=16, completion_chars=80_000, tokens_per_completion=16_384)


def test_a_group_of_sixteen_16k_token_completions_is_pulled_and_verified():
    hub = MemoryHub()
    keys = [create_identity(bytes([40 + i]) * 32) for i in range(2)]
    settings = NetworkNodeSettings(
        exchange=ExchangeKind.PULL,
        groups_per_round=1,
        shared_groups=1,
        shape=LONG,
        pull=PullSettings(pull_groups=1),
    )
    sender, puller = (NetworkNode(settings, MemoryTransport(peer_id_of(k), hub), k) for k in keys)
    sender.start()
    puller.start()
    made = sender.run_round()
    (digest,) = sender.exchange.announced()
    size = len(sender.transport.fetch_blob(sender.peer_id, group_key(digest)))
    assert made.published == 1 and 4 * MAX_GROUP_BYTES < size <= MAX_PULLED_GROUP_BYTES
    tracemalloc.start()
    try:
        cost = puller.run_round()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert cost.extra["pulls"] == 1 and cost.extra["pulls_failed"] == 0
    assert cost.verified == cost.accepted == 1 and cost.rejected == 0  # every reward re-scored
    # the group's bytes, its decoded form and its re-scoring: a bounded multiple of its size
    print(f"group of {size} bytes served; peak traced memory while pulling {peak} bytes")
    assert peak < 24 * size, (peak, size)
    sender.close()
    puller.close()
