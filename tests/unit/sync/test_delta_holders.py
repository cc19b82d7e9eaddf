"""Deltas from any holder: the trainer sends each delta about once, whatever its followers;
a holder serving other bytes is refused and recorded, and every follower stays bit-exact."""

from __future__ import annotations

import random
import time

from lab.delta_sim import DeltaSimSettings, simulate_deltas
from swarm.p2p.transport import BlobServed, MemoryHub, MemoryTransport
from swarm.sync.holders import (
    MAX_HINTS_BYTES,
    HolderRegistry,
    decode_hints,
    encode_hints,
    pick_holders,
    read_hints,
)
from swarm.wire import HolderHint, holders_key


def test_followers_fetch_from_holders_and_the_trainer_sends_each_delta_about_once():
    holders = simulate_deltas(DeltaSimSettings(followers=12, versions=3, params=4096, hold=4))
    alone = simulate_deltas(DeltaSimSettings(followers=12, versions=3, params=4096, hold=0))
    assert holders["all_in_step"] and alone["all_in_step"]
    assert alone["trainer_payloads_per_version"] == 12
    assert holders["trainer_payloads_per_version"] <= 3
    assert holders["from_holders"] >= 3 * (12 - 3)


def test_a_holder_serving_other_bytes_is_refused_and_everyone_still_gets_the_delta():
    r = simulate_deltas(
        DeltaSimSettings(followers=10, versions=4, params=4096, hold=4, bad_holders=3, seed=3)
    )
    assert r["all_in_step"]
    assert sum(v["bad_holder_refusals"] for v in r["versions"]) > 0


def test_the_registry_names_the_newest_holders_of_the_newest_payloads():
    transport = MemoryTransport("trainer")
    registry = HolderRegistry(transport, "b" * 64)
    registry.note((BlobServed(f"f{i}", "k", 1), "a" * 64) for i in range(12))
    assert registry.holders("a" * 64) == [f"f{i}" for i in range(4, 12)]
    hints = decode_hints(encode_hints(registry.hints()))
    assert hints == registry.hints() and decode_hints(b"junk") == []
    picked = pick_holders(
        [("me", ()), ("trainer", ()), ("x", ()), ("y", ())],
        "me",
        "trainer",
        random.Random(0),
    )
    assert sorted(p for p, _ in picked) == ["x", "y"]
    assert HolderHint("a" * 64, "f4", ()) in hints


def test_hints_longer_than_hints_can_be_are_refused_before_they_are_read():
    """A trainer serving a megabyte as its holder hints: the follower refuses it on its
    announced size and reads none of it; real hints are read as before."""
    hub = MemoryHub()
    trainer, follower = MemoryTransport("trainer", hub), MemoryTransport("follower", hub)
    trainer.start()
    follower.start()
    base = "b" * 64
    trainer.serve_blob(holders_key(base), b"\x00" * (1 << 20))
    assert read_hints(follower, "trainer", base, timeout=1.0) == {}
    assert follower.stats().blob_bytes_in == 0
    most = [HolderHint(f"{i:064x}", "p" * 200, ("a" * 256,) * 4) for i in range(32)]
    assert len(encode_hints(most)) <= MAX_HINTS_BYTES  # the longest hints a trainer serves
    trainer.serve_blob(holders_key(base), encode_hints(most))
    assert len(read_hints(follower, "trainer", base, timeout=1.0)) == 32
    assert follower.stats().blob_bytes_in == len(encode_hints(most))


class SlowTransport(MemoryTransport):
    """A transport whose served-blob list takes a while: a refresh in progress at stop."""

    def served_blobs(self, prefix: str = "") -> list[BlobServed]:
        time.sleep(0.3)
        return super().served_blobs(prefix)


def test_stopping_the_registry_ends_its_refresh_thread():
    registry = HolderRegistry(SlowTransport("trainer"), "b" * 64)
    thread = registry.run_every(0.01)
    assert thread.name == "delta-holders" and thread.is_alive()
    time.sleep(0.05)  # the first refresh is under way
    registry.stop()
    assert not thread.is_alive()
