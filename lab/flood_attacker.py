"""The flood benchmark's hostile processes: an attacker flooding a victim node with one class
of attack, and a follower reading a trainer's holder hints again and again.

Each runs as this module's program under `nice -n 19` (a fresh identity each time, so a
banned one does not carry over) and prints one JSON line of what it sent or measured:

    python -m lab.flood_attacker attack KIND TARGET SECONDS
    python -m lab.flood_attacker follow-hints TARGET SECONDS

`lab.flood_victim` and `lab.flood_bench` start them.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time

from lab.flood_victim import rss_mb

CLASSES = ("duplicates", "garbage", "ihave", "bulk")
HINTS_BASE = "ab" * 32


def _group(key, peer_id: str, index: int, text_chars: int):
    """A valid group of the victim's own task mix, with honest rewards."""
    import msgspec

    from swarm.tasks import EASY_MIX, TaskSpec, build_task
    from swarm.verify.rescore import rescore
    from swarm.wire import RolloutGroup, Sampling, new_nonce

    entry = EASY_MIX[0]
    spec = TaskSpec.make(entry.dataset, entry.config, seed=7, index=index)
    completions = tuple(f"{'x' * text_chars}<answer>{i}</answer>" for i in range(8))
    group = RolloutGroup(
        swarm_id="swarm-local",
        sender=peer_id,
        task=spec,
        question=build_task(spec).question,
        completions=completions,
        rewards=(0.0,) * 8,
        finished=(True,) * 8,
        model="swarm-tiny",
        base_hash="00" * 16,
        policy_version=0,
        sampling=Sampling(temperature=1.0, top_p=1.0, top_k=0, max_new_tokens=8),
        round=index,
        created_at=time.time(),
        nonce=new_nonce(),
        format_bonus=0.1,
    )
    return msgspec.structs.replace(group, rewards=rescore(group, 0.1)[1])


def attack(kind: str, target: str, seconds: float) -> dict:
    """Run one attack on `target` for `seconds`; what was sent."""
    from libp2p.pubsub.pb import rpc_pb2

    from swarm.core.identity import create_identity, peer_id_of
    from swarm.p2p.libp2p import Libp2pTransport, TransportSettings
    from swarm.p2p.libp2p.testing import rpc_frame
    from swarm.wire import pack_messages, rollout_topic
    from swarm.wire.signing import sign_group

    topic = rollout_topic("swarm-local")
    key = create_identity()
    me = peer_id_of(key)
    settings = TransportSettings(bootstrap=(target,), topics=(topic,), peer_exchange=False)
    transport = Libp2pTransport(settings, key_pair=key)
    transport.start()
    sent = nbytes = 0
    try:
        transport.wait_for_topic_peers(topic, 1, timeout=60)
        victim = target.rsplit("/p2p/", 1)[1]
        print(json.dumps({"event": "ready"}), flush=True)  # the window starts now
        deadline = time.monotonic() + seconds
        if kind == "duplicates":
            message = pack_messages([sign_group(_group(key, me, 1, 16), key)])[0]
        stream = None
        while time.monotonic() < deadline:
            try:
                if kind == "duplicates":
                    data = message
                    transport.publish(topic, data)
                elif kind == "garbage":
                    data = os.urandom(256 * 1024)
                    transport.publish(topic, data)
                elif kind == "bulk":
                    data = pack_messages([sign_group(_group(key, me, sent, 20_000), key)])[0]
                    transport.publish(topic, data)
                elif kind == "ihave":
                    if stream is None:
                        stream = transport.open_raw_stream(victim, "/meshsub/1.1.0")
                    ids = [os.urandom(46) for _ in range(4)]
                    entries = [
                        rpc_pb2.ControlIHave(topicID=f"nowhere-{sent}-{i}", messageIDs=ids)
                        for i in range(2000)
                    ]
                    data = rpc_frame(rpc_pb2.RPC(control=rpc_pb2.ControlMessage(ihave=entries)))
                    stream.write(data, timeout=5.0)
                else:
                    raise ValueError(kind)
            except Exception as e:  # noqa: BLE001 - the victim hung up on us: try again
                stream = None
                time.sleep(0.2)
                if time.monotonic() >= deadline:
                    break
                print(f"attacker: {type(e).__name__}: {e}"[:200], file=sys.stderr)
                continue
            sent += 1
            nbytes += len(data)
        transport.flush(timeout=2.0)
    finally:
        transport.close()
    return {"peer_id": me, "sent": sent, "bytes": nbytes}


def follow_hints(target: str, seconds: float) -> dict:
    """A follower's step that reads its trainer's holder hints, again and again for
    `seconds`: each read's time, and this process's RSS growth."""
    from swarm.p2p.libp2p import Libp2pTransport, TransportSettings
    from swarm.sync.holders import read_hints

    transport = Libp2pTransport(TransportSettings(bootstrap=(target,), peer_exchange=False))
    transport.start()
    provider = target.rsplit("/p2p/", 1)[1]
    times, hints = [], 0
    try:
        time.sleep(1.0)
        rss0 = peak = rss_mb(os.getpid())
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            began = time.perf_counter()
            hints = len(read_hints(transport, provider, HINTS_BASE, timeout=30.0))
            times.append(time.perf_counter() - began)
            peak = max(peak, rss_mb(os.getpid()))
            time.sleep(0.2)
    finally:
        transport.close()
    return {
        "reads": len(times),
        "median_s": round(statistics.median(times), 4) if times else None,
        "max_s": round(max(times), 3) if times else None,
        "rss_growth_mb": round(peak - rss0, 1),
        "hints": hints,
    }


def main(argv: list[str]) -> int:
    """`attack KIND TARGET SECONDS` or `follow-hints TARGET SECONDS`: one JSON line."""
    if argv[0] == "attack":
        print(json.dumps(attack(argv[1], argv[2], float(argv[3]))), flush=True)
    else:
        print(json.dumps(follow_hints(argv[1], float(argv[2]))), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
