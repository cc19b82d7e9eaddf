"""Delta sync in the node: following a trainer's policy (generator role), and publishing
one's own updates as deltas to followers (trainer).

A generator-role node follows the trainer named in `sync.follow`: before each round it
applies what that trainer published since the last one, loads the changed tensors into
its model (refusing and undoing a step after which the model's forward pass is no longer
finite) and its generator, and takes the trainer's policy version. A payload refused for
its content is remembered in the ledger, so a restarted node never fetches it again. A
trainer with `sync.publish_deltas` announces the bf16 change of each update after it. The
protocol itself (manifests, fetching, every check, bit-exact application) is
`swarm.sync.rules` and the delta publisher and follower; this part connects it to the
node's model, generator, version and ledger.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

import torch

from swarm.ledger import get_meta, set_meta
from swarm.p2p.topic_tap import TopicTap
from swarm.p2p.transport import Transport
from swarm.policy.delta import bf16_state_dict
from swarm.policy.generator import Generator
from swarm.policy.model import Policy
from swarm.sync.follower import DeltaFollower
from swarm.sync.publisher import DeltaPublisher

if TYPE_CHECKING:
    from swarm.node.records import Records
    from swarm.node.state import NodeState

# The ledger's meta key listing payloads refused for their content (JSON list of hashes).
REFUSED_KEY = "refused_delta_payloads"
MAX_REMEMBERED = 1024
# What the model reads after each applied step: its logits must all be finite.
PROBE_TEXT = "Question: 12 + 30 = ? Answer: <answer>42</answer>"


class DeltaSync:
    """The node's delta publisher (trainer) or follower (generator role), either or none."""

    def __init__(
        self,
        *,
        transport: Transport,
        policy: Policy,
        generator: Generator,
        state: NodeState,
        records: Records,
        publisher: DeltaPublisher | None = None,
        follower: DeltaFollower | None = None,
    ):
        self.transport = transport
        self.policy = policy
        self.generator = generator
        self.state = state
        self.records = records
        self.publisher = publisher
        self.follower = follower
        if follower is not None:
            follower.refuse(self._remembered())

    @property
    def follows(self) -> bool:
        """Whether this node follows a trainer (the generator role)."""
        return self.follower is not None

    def publish_base(self) -> None:
        """Trainer: serve the reference of the first delta. A resumed trainer's anchor is
        served (and listed in the index followers read first) even though gossip cannot
        carry it yet."""
        if self.publisher is not None:
            self.records.record_deltas(
                self.publisher.start(bf16_state_dict(self.policy.model), self.state.policy_version)
            )

    def start(self) -> None:
        """Once the transport runs: a follower listens for its trainer's manifests."""
        if self.follower is not None:
            self.transport.subscribe(self.follower.topic, self.follower.validator)

    def publish_delta(self) -> None:
        """Trainer: announce the bf16 change of this update to followers."""
        if self.publisher is not None:
            weights = bf16_state_dict(self.policy.model)
            events = self.publisher.publish(weights, self.state.policy_version)
            self.records.record_deltas(events + self.publisher.served_events())

    def follow(self) -> None:
        """Generator: apply what the followed trainer published since the last round."""
        follower = self.follower
        if follower is None:
            return
        if isinstance(self.transport, TopicTap):
            self.transport.pump()  # manifests that arrived since the last drain
        result = follower.sync(load=self._load_and_probe)
        if result.refused:
            self._remember(result.refused)
        if result.changed:
            self.generator.update_weights(self.policy.model, result.changed)
        self.state.policy_version = result.version
        self.records.record_deltas(result.events)

    def close(self) -> None:
        """Trainer: record the fetches of its deltas since the last update."""
        if self.publisher is not None:
            self.publisher.holders.stop()
            self.records.record_deltas(self.publisher.served_events())

    # -- the model after each step -------------------------------------------------------------

    def _load_and_probe(self, names: set[str]) -> str | None:
        """Load the follower's named tensors into the model; what is wrong with it then."""
        if self.follower is not None:
            load_into(self.policy.model, self.follower.weights, names)
        return probe(self.policy)

    # -- refusals that outlive the process -------------------------------------------------------

    def _remembered(self) -> list[str]:
        with self.records.ledger.reader() as session:
            return json.loads(get_meta(session, REFUSED_KEY) or "[]")

    def _remember(self, payload_hashes: Iterable[str]) -> None:
        with self.records.ledger.transaction() as session:
            known = json.loads(get_meta(session, REFUSED_KEY) or "[]")
            known += [h for h in payload_hashes if h not in known]
            set_meta(session, REFUSED_KEY, json.dumps(known[-MAX_REMEMBERED:]))


def probe(policy: Policy) -> str | None:
    """None if the model's logits on a fixed short text are all finite, else what is not."""
    ids = policy.tokenizer.encode(PROBE_TEXT)
    device = next(policy.model.parameters()).device
    with torch.no_grad():
        logits = policy.model(input_ids=torch.tensor([ids], device=device)).logits
    bad = int((~torch.isfinite(logits)).sum())
    return f"{bad} of {logits.numel()} logits not finite on a probe text" if bad else None


def load_into(
    model: torch.nn.Module, weights: Mapping[str, torch.Tensor], names: Iterable[str]
) -> None:
    """Copy the named bf16 tensors into `model` (any dtype, any device), in place.

    A float32 (or bfloat16) parameter holds a bf16 value exactly, so the model's bf16 view
    is then bit-identical to `weights`; float16 cannot (the node refuses it for a generator).
    """
    state = model.state_dict()
    with torch.no_grad():
        for name in names:
            state[name].copy_(weights[name])
