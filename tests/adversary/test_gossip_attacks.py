"""Transport-level gossip attacks on a victim process: each is refused, counted, recorded with
its reason and (where GossipSub scores apply) penalised, while the victim keeps delivering
an honest peer's messages and its memory stays bounded.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from libp2p.pubsub.pb import rpc_pb2

from swarm.p2p.libp2p import MAX_MESSAGE_SIZE
from swarm.p2p.libp2p.testing import rpc_frame, signed_message, unsigned_message
from tests.adversary.transport_attack import (
    GOSSIP_PROTOCOL,
    TOPIC,
    Scene,
    during,
    publish_paced,
    received_by,
    scene,
    wait_until,
)

LEGIT = 50


@pytest.fixture
def attacked() -> Iterator[Scene]:
    yield from scene()


def _assert_both_directions_work(s: Scene, tag: str) -> None:
    """The attacker is still a peer: its honest messages arrive, and it hears the victim."""
    assert wait_until(lambda: s.attacker.wait_for_topic_peers(TOPIC, 1, timeout=1) >= 1, 10)
    s.attacker.publish(TOPIC, f"{tag}-from-attacker:0:".encode())
    assert wait_until(lambda: s.victim.delivered(f"{tag}-from-attacker") == 1, 10)
    s.victim.call(cmd="publish", prefix=f"{tag}-from-victim", count=1, size=64)
    assert received_by(s.attacker, f"{tag}-from-victim:0:".encode(), 10)


@pytest.mark.timeout(120)
def test_oversize_messages_are_refused_one_by_one_and_the_peer_is_kept(attacked: Scene) -> None:
    s = attacked
    rss_before = s.victim.stats()["rss_mb"]
    big = signed_message(s.attacker_key, TOPIC, b"B" * (MAX_MESSAGE_SIZE + 1))
    # js-libp2p accepts up to 4 MiB: an RPC of 3 MiB is what such a peer may forward.
    huge = signed_message(s.attacker_key, TOPIC, b"H" * (3 * 1024 * 1024))
    stream = s.attacker.open_raw_stream(s.victim.peer_id, GOSSIP_PROTOCOL)

    # Above even the RPC limit: read and dropped, the stream kept.
    giant = signed_message(s.attacker_key, TOPIC, b"G" * (5 * 1024 * 1024))

    def attack() -> None:
        for _ in range(5):
            stream.write(rpc_frame(rpc_pb2.RPC(publish=[big])))
            stream.write(rpc_frame(rpc_pb2.RPC(publish=[huge])))
        stream.write(rpc_frame(rpc_pb2.RPC(publish=[giant])))

    attack_thread = during(attack)
    publish_paced(s.honest, "legit", LEGIT)
    attack_thread.join(60)
    assert wait_until(lambda: s.victim.delivered("legit") == LEGIT, 20)

    stats = s.victim.stats()
    assert stats["stats"]["peer_rejections"].get("oversize_message", 0) == 11
    recorded = [r for r in stats["rejections"] if r["reason"] == "oversize_message"]
    assert recorded and {r["peer"] for r in recorded} == {s.attacker.peer_id}
    assert sum(r["count"] for r in recorded) >= 1
    assert stats["scores"][s.attacker.peer_id] < 0  # penalised
    assert stats["rss_mb"] - rss_before < 100
    _assert_both_directions_work(s, "after-oversize")


@pytest.mark.timeout(120)
def test_unsigned_and_badly_signed_messages_are_counted_and_recorded(attacked: Scene) -> None:
    s = attacked
    unsigned = [unsigned_message(s.attacker_key, TOPIC, b"nosig:%d:" % i) for i in range(5)]
    forged = [signed_message(s.attacker_key, TOPIC, b"forged:%d:" % i) for i in range(5)]
    for msg in forged:
        msg.data = msg.data + b"!"  # the signature no longer covers the content
    stream = s.attacker.open_raw_stream(s.victim.peer_id, GOSSIP_PROTOCOL)
    stream.write(b"".join(rpc_frame(rpc_pb2.RPC(publish=[m])) for m in unsigned + forged))
    publish_paced(s.honest, "legit", LEGIT)
    assert wait_until(lambda: s.victim.delivered("legit") == LEGIT, 20)

    def recorded(reason: str) -> int:
        return s.victim.stats()["stats"]["peer_rejections"].get(reason, 0)

    assert wait_until(lambda: recorded("unsigned_message") == 5, 10)
    assert recorded("bad_message_signature") == 5
    rejections = s.victim.stats()["rejections"]
    unsigned_records = [r for r in rejections if r["reason"] == "unsigned_message"]
    assert unsigned_records and unsigned_records[0]["peer"] == s.attacker.peer_id
    assert unsigned_records[0]["source"] == s.attacker.peer_id
    assert s.victim.delivered("nosig") == 0 and s.victim.delivered("forged") == 0
    assert s.victim.stats()["scores"][s.attacker.peer_id] < 0
