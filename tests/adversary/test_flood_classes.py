"""Floods the validator refuses, duplicates of one message and undecodable garbage, end in a
ban: each refused message costs its sender its handling and a refusal, so a sender that
keeps at it passes its cost budget, is graylisted (its RPCs skipped unparsed), then
disconnected and banned, while an honest peer's messages keep arriving. Before: every one
was received, parsed, verified and refused, for as long as the sender kept sending.

In this process: a victim transport whose validator refuses a payload it has seen before
and anything that is not b"ok..."; an attacker and an honest peer bootstrapped from it.
"""

from __future__ import annotations

import os
import threading
import time

import pytest

from swarm.p2p.libp2p import Libp2pTransport, TransportSettings
from swarm.p2p.transport import InboundMessage
from tests.waiting import wait_until

TOPIC = "flood-test"


class Validator:
    def __init__(self) -> None:
        self.seen: set[bytes] = set()
        self.lock = threading.Lock()

    def __call__(self, message: InboundMessage) -> str | None:
        if not message.data.startswith(b"ok"):
            return "undecodable"
        with self.lock:
            if message.data in self.seen:
                return "duplicate"
            self.seen.add(message.data)
        return None


@pytest.mark.timeout(120)
@pytest.mark.parametrize("kind", ["duplicates", "garbage"])
def test_a_flood_the_validator_refuses_ends_in_a_ban(kind: str) -> None:
    victim = Libp2pTransport(TransportSettings(peer_exchange=False))
    victim.start()
    honest = attacker = None
    try:
        victim.subscribe(TOPIC, Validator())
        addrs = victim.listen_addrs()
        joining = TransportSettings(topics=(TOPIC,), bootstrap=tuple(addrs), peer_exchange=False)
        honest = Libp2pTransport(joining)
        attacker = Libp2pTransport(joining)
        honest.start()
        attacker.start()
        assert victim.wait_for_topic_peers(TOPIC, 2, timeout=20) == 2
        payload = b"ok the one message" if kind == "duplicates" else b""
        began, sent = time.monotonic(), 0
        while time.monotonic() - began < 20 and "banned_for_s" not in str(victim.peer_costs()):
            for _ in range(50):
                data = payload or os.urandom(4096)
                attacker.publish(TOPIC, data)
                sent += 1
            time.sleep(0.05)
        costs = victim.peer_costs()
        ban = costs.get(attacker.peer_id, {})
        print(f"{kind}: banned after {sent} messages in {time.monotonic() - began:.1f} s: {ban}")
        assert "banned_for_s" in ban and "refusal" in ban["reason"]
        assert victim.stats().cost_bans == 1
        assert wait_until(lambda: attacker.peer_id not in {p.peer_id for p in victim.peers()}, 10)
        for i in range(10):
            honest.publish(TOPIC, b"ok honest %d" % i)
        got: list[bytes] = []
        wait_until(
            lambda: got.extend(m.data for m in victim.receive(timeout=0.2)) or len(got) >= 10, 10
        )
        assert sorted(got) == sorted(b"ok honest %d" % i for i in range(10)) or len(got) >= 10
    finally:
        for t in (attacker, honest, victim):
            if t is not None:
                t.close()
