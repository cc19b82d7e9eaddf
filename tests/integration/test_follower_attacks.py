"""A generator-role node following a hostile trainer, in one process (MemoryTransport).

The trainer is a bare `DeltaPublisher` over the tiny model's weights that signs and serves
what the test tells it to: a delta of NaN weights (which crashed the follower's next
generation, and again after every restart), a delta of huge finite weights that make the
model's logits overflow, and a flood of manifests from a peer the node does not follow.
The node must keep running rounds at its last good version, record each refusal once in
its ledger with its reason, and never fetch a refused payload again after a restart.
"""

from __future__ import annotations

import math
import statistics
import time

import torch

from swarm.core.identity import create_identity, peer_id_of
from swarm.ledger import DeltaRow, Ledger, get_meta
from swarm.monitor.display import Reporter
from swarm.node import Node
from swarm.node.delta_sync import REFUSED_KEY
from swarm.p2p import MemoryHub, MemoryTransport
from swarm.policy.delta import bf16_state_dict, weights_hash
from swarm.policy.model import load_policy
from swarm.sync.publisher import DeltaPublisher
from swarm.wire import DeltaManifest, delta_topic, pack_manifests
from swarm.wire.signing import sign_manifest
from tests.conftest import small_config

TRAINER_KEY, GEN_KEY, MALLORY_KEY = (create_identity(bytes([b]) * 32) for b in (0x41, 0x42, 0x43))
TRAINER, GEN, MALLORY = (peer_id_of(k) for k in (TRAINER_KEY, GEN_KEY, MALLORY_KEY))


class Messages(Reporter):
    def __init__(self) -> None:
        self.lines: list[str] = []

    def message(self, text: str) -> None:
        self.lines.append(text)


def _generator(tmp_path, tiny_model_path, hub, reporter=None) -> Node:
    config = small_config(
        tmp_path / "g",
        node={"name": "g", "seed": 2, "role": "generator"},
        sync={"follow": TRAINER},
        tasks={"eval_size": 0},
        policy={"model": str(tiny_model_path), "device": "cpu", "dtype": "float32"},
        generation={"questions_per_round": 2, "completions_per_question": 4, "max_new_tokens": 8},
    )
    node = Node(config, transport=MemoryTransport(GEN, hub), key_pair=GEN_KEY, reporter=reporter)
    node.start()
    return node


def _trainer(hub, node_config, tiny_model_path):
    """A hostile trainer: a publisher over the tiny model's bf16 weights, at version 0."""
    policy = load_policy(str(tiny_model_path), device="cpu", dtype="float32")
    transport = MemoryTransport(TRAINER, hub)
    transport.start()
    publisher = DeltaPublisher(
        transport,
        TRAINER_KEY,
        peer_id=TRAINER,
        swarm_id=node_config.p2p.swarm_id,
        model=policy.model_id,
        base_hash=policy.base_hash,
        anchor_every=100,
        keep_deltas=100,
    )
    weights = bf16_state_dict(policy.model)
    publisher.start(weights, 0)
    return publisher, weights


def _with(weights, name, value):
    """A copy of `weights` (tied tensors kept tied) with 64 values of `name` set to `value`."""
    copies: dict[int, torch.Tensor] = {}
    out = {k: copies.setdefault(id(v), v.clone()) for k, v in weights.items()}
    out[name].view(-1)[:64] = value
    return out


def _deltas(node: Node) -> list[DeltaRow]:
    ledger = Ledger(node.config.ledger_url)
    try:
        with ledger.reader() as s:
            return s.query(DeltaRow).order_by(DeltaRow.id).all()
    finally:
        ledger.close()


def _round_s(node: Node, rounds: int = 1) -> list[float]:
    """Wall seconds of each of the next `rounds` rounds."""
    out = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        node.run_round()
        out.append(time.perf_counter() - t0)
    return out


def _finite(node: Node) -> bool:
    return all(torch.isfinite(p).all() for p in node.policy.model.parameters())


