"""The observer role in a swarm of trainers: no model, every check but the spot check, every
group and delta manifest recorded, and a ledger that `replay` reads.

In one process over the in-memory transport here; as separate processes over libp2p on
127.0.0.1 (its memory measured) in test_observer_libp2p.py.
"""

from __future__ import annotations

import gc
import json
import warnings

import msgspec
import pytest
import torch

from swarm.core.errors import ConfigError
from swarm.core.identity import create_identity, peer_id_of
from swarm.ledger import DeltaRow, GroupRow, Ledger
from swarm.node import Node, Observer, make_node
from swarm.ops.replay import verify_ledger
from swarm.p2p import MemoryHub, MemoryTransport
from swarm.wire import decode_group, pack_messages, rollout_topic
from swarm.wire.signing import sign_group
from tests.conftest import small_config


def _key(seed: int):
    return create_identity(bytes([seed]) * 32)


def _trainer(tmp_path, hub, name, seed, **sections):
    key = _key(seed)
    config = small_config(
        tmp_path / name, node={"name": name, "seed": seed}, tasks={"eval_size": 0}, **sections
    )
    return Node(config, transport=MemoryTransport(peer_id_of(key), hub), key_pair=key)


def _modules() -> set[int]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch warns about a deprecated alias when inspected
        return {id(o) for o in gc.get_objects() if isinstance(o, torch.nn.Module)}


def _rows(config, table):
    ledger = Ledger(config.ledger_url, create=False)
    try:
        with ledger.reader() as s:
            return s.query(table).order_by(table.id).all()
    finally:
        ledger.close()


@pytest.fixture(scope="module")
def watched_swarm(tmp_path_factory, tiny_model_path):
    """Trainers a (publishing deltas) and b, an observer, and a forger; a few rounds."""
    tmp = tmp_path_factory.mktemp("observed")
    hub = MemoryHub()
    a = _trainer(tmp, hub, "a", 1, sync={"publish_deltas": True})
    b = _trainer(tmp, hub, "b", 2)
    before = _modules()
    key = _key(7)
    observer_config = small_config(tmp / "observer", node={"name": "watcher", "role": "observer"})
    observer = make_node(
        observer_config, transport=MemoryTransport(peer_id_of(key), hub), key_pair=key
    )
    built = _modules() - before
    mallory_key = _key(9)
    mallory = MemoryTransport(peer_id_of(mallory_key), hub)
    try:
        for node in (a, b, observer):
            node.start()
        mallory.start()
        a.run_round()
        b.run_round()
        first = observer.observe()
        honest = decode_group(_rows(a.config, GroupRow)[0].body)
        n = len(honest.completions)
        lie = msgspec.structs.replace(  # its own completions, each claimed fully correct
            honest,
            sender=mallory.peer_id,
            completions=tuple(f"<answer>{900 + i}</answer>" for i in range(n)),
            rewards=(1.1,) * n,
            token_ids=(),
        )
        mallory.publish(
            rollout_topic("swarm-local"), pack_messages([sign_group(lie, mallory_key)])[0]
        )
        a.run_round()
        b.run_round()
        last = observer.observe()
    finally:
        for node in (a, b, observer):
            node.close()
        mallory.close()
    return a, b, observer, built, first, last


def test_an_observer_builds_no_model(watched_swarm):
    _, _, observer, built, _, _ = watched_swarm
    assert isinstance(observer, Observer)
    assert observer.policy is None and built == set()


def test_it_records_every_group_the_trainers_sent(watched_swarm):
    a, b, observer, _, first, last = watched_swarm
    sent = {
        r.content_hash
        for node in (a, b)
        for r in _rows(node.config, GroupRow)
        if r.direction == "sent"
    }
    rows = _rows(observer.config, GroupRow)
    accepted = [r for r in rows if r.status == "accepted"]
    assert {r.content_hash for r in accepted} == sent and len(accepted) == len(sent)
    assert all(r.body and r.sender in (a.peer_id, b.peer_id) for r in accepted)
    assert first.groups_accepted == len(sent) // 2 and last.groups_accepted == len(sent)
    assert last.peers == 3 and last.groups_sent == 0 and last.bytes_out["gossip"] == 0


def test_it_verifies_what_it_records(watched_swarm):
    _, _, observer, _, _, last = watched_swarm
    rejected = [r for r in _rows(observer.config, GroupRow) if r.status == "rejected"]
    assert [(r.reason, r.sender) for r in rejected] == [("reward_mismatch", peer_id_of(_key(9)))]
    assert last.rejected == {"reward_mismatch": 1}


def test_it_records_every_delta_manifest(watched_swarm):
    a, _, observer, _, _, last = watched_swarm
    published = [
        (r.kind, r.from_version, r.to_version, r.bytes)
        for r in _rows(a.config, DeltaRow)
        if r.status == "published"
    ]
    seen = [
        (r.kind, r.from_version, r.to_version, r.bytes)
        for r in _rows(observer.config, DeltaRow)
        if r.status == "announced"
    ]
    assert seen == published and len(seen) >= 2
    assert {r.peer for r in _rows(observer.config, DeltaRow)} == {a.peer_id}
    assert last.manifests == len(published)


def test_its_ledger_feeds_replay(watched_swarm):
    a, b, observer, _, _, _ = watched_swarm
    report, trainable = verify_ledger(observer.config.ledger_url, format_weight=0.1)
    assert report.passed == report.total - 1  # all but the forgery
    assert report.failed_by_reason == {"reward_mismatch": 1}
    assert {g.group.sender for g in trainable} == {a.peer_id, b.peer_id}


def test_its_experiment_log_has_a_line_per_pass(watched_swarm):
    observer = watched_swarm[2]
    lines = [
        json.loads(x) for x in (observer.config.run_dir / "metrics.jsonl").read_text().splitlines()
    ]
    assert [(x["kind"], x["round"]) for x in lines] == [("swarm", 1), ("swarm", 2)]
    assert lines[-1]["groups_accepted"] == watched_swarm[5].groups_accepted
    log = (observer.config.run_dir / "node.log").read_text()
    assert "pass 2: 3 peers; groups received" in log


def test_observer_and_node_refuse_each_others_role(tmp_path):
    with pytest.raises(ConfigError, match="node.role = 'observer'"):
        Node(small_config(tmp_path / "n", node={"role": "observer"}))
    with pytest.raises(ConfigError, match="Observer needs node.role = 'observer'"):
        Observer(small_config(tmp_path / "o"))


def test_observer_and_trainer_never_share_a_run_folder(watched_swarm, tmp_path):
    from swarm.config.preflight import check_ledger

    a, _, observer, _, _, _ = watched_swarm
    as_observer = small_config(a.config.run_dir, node={"role": "observer"})
    with pytest.raises(ConfigError, match="belongs to a node of model 'swarm-tiny', not 'none"):
        check_ledger(as_observer)
    with pytest.raises(ConfigError, match="belongs to a node of model 'swarm-tiny'"):
        Observer(as_observer, transport=MemoryTransport(peer_id_of(_key(1))), key_pair=_key(1))
    as_trainer = small_config(observer.config.run_dir)
    with pytest.raises(ConfigError, match="belongs to a node of model 'none \\(observer\\)'"):
        check_ledger(as_trainer)
