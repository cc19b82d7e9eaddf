"""Transport-level gossip attacks on a victim process: each is refused, counted, recorded with
its reason and (where GossipSub scores apply) penalised, while the victim keeps delivering
an honest peer's messages and its memory stays bounded.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator

import pytest
from libp2p.peer.id import ID
from libp2p.pubsub.pb import rpc_pb2

from swarm.core.identity import create_identity, peer_id_of
from swarm.p2p.libp2p import MAX_MESSAGE_SIZE
from swarm.p2p.libp2p.testing import (
    message_id,
    rpc_frame,
    signed_message,
    signed_peer_record,
    unsigned_message,
)
from tests.adversary.transport_attack import (
    GOSSIP_PROTOCOL,
    TOPIC,
    Scene,
    during,
    publish_paced,
    received_by,
    scene,
)
from tests.waiting import wait_until

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
    assert stats["stats"]["peer_refusals"].get("oversize_message", 0) == 11
    recorded = [r for r in stats["refusals"] if r["reason"] == "oversize_message"]
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
        return s.victim.stats()["stats"]["peer_refusals"].get(reason, 0)

    assert wait_until(lambda: recorded("unsigned_message") == 5, 10)
    assert recorded("bad_message_signature") == 5
    refusals = s.victim.stats()["refusals"]
    unsigned_records = [r for r in refusals if r["reason"] == "unsigned_message"]
    assert unsigned_records and unsigned_records[0]["peer"] == s.attacker.peer_id
    assert unsigned_records[0]["source"] == s.attacker.peer_id
    assert s.victim.delivered("nosig") == 0 and s.victim.delivered("forged") == 0
    assert s.victim.stats()["scores"][s.attacker.peer_id] < 0


def _control(**parts: object) -> bytes:
    return rpc_frame(rpc_pb2.RPC(control=rpc_pb2.ControlMessage(**parts)))


@pytest.mark.timeout(120)
def test_an_iwant_flood_is_answered_within_a_small_budget(attacked: Scene) -> None:
    s = attacked
    cached = [
        signed_message(s.attacker_key, TOPIC, b"cached:%d:" % i + b"c" * 20_000) for i in range(5)
    ]
    stream = s.attacker.open_raw_stream(s.victim.peer_id, GOSSIP_PROTOCOL)
    stream.write(b"".join(rpc_frame(rpc_pb2.RPC(publish=[m])) for m in cached))
    assert wait_until(lambda: s.victim.delivered("cached") == 5, 10)
    # The victim now holds them in its message cache (5 heartbeats): ask for them, again and again.
    iwant = _control(iwant=[rpc_pb2.ControlIWant(messageIDs=[message_id(m) for m in cached] * 40)])
    written_before = s.victim.stats()["bytes_written"]
    sent = 0

    def attack() -> None:
        nonlocal sent
        for _ in range(100):
            stream.write(iwant)
            sent += len(iwant)

    attack_thread = during(attack)
    publish_paced(s.honest, "legit", LEGIT)
    attack_thread.join(60)
    assert wait_until(lambda: s.victim.delivered("legit") == LEGIT, 20)
    time.sleep(1.0)
    stats = s.victim.stats()
    ratio = (stats["bytes_written"] - written_before) / sent
    print(f"IWANT flood: {sent} bytes in, victim wrote {ratio:.2f} bytes per byte in")
    assert ratio < 2.0, f"amplification {ratio:.1f}x"
    served = stats["stats"]["iwant_served_bytes"]
    assert 0 < served <= 3 * sum(m.ByteSize() for m in cached)  # each at most 3 times
    assert stats["stats"]["iwant_refused"] > 0
    assert any(r["reason"] == "gossip_control_flood" for r in stats["refusals"])
    assert stats["scores"][s.attacker.peer_id] < 0


@pytest.mark.timeout(120)
def test_an_ihave_flood_does_not_stall_delivery(attacked: Scene) -> None:
    s = attacked
    fake_ids = [os.urandom(46) for _ in range(5000)]
    ihave = _control(ihave=[rpc_pb2.ControlIHave(topicID=TOPIC, messageIDs=fake_ids)] * 10)
    stream = s.attacker.open_raw_stream(s.victim.peer_id, GOSSIP_PROTOCOL)
    written_before = s.victim.stats()["bytes_written"]
    sent = 0

    def attack() -> None:
        nonlocal sent
        for _ in range(40):
            stream.write(ihave)
            sent += len(ihave)

    began = time.monotonic()
    attack_thread = during(attack)
    publish_paced(s.honest, "legit", LEGIT)
    assert wait_until(lambda: s.victim.delivered("legit") == LEGIT, 20)
    delivered_after = time.monotonic() - began
    attack_thread.join(60)
    stats = s.victim.stats()
    ratio = (stats["bytes_written"] - written_before) / sent
    print(
        f"IHAVE flood: {sent} bytes in, all {LEGIT} delivered after {delivered_after:.1f} s, "
        f"victim wrote {ratio:.3f} bytes per byte in"
    )
    assert delivered_after < LEGIT * 0.02 + 5.0
    assert ratio < 0.1  # at most 5000 IDs asked for per heartbeat
    assert stats["stats"]["ihave_ignored"] > 0
    assert any(r["reason"] == "gossip_control_flood" for r in stats["refusals"])
    assert stats["scores"][s.attacker.peer_id] < 0


@pytest.mark.timeout(120)
def test_ihave_for_unknown_topics_is_bounded_per_rpc_and_penalised(attacked: Scene) -> None:
    """RPCs of 2,000 IHAVE entries under made-up topics: each is refused whole before any
    entry is looked at, counted, and held against the sender's score; a small one for an
    unknown topic costs a penalty too. Before: ignored one entry at a time, score untouched."""
    s = attacked
    fake_ids = [os.urandom(46) for _ in range(4)]
    made_up = [
        rpc_pb2.ControlIHave(topicID=f"nowhere-{i}", messageIDs=fake_ids) for i in range(2000)
    ]
    stream = s.attacker.open_raw_stream(s.victim.peer_id, GOSSIP_PROTOCOL)
    stream.write(_control(ihave=made_up[:3]))
    flood = _control(ihave=made_up)
    for _ in range(20):
        stream.write(flood)
    publish_paced(s.honest, "legit", LEGIT)
    assert wait_until(lambda: s.victim.delivered("legit") == LEGIT, 20)
    stats = s.victim.stats()
    assert stats["stats"]["control_refused"] >= 2000
    # refused whole before any entry is looked at: by the per-RPC bound, or (a 0.4 MB RPC)
    # dropped unparsed by the sender's cost budget, whichever comes first
    assert any(
        (r["reason"] == "gossip_control_flood" and "control entries in one RPC" in r["detail"])
        or (r["reason"] == "over_cost_budget" and "dropped unparsed" in r["detail"])
        for r in stats["refusals"]
    )
    assert any("topic we are not in" in r["detail"] for r in stats["refusals"])
    assert stats["scores"][s.attacker.peer_id] < -10


@pytest.mark.timeout(120)
def test_graft_and_prune_floods_and_backoff_violations_are_penalised(attacked: Scene) -> None:
    s = attacked
    stream = s.attacker.open_raw_stream(s.victim.peer_id, GOSSIP_PROTOCOL)
    stream.write(_control(prune=[rpc_pb2.ControlPrune(topicID=TOPIC, backoff=60)]))
    written_before = s.victim.stats()["bytes_written"]
    grafts = _control(graft=[rpc_pb2.ControlGraft(topicID=TOPIC)] * 100)
    strangers = _control(
        graft=[rpc_pb2.ControlGraft(topicID=f"nowhere-{i}") for i in range(500)],
        prune=[rpc_pb2.ControlPrune(topicID=f"nowhere-{i}", backoff=60) for i in range(500)],
    )
    sent = 0

    def attack() -> None:
        nonlocal sent
        for _ in range(20):
            stream.write(grafts + strangers)
            sent += len(grafts) + len(strangers)

    attack_thread = during(attack)
    publish_paced(s.honest, "legit", LEGIT)
    attack_thread.join(60)
    assert wait_until(lambda: s.victim.delivered("legit") == LEGIT, 20)
    time.sleep(1.0)
    stats = s.victim.stats()
    written = stats["bytes_written"] - written_before
    print(f"GRAFT/PRUNE flood: {sent} bytes in, victim wrote {written} bytes")
    assert written < sent / 20  # no PRUNE answer per GRAFT
    reasons = {r["reason"] for r in stats["refusals"]}
    assert {"gossip_backoff_violation", "gossip_control_flood"} <= reasons
    assert stats["scores"][s.attacker.peer_id] < 0


@pytest.mark.timeout(120)
def test_prune_peer_exchange_from_a_new_peer_is_not_dialled(attacked: Scene) -> None:
    s = attacked
    decoy = create_identity()
    decoy_id = peer_id_of(decoy)
    record = signed_peer_record(decoy, ["/ip4/127.0.0.1/tcp/9"])
    px = rpc_pb2.PeerInfo(peerID=ID.from_base58(decoy_id).to_bytes(), signedPeerRecord=record)
    stream = s.attacker.open_raw_stream(s.victim.peer_id, GOSSIP_PROTOCOL)
    stream.write(_control(prune=[rpc_pb2.ControlPrune(topicID=TOPIC, backoff=60, peers=[px] * 20)]))
    assert wait_until(lambda: s.victim.stats()["stats"]["px_ignored"] >= 20, 10)
    time.sleep(1.5)
    assert s.victim.stats()["stats"]["dial_failures"] == 0  # nothing was dialled


@pytest.mark.timeout(120)
def test_a_peer_past_its_cost_budget_is_graylisted_then_banned_and_stays_out(
    attacked: Scene,
) -> None:
    """RPCs of 100 refused (unsigned) messages, for as long as the victim reads them: each
    costs the peer its handling and a refusal, so it passes its budget: its RPCs are then
    dropped unparsed, it is disconnected and banned with the reason recorded, and cannot
    connect again. Before: refused one by one (then, under the graylist score, one RPC at
    a time) for as long as it kept sending, and never disconnected."""
    s = attacked
    stream = s.attacker.open_raw_stream(s.victim.peer_id, GOSSIP_PROTOCOL)
    sent = 0

    def attack() -> None:
        nonlocal sent
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            junk = [
                unsigned_message(s.attacker_key, TOPIC, b"junk:%d:" % (sent + i))
                for i in range(100)
            ]
            try:
                stream.write(rpc_frame(rpc_pb2.RPC(publish=junk)), timeout=2.0)
            except Exception:  # noqa: BLE001 - the victim hung up on the banned peer
                return
            sent += 1

    attack_thread = during(attack)
    publish_paced(s.honest, "legit", LEGIT)
    assert wait_until(lambda: s.victim.delivered("legit") == LEGIT, 20)
    assert wait_until(lambda: s.victim.stats()["stats"]["cost_bans"] == 1, 20)
    attack_thread.join(30)
    stats = s.victim.stats()
    print(
        f"cost ban after {sent} RPCs of 100 unsigned messages; {stats['stats']['graylisted_rpcs']} dropped unparsed"
    )
    bans = [
        r
        for r in stats["refusals"]
        if r["reason"] == "over_cost_budget" and "banned" in r["detail"]
    ]
    assert bans and bans[0]["peer"] == s.attacker.peer_id
    assert "refusal" in bans[0]["detail"]
    assert stats["stats"]["graylisted_rpcs"] > 0
    assert wait_until(lambda: s.attacker.peer_id not in s.victim.call(cmd="peers")["peers"], 10)
    time.sleep(2.0)  # the attacker's dialer tries again: each connection is closed at once
    assert s.attacker.peer_id not in s.victim.call(cmd="peers")["peers"]
