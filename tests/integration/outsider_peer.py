"""An outsider trying to get into a private cluster, in its own process (for test_private_cluster.py).

It bootstraps from the members' addresses with its own key (or a given PSK), publishes
validly signed rollout groups of its own on the cluster's topic every 0.3 s for --duration
seconds, and prints one JSON line: its peer ID, how many it published, the largest number
of peers it ever saw connected, and how long closing took. A member must never record
anything of it. It exits by itself after the duration.
"""

from __future__ import annotations

import argparse
import json
import os
import time

import msgspec

from swarm.core.identity import create_identity, peer_id_of
from swarm.p2p.libp2p import Libp2pTransport, TransportSettings
from swarm.tasks import PRESET_MIXES, build_task, sample_specs, score_completion
from swarm.wire import RolloutGroup, Sampling, pack_messages
from swarm.wire.signing import sign_group


def make_group(key, swarm_id: str) -> RolloutGroup:
    """A correct group from this outsider: signed validly, only the gate can keep it out."""
    spec = sample_specs(PRESET_MIXES["easy"], seed=99, round_index=0, count=1)[0]
    task = build_task(spec)
    completions = (f"<answer>{task.answer}</answer>", "<answer>0</answer>")
    return RolloutGroup(
        swarm_id=swarm_id,
        sender=peer_id_of(key),
        task=spec,
        question=task.question,
        completions=completions,
        rewards=tuple(score_completion(task, c, 0.1) for c in completions),
        finished=(True, True),
        model="swarm-tiny",
        base_hash="",
        policy_version=0,
        round=0,
        created_at=time.time(),
        sampling=Sampling(temperature=1.0, top_p=1.0, top_k=0, max_new_tokens=8),
        format_bonus=0.1,
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--psk", default=None)
    parser.add_argument("--bootstrap", action="append", default=[])
    parser.add_argument("--swarm-id", required=True)
    parser.add_argument("--duration", type=float, default=10.0)
    parser.add_argument("--dial-timeout", type=float, default=3.0)
    args = parser.parse_args()
    key = create_identity()
    template = make_group(
        key, args.swarm_id
    )  # builds the task (slow imports) before the clock starts
    topic = f"swarm/{args.swarm_id}/rollouts/v1"
    settings = TransportSettings(
        bootstrap=tuple(args.bootstrap), psk=args.psk, dial_timeout=args.dial_timeout
    )
    transport = Libp2pTransport(settings, key_pair=key)
    transport.start()
    transport.subscribe(topic)
    published, most_peers, index = 0, 0, 0
    deadline = time.monotonic() + args.duration
    while time.monotonic() < deadline:
        most_peers = max(most_peers, len(transport.peers()))
        now, nonce = time.time(), os.urandom(16)
        group = msgspec.structs.replace(template, round=index, created_at=now, nonce=nonce)
        transport.publish(topic, pack_messages([sign_group(group, key)])[0])
        published += 1
        index += 1
        time.sleep(0.3)
    t = time.monotonic()
    transport.close()
    print(
        json.dumps(
            {
                "peer_id": peer_id_of(key),
                "published": published,
                "most_peers": most_peers,
                "close_s": time.monotonic() - t,
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    main()
