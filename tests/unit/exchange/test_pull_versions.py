"""The pull exchange chooses against this node's version, as its latest published groups
state it: a group the batch would skip as too many versions behind is never pulled, and an
observer (which records every group rather than trains) pulls any version."""

from __future__ import annotations

import pytest

from lab.network_node import ExchangeKind, NetworkNode, NetworkNodeSettings, RoundCost
from lab.network_settings import SYNTHETIC_BASE, SYNTHETIC_MODEL
from lab.synthetic import wire_group
from swarm.core.identity import create_identity, peer_id_of
from swarm.exchange.pull import PullSettings
from swarm.exchange.pull_choice import OwnVersion
from swarm.p2p.transport import MemoryHub, MemoryTransport
from swarm.wire.signing import sign_group


def publish_at(node: NetworkNode, version: int) -> None:
    """`node` publishes one group made at policy `version` (a network node's own are at 0)."""
    (group,) = node.rollouts.round_groups(node.round, 1)
    wire = wire_group(
        group,
        swarm_id=node.settings.swarm_id,
        sender=node.peer_id,
        model=SYNTHETIC_MODEL,
        base_hash=SYNTHETIC_BASE,
        policy_version=version,
        round_index=node.round,
        created_at=node.clock(),
        format_bonus=node.settings.format_bonus,
    )
    node.exchange.publish([(sign_group(wire, node.key_pair), wire)])


def pulled(puller_version: int, **pull) -> int:
    """How many groups a node at `puller_version` pulls of a peer's one group at version 0."""
    hub = MemoryHub()
    nodes = []
    for settings in (PullSettings(), PullSettings(pull_groups=1, **pull)):
        key_pair = create_identity()
        transport = MemoryTransport(peer_id_of(key_pair), hub)
        node_settings = NetworkNodeSettings(
            exchange=ExchangeKind.PULL, shared_groups=1, pull=settings
        )
        nodes.append(NetworkNode(node_settings, transport, key_pair))
    sender, puller = nodes
    for node in nodes:
        node.start()
    sender.publish_round(RoundCost(round=0))
    publish_at(puller, puller_version)
    assert puller.exchange.own == OwnVersion(SYNTHETIC_MODEL, SYNTHETIC_BASE, puller_version)
    accepted, _ = puller.exchange.collect()
    return len(accepted)


@pytest.mark.parametrize(
    ("puller_version", "pull", "expected"),
    [
        (2, {"max_version_lag": 1}, 0),  # 2 behind, 1 allowed: the batch would skip it
        (1, {"max_version_lag": 1}, 1),
        (2, {"max_version_lag": None}, 1),  # sharing.max_version_lag = -1: no bound
        (2, {"max_version_lag": 1, "every_group": True}, 1),  # an observer records any
    ],
)
def test_a_node_pulls_only_versions_its_batch_would_train_on(puller_version, pull, expected):
    assert pulled(puller_version, **pull) == expected
