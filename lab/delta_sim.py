"""A trainer and N followers in one process: what the trainer uploads per version.

The real `DeltaPublisher` and `DeltaFollower`s on in-memory transports, over bf16 weights
of `params` values of which a share `changed` moves each version (a sparse update, as
GRPO's are). Each version the trainer publishes a delta; the followers then sync one after
another in a random order (their rounds are not aligned), each reading the trainer's
index and, with `hold`, its holder hints; the trainer's hints are refreshed after each
follower (its refresher thread runs every second, followers sync seconds apart). Measured
per version: the bytes the trainer uploaded (payloads, index and hints, one-byte reports),
the most any one follower uploaded, and whether every follower ended bit-identical to the
trainer. `bad_holders` followers serve other bytes than they should: each is refused and
recorded by whoever tries it, and everyone still reaches the trainer's weights.
"""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass

import torch

from swarm.core.identity import create_identity, peer_id_of
from swarm.core.reasons import Status
from swarm.p2p.transport import MemoryHub, MemoryTransport
from swarm.sync.follower import DeltaFollower
from swarm.sync.publisher import DeltaPublisher
from swarm.sync.rules import Expectation
from swarm.wire import held_key


@dataclass(frozen=True)
class DeltaSimSettings:
    followers: int
    versions: int = 5
    params: int = 1 << 18
    changed: float = 0.02
    hold: int = 4  # 0: every follower fetches from the trainer
    bad_holders: int = 0
    seed: int = 0


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def simulate_deltas(s: DeltaSimSettings) -> dict:
    rng = random.Random(s.seed)
    torch.manual_seed(s.seed)
    hub, clock = MemoryHub(), _Clock()
    key = create_identity(rng.randbytes(32))
    trainer_id = peer_id_of(key)
    trainer = MemoryTransport(trainer_id, hub)
    trainer.start()
    weights = {"w": torch.randn(s.params).to(torch.bfloat16)}
    publisher = DeltaPublisher(
        trainer,
        key,
        peer_id=trainer_id,
        swarm_id="s",
        model="m",
        base_hash="b" * 64,
        anchor_every=1000,
        keep_deltas=20,
        clock=clock,
    )
    publisher.start(weights, 0)
    expect = Expectation(
        provider=trainer_id, swarm_id="s", model="m", base_hash="b" * 64, max_bytes=1 << 30
    )
    followers = []
    for _ in range(s.followers):
        transport = MemoryTransport(peer_id_of(create_identity(rng.randbytes(32))), hub)
        transport.start()
        followers.append(
            DeltaFollower(
                transport, expect, {"w": weights["w"].clone()}, 0, hold=s.hold, clock=clock
            )
        )
    bad = {f.transport.peer_id for f in followers[: s.bad_holders]}
    rows = []
    for version in range(1, s.versions + 1):
        weights = {"w": weights["w"].clone()}
        moved = torch.rand(s.params) < s.changed
        weights["w"][moved] += torch.randn(int(moved.sum())).to(torch.bfloat16)
        publisher.publish(weights, version)
        before = {f.transport.peer_id: f.transport.stats().blob_bytes_out for f in followers}
        trainer_before = trainer.stats().blob_bytes_out
        order = list(followers)
        rng.shuffle(order)
        refusals = 0
        for follower in order:
            clock.now += 30.0  # the index (polled every 10 s) is due at every sync
            result = follower.sync()
            refusals += sum(e.status == Status.REJECTED and e.peer in bad for e in result.events)
            if follower.transport.peer_id in bad:  # it serves garbage from now on
                for payload in follower.held.held() if follower.held else []:
                    follower.transport.serve_blob(held_key(payload), b"\x00" * 64)
            publisher.holders.refresh()
        served = [e for e in publisher.served_events() if e.status == Status.SERVED]
        uploads = [
            f.transport.stats().blob_bytes_out - before[f.transport.peer_id] for f in followers
        ]
        rows.append(
            {
                "version": version,
                "payload_bytes": publisher.served()[-1].size,
                "trainer_upload": trainer.stats().blob_bytes_out - trainer_before,
                "trainer_payload_uploads": len(served),  # full payloads the trainer sent
                "max_follower_upload": max(uploads, default=0),
                "in_step": sum(
                    f.version == version and torch.equal(f.weights["w"], weights["w"])
                    for f in followers
                ),
                "bad_holder_refusals": refusals,
            }
        )
    return {
        "settings": asdict(s),
        "versions": rows,
        "trainer_upload_per_version": sum(r["trainer_upload"] for r in rows) / len(rows),
        "trainer_payloads_per_version": sum(r["trainer_payload_uploads"] for r in rows) / len(rows),
        "payload_bytes": sum(r["payload_bytes"] for r in rows) / len(rows),
        "from_holders": sum(f.from_holders for f in followers),
        "all_in_step": all(r["in_step"] == s.followers for r in rows),
    }
