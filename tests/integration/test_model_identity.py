"""A node running a model from a local folder never sends its path nor its folder's name, and
copies of one model stored anywhere, under any folder or chosen name, are one model to their
peers (the spot check runs between them)."""

from __future__ import annotations

import shutil

from swarm.core.identity import create_identity, peer_id_of
from swarm.node import Node
from swarm.p2p import MemoryHub, MemoryTransport
from swarm.policy.source import same_model
from swarm.wire import delta_topic, rollout_topic, unpack_manifests, unpack_message
from swarm.wire.signing import verify_manifest, verify_signed
from tests.conftest import small_config


def _node(tmp_path, hub, name, seed, model, shown="", **sections):
    key = create_identity(bytes([seed]) * 32)
    config = small_config(
        tmp_path / "runs" / name,
        node={"name": name, "seed": seed},
        policy={"model": model, "model_name": shown},
        tasks={"eval_size": 0},
        **sections,
    )
    return Node(config, transport=MemoryTransport(peer_id_of(key), hub), key_pair=key)


def test_a_model_from_an_absolute_path_is_sent_by_content_not_path(tmp_path, tiny_model_path):
    here = tmp_path / "private" / "alice" / "qwen-like"
    there = tmp_path / "elsewhere" / "my-finetune"
    shutil.copytree(tiny_model_path, here)
    shutil.copytree(tiny_model_path, there)
    hub = MemoryHub()
    spy = MemoryTransport("spy", hub)  # hears everything published on the hub
    spy.start()
    spy.subscribe(rollout_topic("swarm-local"))
    spy.subscribe(delta_topic("swarm-local"))
    a = _node(tmp_path, hub, "a", 1, str(here), sync={"publish_deltas": True})
    b = _node(tmp_path, hub, "b", 2, str(there), shown="team-b-model")
    try:
        for node in (a, b):
            node.start()
        a.run_round()
        b.run_round()  # b drains a's groups: same model by content, base and version
        messages = spy.receive()
    finally:
        a.close()
        b.close()

    assert a.policy.model_id != b.policy.model_id  # b chose the name its peers see
    assert same_model(a.policy.model_id, b.policy.model_id)
    assert b.policy.model_id.startswith("team-b-model@")
    assert "qwen-like" not in a.policy.model_id and "/" not in a.policy.model_id
    assert b.spot_checker.checked > 0  # a's groups were of b's own model: spot-checked
    topics = {m.topic for m in messages}
    assert topics == {rollout_topic("swarm-local"), delta_topic("swarm-local")}
    models = set()
    for message in messages:
        assert str(tmp_path).encode() not in message.data  # no path, nor any part of one
        assert b"alice" not in message.data and b"qwen-like" not in message.data
        if message.topic == rollout_topic("swarm-local"):
            models |= {verify_signed(s).model for s in unpack_message(message.data)}
        else:
            models |= {verify_manifest(s).model for s in unpack_manifests(message.data)}
    assert models == {a.policy.model_id, b.policy.model_id}
