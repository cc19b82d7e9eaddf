"""The network-only node: synthetic groups that real verification accepts, and its rounds."""

from __future__ import annotations

import pytest

from lab.network_node import NetworkNode, NetworkNodeSettings
from lab.synthetic import SyntheticRollouts, SyntheticShape, wire_group
from swarm.core.identity import create_identity, peer_id_of
from swarm.p2p.transport import MemoryHub, MemoryTransport
from swarm.tasks import EASY_MIX, SAPO_MIX, Scoring
from swarm.verify.gate import Verifier, VerifySettings
from swarm.wire import encode_group


@pytest.mark.parametrize("mix", [EASY_MIX, SAPO_MIX[:3]], ids=["easy", "sapo"])
def test_synthetic_groups_pass_full_verification(mix):
    scoring = Scoring(0.1)
    rollouts = SyntheticRollouts(mix, 7, SyntheticShape(completions=6), scoring)
    groups = rollouts.round_groups(3, 4)
    assert [g.task.spec for g in groups] == [g.task.spec for g in rollouts.round_groups(3, 4)]
    verifier = Verifier(VerifySettings(swarm_id="s"))
    sender = peer_id_of(create_identity())
    for g in groups:
        wire = wire_group(
            g,
            swarm_id="s",
            sender=sender,
            model="m",
            base_hash="0" * 64,
            policy_version=0,
            round_index=3,
            created_at=1.0,
            format_bonus=0.1,
        )
        task, rewards = verifier.verify_content(wire, 0.1, scoring)
        assert rewards == g.rewards and task.spec == g.task.spec
        assert len(wire.completions) == 6 and all(len(t) == 150 for t in wire.token_ids)
    assert any(len(set(g.rewards)) > 1 for g in groups)  # learning signal


def test_a_group_of_the_default_shape_is_about_nine_kilobytes():
    rollouts = SyntheticRollouts(EASY_MIX, 1, SyntheticShape(), Scoring(0.1))
    g = rollouts.round_groups(0, 1)[0]
    wire = wire_group(
        g,
        swarm_id="s",
        sender=peer_id_of(create_identity()),
        model="m",
        base_hash="0" * 64,
        policy_version=0,
        round_index=0,
        created_at=1.0,
        format_bonus=0.1,
    )
    assert 7_000 < len(encode_group(wire)) < 12_000


def make_nodes(n: int, **settings) -> list[NetworkNode]:
    hub = MemoryHub()
    nodes = []
    for _ in range(n):
        key_pair = create_identity()
        transport = MemoryTransport(peer_id_of(key_pair), hub)
        nodes.append(NetworkNode(NetworkNodeSettings(**settings), transport, key_pair))
    for node in nodes:
        node.start()
    return nodes


def test_every_node_verifies_every_peer_group_and_chooses_a_capped_batch():
    nodes = make_nodes(4, groups_per_round=5, shared_groups=8, per_peer_cap=2)
    costs = [[node.run_round() for node in nodes] for _ in range(3)]
    last = costs[-1]
    for cost in last:
        assert cost.published == 5
        assert cost.verified == cost.accepted == 15  # 3 peers x 5 groups, all verified fully
        assert cost.rejected == 0
        senders = [s for s, _ in cost.chosen]
        assert len(senders) == 6 and max(senders.count(s) for s in set(senders)) == 2
        # sent 5 + received 15 + 6 uses + round and update + 3 peers touched
        assert cost.ledger_rows == 5 + 15 + 6 + 2 + 3


def test_nodes_share_no_task_specs():
    nodes = make_nodes(3, groups_per_round=4)
    specs = [{g.task.spec for g in n.rollouts.round_groups(0, 4)} for n in nodes]
    assert not (specs[0] & specs[1]) and not (specs[1] & specs[2])
