"""Pulling only from peers of one's own model family (`sharing.shared_from = "same-family"`)."""

from __future__ import annotations

import pytest

from lab.network_node import ExchangeKind, NetworkNode, NetworkNodeSettings
from swarm.config import build_config
from swarm.core.errors import ConfigError
from swarm.core.identity import create_identity, peer_id_of
from swarm.exchange.pull import PullSettings
from swarm.p2p.transport import MemoryHub, MemoryTransport
from swarm.policy.source import family_digest

CONFIG = {"model_type": "llama", "hidden_size": 96, "num_hidden_layers": 3, "vocab_size": 4}
VOCAB = {"a": 0, "b": 1, "<eos>": 2, "<pad>": 3}


def test_a_family_is_its_architecture_and_vocabulary_not_its_name_or_dtype():
    base = family_digest(CONFIG, VOCAB)
    renamed = {**CONFIG, "_name_or_path": "/tmp/x", "name_or_path": "y", "dtype": "bfloat16"}
    assert family_digest(renamed, dict(reversed(list(VOCAB.items())))) == base
    assert family_digest({**CONFIG, "hidden_size": 128}, VOCAB) != base
    assert family_digest(CONFIG, {**VOCAB, "b": 3, "<pad>": 1}) != base
    assert len(base) == 12 and int(base, 16) >= 0


def _nodes(families: list[str], same_family: bool) -> list[NetworkNode]:
    hub, nodes = MemoryHub(), []
    for family in families:
        key = create_identity()
        pull = PullSettings(family=family, same_family=same_family, pull_groups=6)
        settings = NetworkNodeSettings(
            exchange=ExchangeKind.PULL, groups_per_round=4, shared_groups=4, pull=pull
        )
        nodes.append(NetworkNode(settings, MemoryTransport(peer_id_of(key), hub), key))
    for node in nodes:
        node.start()
    return nodes


def _pulled_senders(nodes, rounds: int = 3) -> tuple[list[set[str]], list[int]]:
    senders: list[set[str]] = [set() for _ in nodes]
    skipped = [0] * len(nodes)
    for _ in range(rounds):
        for i, node in enumerate(nodes):
            cost = node.run_round()
            senders[i] |= {s for s, _ in cost.chosen}
            skipped[i] += cost.extra["other_family"]
    return senders, skipped


def test_same_family_pulls_only_from_peers_announcing_the_nodes_family():
    families = ["aaa", "aaa", "bbb", "bbb", "aaa"]
    nodes = _nodes(families, same_family=True)
    senders, skipped = _pulled_senders(nodes)
    family_of = {n.peer_id: f for n, f in zip(nodes, families, strict=True)}
    for family, got, n_skipped in zip(families, senders, skipped, strict=True):
        assert got, "every node found peers of its own family"
        assert {family_of[s] for s in got} == {family}
        assert n_skipped > 0  # the other family's announcements were seen and left alone


def test_any_pulls_across_families():
    families = ["aaa", "aaa", "bbb", "bbb"]
    nodes = _nodes(families, same_family=False)
    senders, skipped = _pulled_senders(nodes)
    family_of = {n.peer_id: f for n, f in zip(nodes, families, strict=True)}
    assert any({family_of[s] for s in got} == {"aaa", "bbb"} for got in senders)
    assert skipped == [0] * len(nodes)


def test_same_family_needs_the_pull_exchange():
    table = {"sharing": {"shared_from": "same-family"}, "p2p": {"exchange": "gossip"}}
    with pytest.raises(ConfigError, match="sharing.shared_from.*needs p2p.exchange"):
        build_config(table)
    built = build_config({"sharing": {"shared_from": "same-family"}})
    assert built.sharing.shared_from == "same-family"
    with pytest.raises(ConfigError, match="shared_from"):
        build_config({"sharing": {"shared_from": "same-model"}})
