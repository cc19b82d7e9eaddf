"""Scaffolding for transport-level attacks: a victim process, an honest peer and an attacker.

The victim is tests/adversary/victim_peer.py in its own process (so its RSS is its own);
the honest peer and the attacker are `Libp2pTransport`s in the test process, both
bootstrapped from the victim, all on 127.0.0.1. The attacker is a real libp2p host that
also sends what an honest node never would, through `open_raw_stream` and the builders in
`swarm.p2p.libp2p.testing`.
"""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from swarm.core.identity import create_identity
from swarm.p2p.libp2p import Libp2pTransport, TransportSettings

ROOT = Path(__file__).resolve().parents[2]
TOPIC = "attack-test"
GOSSIP_PROTOCOL = "/meshsub/1.1.0"


class Victim:
    """Drives victim_peer.py over its stdin/stdout."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.adversary.victim_peer", "--topic", TOPIC],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd=ROOT,
        )
        ready = json.loads(self.proc.stdout.readline())
        self.peer_id: str = ready["peer_id"]
        self.addrs: list[str] = ready["addrs"]
        self._ids = itertools.count()
        self._lock = threading.Lock()

    def call(self, **cmd: object) -> dict:
        with self._lock:
            cmd["id"] = next(self._ids)
            self.proc.stdin.write(json.dumps(cmd) + "\n")
            self.proc.stdin.flush()
            reply = json.loads(self.proc.stdout.readline())
        assert reply["ok"], reply
        return reply

    def stats(self) -> dict:
        return self.call(cmd="stats")

    def delivered(self, prefix: str) -> int:
        return self.call(cmd="received")["counts"].get(prefix, 0)

    def refusals(self, reason: str) -> list[dict]:
        return [r for r in self.stats()["refusals"] if r["reason"] == reason]

    def close(self) -> None:
        try:
            self.proc.stdin.close()
            self.proc.wait(timeout=15)
        finally:
            self.proc.kill()


@dataclass
class Scene:
    victim: Victim
    honest: Libp2pTransport
    attacker: Libp2pTransport
    attacker_key: object  # the attacker's KeyPair, for signing its hand-made messages


def scene() -> Iterator[Scene]:
    """A victim with an honest peer and an attacker meshed with it on TOPIC (fixture body)."""
    victim = Victim()
    attacker_key = create_identity()
    joining = TransportSettings(topics=(TOPIC,), bootstrap=tuple(victim.addrs), peer_exchange=False)
    honest = Libp2pTransport(joining)
    attacker = Libp2pTransport(joining, key_pair=attacker_key)
    try:
        honest.start()
        attacker.start()
        assert honest.wait_for_topic_peers(TOPIC, 1, timeout=15) == 1
        assert attacker.wait_for_topic_peers(TOPIC, 1, timeout=15) == 1
        assert victim.call(cmd="wait_mesh", n=2, timeout=15)["mesh"] >= 2
        yield Scene(victim, honest, attacker, attacker_key)
    finally:
        attacker.close()
        honest.close()
        victim.close()


def publish_paced(sender: Libp2pTransport, prefix: str, count: int, pace: float = 0.02) -> None:
    """`count` messages "prefix:i:" from `sender`, one every `pace` seconds."""
    for i in range(count):
        sender.publish(TOPIC, f"{prefix}:{i}:".encode() + b"x" * 200)
        time.sleep(pace)


def during(attack: Callable[[], None]) -> threading.Thread:
    """Run `attack` in a thread (started); join it to wait for the attack to end."""
    thread = threading.Thread(target=attack, daemon=True)
    thread.start()
    return thread


def received_by(receiver: Libp2pTransport, prefix: bytes, timeout: float) -> bool:
    """Whether a message starting with `prefix` reaches `receiver` within `timeout` s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if any(m.data.startswith(prefix) for m in receiver.receive(timeout=0.2)):
            return True
    return False
