"""A trainer node publishing deltas and a generator-role node following it, in one process.

The generator has no optimizer, applies each delta before generating, tags its rollouts
with the followed version, and ends bit-identical (bf16) to the trainer.
"""

from __future__ import annotations

import pytest

from swarm.core.errors import ConfigError
from swarm.core.identity import create_identity, peer_id_of
from swarm.ledger import DeltaRow, GroupRow, Ledger, UpdateRow
from swarm.node import Node
from swarm.p2p import MemoryHub, MemoryTransport
from swarm.policy.delta import bf16_state_dict, weights_hash
from swarm.wire import decode_group
from tests.conftest import small_config

TRAINER_KEY, GEN_KEY = create_identity(b"\x31" * 32), create_identity(b"\x32" * 32)


def _rows(node, model):
    ledger = Ledger(node.config.ledger_url)
    try:
        with ledger.reader() as s:
            return s.query(model).order_by(model.id).all()
    finally:
        ledger.close()


def test_generator_follows_a_trainer_bit_for_bit(tmp_path, tiny_model_path):
    hub = MemoryHub()
    common = {
        "tasks": {"eval_size": 0},
        "policy": {"model": str(tiny_model_path), "device": "cpu", "dtype": "float32"},
    }
    trainer = Node(
        small_config(
            tmp_path / "t",
            node={"name": "t", "seed": 1},
            sync={"publish_deltas": True, "anchor_every": 2, "keep_deltas": 2},
            **common,
        ),
        transport=MemoryTransport(peer_id_of(TRAINER_KEY), hub),
        key_pair=TRAINER_KEY,
    )
    generator = Node(
        small_config(
            tmp_path / "g",
            node={"name": "g", "seed": 2, "role": "generator"},
            sync={"follow": peer_id_of(TRAINER_KEY)},
            **common,
        ),
        transport=MemoryTransport(peer_id_of(GEN_KEY), hub),
        key_pair=GEN_KEY,
    )
    assert generator.trainer is None
    for node in (trainer, generator):
        node.start()
    for _ in range(3):
        trainer.run_round()
        generator.run_round()  # syncs first, then generates at the trainer's version
    version = trainer.state.policy_version
    assert version >= 2  # the tiny model's updates are rarely skipped
    assert generator.state.policy_version == version
    assert weights_hash(bf16_state_dict(generator.policy.model)) == weights_hash(
        bf16_state_dict(trainer.policy.model)
    )

    applied = [r for r in _rows(generator, DeltaRow) if r.status == "applied"]
    assert applied[-1].to_version == version and all(r.direction == "received" for r in applied)
    published = [r for r in _rows(trainer, DeltaRow) if r.status == "published"]
    assert {r.kind for r in published} == {"delta", "anchor"} and published[
        -1
    ].to_version == version
    assert all(u.skipped and "generator" in u.skip_reason for u in _rows(generator, UpdateRow))
    sent = [decode_group(r.body) for r in _rows(generator, GroupRow) if r.direction == "sent"]
    assert sent[-1].policy_version == version  # rollouts tagged with the followed version
    # The trainer accepted the generator's groups (same model), and the generator the trainer's.
    assert any(r.status == "accepted" for r in _rows(trainer, GroupRow))
    assert not [r for r in _rows(generator, GroupRow) if r.status == "rejected"]

    # A generator resumed from its checkpoint continues at its version.
    generator.checkpoint()
    generator.close()
    again = Node(
        small_config(
            tmp_path / "g",
            node={"name": "g", "seed": 2, "role": "generator"},
            sync={"follow": peer_id_of(TRAINER_KEY)},
            **common,
        ),
        transport=MemoryTransport(peer_id_of(create_identity(b"\x33" * 32)), MemoryHub()),
        key_pair=create_identity(b"\x33" * 32),
    )
    assert again.follower.version == version
    assert weights_hash(again.follower.weights) == weights_hash(
        bf16_state_dict(trainer.policy.model)
    )
    for node in (trainer, again):
        node.close()

    # What the generator applied, the trainer's ledger counts as served to it (fetches after
    # the trainer's last update are recorded when it closes).
    served = {
        (r.peer, r.kind, r.to_version) for r in _rows(trainer, DeltaRow) if r.status == "served"
    }
    assert served >= {(peer_id_of(GEN_KEY), r.kind, r.to_version) for r in applied}


def test_generator_config_mistakes_are_one_clear_line(tmp_path, tiny_model_path):
    with pytest.raises(ConfigError, match="needs sync.follow"):
        small_config(tmp_path, node={"role": "generator"})
    with pytest.raises(ConfigError, match="is not a peer ID"):
        small_config(tmp_path, node={"role": "generator"}, sync={"follow": "12D3KooWnope"})
    with pytest.raises(ConfigError, match="only used with node.role"):
        small_config(tmp_path, sync={"follow": peer_id_of(TRAINER_KEY)})
    with pytest.raises(ConfigError, match="publish_deltas needs"):
        small_config(
            tmp_path,
            node={"role": "generator"},
            sync={"follow": peer_id_of(TRAINER_KEY), "publish_deltas": True},
        )
    with pytest.raises(ConfigError, match="keep_deltas"):
        small_config(tmp_path, sync={"anchor_every": 10, "keep_deltas": 5})
    with pytest.raises(ConfigError, match="names this node itself"):
        Node(
            small_config(
                tmp_path / "self",
                node={"role": "generator"},
                sync={"follow": peer_id_of(GEN_KEY)},
                tasks={"eval_size": 0},
            ),
            transport=MemoryTransport(peer_id_of(GEN_KEY)),
            key_pair=GEN_KEY,
        )