def test_a_nan_delta_is_refused_and_not_fetched_again_after_a_restart(tmp_path, tiny_model_path):
    hub = MemoryHub()
    node = _generator(tmp_path, tiny_model_path, hub)
    publisher, weights = _trainer(hub, node.config, tiny_model_path)
    base = weights_hash(bf16_state_dict(node.policy.model))
    calm = statistics.median(_round_s(node, 3))
    publisher.publish(_with(weights, "model.embed_tokens.weight", math.nan), 1)
    attacked = _round_s(node, 2)  # generating with NaN embeddings crashed here before
    print(f"NaN delta: rounds {attacked[0]:.2f} s then {attacked[1]:.2f} s, {calm:.2f} s before")
    assert node.state.policy_version == 0 and _finite(node)
    assert weights_hash(bf16_state_dict(node.policy.model)) == base
    node.checkpoint()
    node.close()

    node = _generator(tmp_path, tiny_model_path, hub)  # a restart: same run folder, new process
    node.run_round()
    served = [(e.peer, e.to_version) for e in publisher.served_events()]
    assert served == [(GEN, 1)]  # fetched once, by the first run only
    refused = [(r.status, r.reason, r.to_version) for r in _deltas(node)]
    assert refused == [("rejected", "non_finite", 1)]

    # The trainer recovers and serves an anchor (every 100 versions): the node follows it.
    good = _with(weights, "model.norm.weight", 1.5)
    publisher.publish(good, 100)
    node.run_round()
    assert node.state.policy_version == 100 and _finite(node)
    assert weights_hash(bf16_state_dict(node.policy.model)) == weights_hash(good)
    node.close()


def test_a_delta_that_makes_the_logits_overflow_is_undone_and_remembered(tmp_path, tiny_model_path):
    hub = MemoryHub()
    node = _generator(tmp_path, tiny_model_path, hub)
    publisher, weights = _trainer(hub, node.config, tiny_model_path)
    base = weights_hash(bf16_state_dict(node.policy.model))
    huge = _with(weights, "model.norm.weight", 3.0e38)  # finite, but the forward pass is not
    huge["lm_head.weight"].view(-1)[:4096] = 3.0e38  # tied to the embeddings
    calm = statistics.median(_round_s(node, 3))
    publisher.publish(huge, 1)
    attacked = _round_s(node, 2)
    print(
        f"overflowing delta: rounds {attacked[0]:.2f} s then {attacked[1]:.2f} s, "
        f"{calm:.2f} s before"
    )
    rows = [(r.status, r.reason) for r in _deltas(node)]
    assert rows == [("rejected", "broken_model")]
    assert node.state.policy_version == 0
    assert weights_hash(bf16_state_dict(node.policy.model)) == base  # the model put back
    assert weights_hash(node.follower.weights) == base
    ledger = Ledger(node.config.ledger_url)
    with ledger.reader() as s:
        assert get_meta(s, REFUSED_KEY) == f'["{publisher.served()[-1].payload_hash}"]'
    ledger.close()
    node.close()


def test_a_flood_of_manifests_from_a_peer_not_followed_costs_rows_and_lines_once(
    tmp_path, tiny_model_path
):
    hub = MemoryHub()
    messages = Messages()
    node = _generator(tmp_path, tiny_model_path, hub, reporter=messages)
    mallory = MemoryTransport(MALLORY, hub)
    mallory.start()
    manifests = [
        sign_manifest(
            DeltaManifest(
                swarm_id=node.config.p2p.swarm_id,
                provider=MALLORY,
                model=node.policy.model_id,
                base_hash=node.policy.base_hash,
                kind="delta",
                from_version=i,
                to_version=i + 1,
                size=1000,
                payload_hash="ab" * 32,
                result_hash="cd" * 32,
                key=f"k{i}",
                created_at=1.0,
            ),
            MALLORY_KEY,
        )
        for i in range(100)
    ]
    calm = statistics.median(_round_s(node, 3))
    for _ in range(200):
        mallory.publish(delta_topic(node.config.p2p.swarm_id), pack_manifests(manifests))
    attacked = _round_s(node, 2)
    rows = [(r.peer, r.reason) for r in _deltas(node)]
    lines = [line for line in messages.lines if "not_followed" in line]
    print(
        f"20,000 manifests not followed: {len(rows)} ledger rows, {len(lines)} log lines; "
        f"rounds {attacked[0]:.2f} s then {attacked[1]:.2f} s, {calm:.2f} s before"
    )
    assert rows == [(MALLORY, "not_followed")]  # was ~20,000 rows
    assert len(lines) == 1
    assert node.follower.limiter.totals()[(MALLORY, "not_followed")] == 20_000
    node.close()
