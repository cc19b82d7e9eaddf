"""Honest peers never punish each other: an observer and a node pulling many groups from one
honest sender over libp2p (127.0.0.1) pull every one of them, and the sender refuses none of
their fetches (a fetcher opens no more fetches at once to one peer than a server accepts)."""

from __future__ import annotations

from lab.network_node import ExchangeKind, NetworkNode, NetworkNodeSettings
from swarm.core.identity import create_identity, peer_id_of
from swarm.exchange.pull import PullSettings
from swarm.ledger import GroupRow, Ledger
from swarm.node import make_node
from swarm.p2p.libp2p import Libp2pTransport, TransportSettings
from tests.conftest import small_config

GROUPS = 24


def test_an_observer_and_a_node_pull_every_group_of_one_sender_and_are_refused_nothing(tmp_path):
    sender = NetworkNode.over_libp2p(
        NetworkNodeSettings(exchange=ExchangeKind.PULL, groups_per_round=GROUPS),
        listen="/ip4/127.0.0.1/tcp/0",
    )
    sender.start()
    bootstrap = sender.transport.listen_addrs()
    pull = PullSettings(pull_lists=2, pull_groups=GROUPS, per_peer_cap=GROUPS)
    puller = NetworkNode.over_libp2p(
        NetworkNodeSettings(exchange=ExchangeKind.PULL, groups_per_round=1, pull=pull),
        listen="/ip4/127.0.0.1/tcp/0",
        bootstrap=bootstrap,
    )
    key = create_identity(bytes([41]) * 32)
    config = small_config(
        tmp_path / "observer",
        node={"name": "watcher", "role": "observer"},
        p2p={"exchange": "pull"},
        tasks={"preset": "easy", "eval_size": 0},
    )
    settings = TransportSettings(listen_addr="/ip4/127.0.0.1/tcp/0", bootstrap=tuple(bootstrap))
    transport = Libp2pTransport(settings, key_pair=key)
    observer = make_node(config, transport=transport, key_pair=key)
    try:
        puller.start()
        observer.start()
        sender.run_round()
        # over libp2p lists are asked at the end of a round (and at the start) and pulled
        # from in the next: the first round's list was asked before the sender announced
        first = puller.run_round()
        cost = puller.run_round()
        observer.observe()
        observer.observe()
        refused = sender.transport.stats().blob_streams_refused
    finally:
        observer.close()
        puller.close()
        sender.close()
    extra = cost.extra
    assert first.extra["pulls_failed"] == 0, first.extra
    assert extra["pulls"] >= 16, extra
    assert extra["pulls_failed"] == 0, extra
    assert cost.accepted == extra["pulls"] and cost.rejected == 0
    ledger = Ledger(config.ledger_url, create=False)
    try:
        with ledger.reader() as s:
            rows = s.query(GroupRow).filter(GroupRow.direction == "received").all()
    finally:
        ledger.close()
    assert sum(r.sender == peer_id_of(sender.key_pair) for r in rows) >= 16
    assert [(r.status, r.reason) for r in rows if r.status != "accepted"] == []
    assert refused == 0  # neither fetcher was refused `blob_fetch_limit`
