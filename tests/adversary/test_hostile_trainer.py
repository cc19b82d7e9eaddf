"""A follower over real libp2p against a hostile trainer process (hostile_trainer.py here).

The trainer signs honest-looking manifests (listed in its index blob) and then serves their
payloads badly: a 1 GiB answer to a manifest of 1,300 bytes, one byte every 2 s, a payload
for other tensors, an anchor it announces and never serves. The follower (`DeltaFollower`
on a `Libp2pTransport` in this process) must refuse each with its reason, reading no more
than it must, within bounded time and memory, and still apply what is served properly.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import blake3
import msgspec
import numpy as np
import pytest
import torch

from swarm.core.identity import create_identity, peer_id_of
from swarm.p2p.libp2p import Libp2pTransport, TransportSettings
from swarm.policy.delta import encode_anchor, encode_delta, read_header
from swarm.sync.follower import DeltaFollower
from swarm.sync.rules import Expectation
from swarm.wire import DeltaManifest, index_key, pack_manifests, payload_key
from swarm.wire.signing import sign_manifest
from tests.unit.sync.test_sync import base_weights, clone, same_bits, step

ROOT = Path(__file__).resolve().parents[2]
SEED = "5a" * 32
TRAINER_KEY = create_identity(bytes.fromhex(SEED))
TRAINER = peer_id_of(TRAINER_KEY)
SWARM = "swarm-hostile"
GIB = 1 << 30


def _manifest(base: str, blob: bytes, kind="delta", a=0, b=1, **changes) -> DeltaManifest:
    m = DeltaManifest(
        swarm_id=SWARM,
        provider=TRAINER,
        model="m",
        base_hash=base,
        kind=kind,
        from_version=a if kind == "delta" else -1,
        to_version=b,
        size=len(blob),
        payload_hash=blake3.blake3(blob).hexdigest(),
        result_hash=read_header(blob).result_hash.hex(),
        key=payload_key(base, kind, a if kind == "delta" else -1, b),
        created_at=time.time(),
    )
    return msgspec.structs.replace(m, **changes)


class Scenario:
    """Blobs and signed manifests of one base (so one index key), and their serving plan."""

    def __init__(self, folder: Path, base: str) -> None:
        self.folder, self.base, self.plan, self.manifests = folder, base, {}, []

    def add(self, m: DeltaManifest, blob: bytes | None, mode: str = "serve", **how) -> None:
        self.manifests.append(m)
        if blob is not None:
            path = self.folder / f"{len(self.plan)}-{self.base[:4]}.bin"
            path.write_bytes(blob)
            self.plan[m.key] = {"mode": mode, "file": str(path), **how}

    def finish(self) -> dict:
        index = pack_manifests(sign_manifest(m, TRAINER_KEY) for m in self.manifests)
        path = self.folder / f"index-{self.base[:4]}.bin"
        path.write_bytes(index)
        return {index_key(self.base): {"mode": "serve", "file": str(path)}, **self.plan}


def _weights_chain(n: int):
    rng = np.random.default_rng(7)
    chain = [base_weights()]
    for _ in range(n):
        chain.append(step(chain[-1], rng))
    return chain


@pytest.fixture(scope="module")
def hostile(tmp_path_factory) -> Iterator[dict]:
    folder = tmp_path_factory.mktemp("hostile")
    w = _weights_chain(2)
    d01 = encode_delta(w[0], w[1], from_version=0, to_version=1)
    d12 = encode_delta(w[1], w[2], from_version=1, to_version=2)
    plan, scenarios = {}, {}

    lie = Scenario(folder, "a1" * 32)  # a manifest of 1,300 bytes, answered with 1 GiB
    lie.add(_manifest(lie.base, d01, size=1300), d01, mode="lie", announce=GIB)
    drip = Scenario(folder, "b2" * 32)  # the right payload, a byte every 2 s
    drip.add(_manifest(drip.base, d01), d01, mode="drip")
    far = Scenario(folder, "c3" * 32)  # an anchor at an absurd version, never served
    anchor = encode_anchor(w[2], version=10**9)
    far.add(_manifest(far.base, anchor, kind="anchor", b=10**9), None)
    far.add(_manifest(far.base, d01), d01)
    far.add(_manifest(far.base, d12, a=1, b=2), d12)
    other = Scenario(folder, "d4" * 32)  # an anchor of other, larger tensors
    big = {"huge": torch.randn(4096, 4096).to(torch.bfloat16), **w[2]}
    big_anchor = encode_anchor(big, version=3)
    other.add(_manifest(other.base, big_anchor, kind="anchor", b=3), big_anchor)
    for name, s in {"lie": lie, "drip": drip, "far": far, "other": other}.items():
        plan.update(s.finish())
        scenarios[name] = s
    (folder / "plan.json").write_text(json.dumps(plan))
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.adversary.hostile_trainer",
            "--seed",
            SEED,
            "--plan",
            str(folder / "plan.json"),
            "--max-lifetime",
            "240",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    ready = json.loads(proc.stdout.readline())
    settings = TransportSettings(
        listen_addr="/ip4/127.0.0.1/tcp/0", bootstrap=tuple(ready["addrs"])
    )
    transport = Libp2pTransport(settings)
    transport.start()

    def sent() -> dict[str, int]:
        proc.stdin.write('{"cmd": "sent"}\n')
        proc.stdin.flush()
        return json.loads(proc.stdout.readline())["sent"]

    try:
        yield {"transport": transport, "scenarios": scenarios, "weights": w, "sent": sent}
    finally:
        transport.close()
        proc.stdin.close()
        try:
            proc.wait(timeout=20)
        finally:
            proc.kill()


def _follower(hostile: dict, name: str) -> DeltaFollower:
    s = hostile["scenarios"][name]
    expect = Expectation(TRAINER, SWARM, "m", s.base, max_bytes=GIB)
    return DeltaFollower(hostile["transport"], expect, clone(hostile["weights"][0]))


def _rss_mb(field: str) -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    raise AssertionError(field)


@pytest.mark.timeout(120)
def test_a_1_gib_answer_to_a_small_manifest_is_refused_before_it_is_read(hostile):
    follower = _follower(hostile, "lie")
    Path("/proc/self/clear_refs").write_text("5")  # the peak RSS counts from here
    rss_before = _rss_mb("VmRSS")
    t0 = time.monotonic()
    result = follower.sync()
    seconds = time.monotonic() - t0
    peak = _rss_mb("VmHWM") - rss_before
    key = hostile["scenarios"]["lie"].manifests[0].key
    sent = hostile["sent"]()[key]
    print(
        f"1 GiB answer to a 1,300-byte manifest: refused in {seconds:.2f} s, "
        f"peak RSS +{peak:.0f} MB, {sent / 1e6:.1f} MB sent by the trainer"
    )
    assert [(e.status, e.reason) for e in result.events] == [("rejected", "bad_size")]
    assert follower.version == 0 and seconds < 5 and peak < 64 and sent < 32e6


@pytest.mark.timeout(120)
def test_a_trainer_serving_a_byte_every_2_s_costs_a_few_seconds_once(hostile):
    follower = _follower(hostile, "drip")
    t0 = time.monotonic()
    first = follower.sync()
    first_s = time.monotonic() - t0
    t0 = time.monotonic()
    second = follower.sync()  # the next round: backed off, no fetch
    second_s = time.monotonic() - t0
    print(f"a byte every 2 s: first sync {first_s:.1f} s, the next one {second_s:.2f} s")
    assert [(e.status, e.reason) for e in first.events] == [("rejected", "fetch_too_slow")]
    assert "below the floor" in first.events[0].detail
    assert first_s < follower.grace_s + 4 and second.events == [] and second_s < 1


@pytest.mark.timeout(120)
def test_an_anchor_never_served_gives_way_to_the_served_deltas(hostile):
    follower = _follower(hostile, "far")
    result = follower.sync()
    assert [(e.kind, e.status, e.reason) for e in result.events] == [
        ("anchor", "rejected", "fetch_failed"),
        ("delta", "applied", ""),
        ("delta", "applied", ""),
    ]
    assert result.version == 2 and same_bits(follower.weights, hostile["weights"][2])


@pytest.mark.timeout(120)
def test_a_payload_for_other_tensors_is_refused_by_its_header_not_read_in_full(hostile):
    follower = _follower(hostile, "other")
    result = follower.sync()
    key = hostile["scenarios"]["other"].manifests[0].key
    size = hostile["scenarios"]["other"].manifests[0].size
    sent = hostile["sent"]()[key]
    print(f"anchor for other tensors: {sent / 1e6:.1f} of {size / 1e6:.1f} MB sent")
    assert [(e.status, e.reason) for e in result.events] == [("rejected", "wrong_tensors")]
    assert "unknown ['huge']" in result.events[0].detail
    assert sent < size / 4 and follower.version == 0
