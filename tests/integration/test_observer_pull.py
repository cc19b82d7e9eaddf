"""An observer of a pull swarm (the default exchange): nothing is gossiped, so it records
the swarm by pulling what peers announce, and checks every group it records."""

from __future__ import annotations

from lab.network_node import ExchangeKind, NetworkNode, NetworkNodeSettings
from swarm.core.identity import create_identity, peer_id_of
from swarm.ledger import GroupRow, Ledger
from swarm.node import make_node
from swarm.p2p import MemoryHub, MemoryTransport
from swarm.p2p.memory_links import LinkedMemoryTransport
from tests.conftest import small_config


def test_an_observer_records_a_pull_swarm_by_pulling_what_is_announced(tmp_path):
    hub = MemoryHub()
    senders = []
    for i in range(4):
        key = create_identity(bytes([20 + i]) * 32)
        first = [senders[0].peer_id] if senders else []
        transport = LinkedMemoryTransport(peer_id_of(key), hub, bootstrap=first)
        settings = NetworkNodeSettings(exchange=ExchangeKind.PULL, groups_per_round=4)
        senders.append(NetworkNode(settings, transport, key))
    key = create_identity(bytes([30]) * 32)
    config = small_config(
        tmp_path / "observer",
        node={"name": "watcher", "role": "observer"},
        p2p={"exchange": "pull"},
        tasks={"preset": "easy", "eval_size": 0},
    )
    observer = make_node(config, transport=MemoryTransport(peer_id_of(key), hub), key_pair=key)
    try:
        for node in senders:
            node.start()
        observer.start()
        for _ in range(3):
            for node in senders:
                node.run_round()
            observer.observe()
    finally:
        observer.close()
        for node in senders:
            node.close()
    ledger = Ledger(config.ledger_url, create=False)
    try:
        with ledger.reader() as s:
            rows = s.query(GroupRow).filter(GroupRow.direction == "received").all()
    finally:
        ledger.close()
    assert len(rows) >= 16  # four senders' announced groups, pulled and recorded
    assert {r.status for r in rows} == {"accepted"}
    assert len({r.sender for r in rows}) == 4
