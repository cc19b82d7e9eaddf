"""Blame where it belongs: a message our validator refuses counts against the peer that
signed it, not against an honest relay that forwarded it after its own checks passed.

Three transports in this process: a victim whose validator refuses anything starting with
b"forged", an honest relay that validates nothing of the kind, and a signer connected to the
relay only (not to the victim). The signer publishes 200 forged messages; the relay forwards
them to the victim. Before: each was held against the relay (GossipSub P4), whose score fell
under the publish threshold, and the relay's own messages were then refused.
"""

from __future__ import annotations

import time
from dataclasses import replace

import pytest

from swarm.p2p.libp2p import Libp2pTransport, TransportSettings
from swarm.p2p.transport import InboundMessage
from tests.waiting import wait_until

TOPIC = "blame-test"
FORGED = 200


def refuse_forged(message: InboundMessage) -> str | None:
    return "forged" if message.data.startswith(b"forged") else None


def handled(victim: Libp2pTransport) -> int:
    """Forged messages the victim refused: by its validator, or unvalidated for a low score."""
    stats = victim.stats()
    return stats.rejected.get("forged", 0) + stats.peer_refusals.get("below_publish_score", 0)


@pytest.mark.timeout(120)
def test_a_relay_of_refused_messages_keeps_its_score_and_its_own_messages_arrive() -> None:
    victim = Libp2pTransport(TransportSettings(peer_exchange=False))
    victim.start()
    relay = signer = None
    try:
        victim.subscribe(TOPIC, refuse_forged)
        joining = TransportSettings(
            topics=(TOPIC,), bootstrap=tuple(victim.listen_addrs()), peer_exchange=False
        )
        relay = Libp2pTransport(joining)
        relay.start()
        signer = Libp2pTransport(replace(joining, bootstrap=tuple(relay.listen_addrs())))
        signer.start()
        assert relay.wait_for_topic_peers(TOPIC, 2, timeout=20) == 2
        assert victim.wait_for_topic_peers(TOPIC, 1, timeout=20) == 1
        assert signer.peer_id not in {p.peer_id for p in victim.peers()}
        for i in range(FORGED):
            signer.publish(TOPIC, b"forged %d" % i)
        assert wait_until(lambda: handled(victim) >= FORGED // 2, 20)
        time.sleep(1.0)
        score = victim.peer_scores()[relay.peer_id]
        for i in range(20):
            relay.publish(TOPIC, b"honest %d" % i)
        got: list[bytes] = []
        wait_until(
            lambda: got.extend(m.data for m in victim.receive(timeout=0.2)) or len(got) >= 20, 10
        )
        print(
            f"relay's score at the victim after {FORGED} forged relays: {score:.1f}; "
            f"{len(got)} of 20 of its own messages delivered"
        )
        assert score >= 0
        assert len(got) == 20
    finally:
        for t in (signer, relay, victim):
            if t is not None:
                t.close()
