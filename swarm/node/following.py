"""Following a trainer's policy, and publishing one's own to followers.

A generator-role node follows the trainer named in `sync.follow`: before each round it
applies what that trainer published since the last one, loads the changed tensors into
its model and generator, and takes the trainer's policy version. A trainer with
`sync.publish_deltas` announces the bf16 change of each update after it. The protocol
itself (manifests, fetching, every check, bit-exact application) is `swarm.node.sync`;
this part connects it to the node's model, generator, version and ledger.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from swarm.node.sync import DeltaFollower, DeltaPublisher, load_into
from swarm.p2p.transport import Transport
from swarm.policy.delta import bf16_state_dict
from swarm.policy.generator import Generator
from swarm.policy.model import Policy

if TYPE_CHECKING:
    from swarm.node.records import Records
    from swarm.node.state import NodeState


class Following:
    """The node's delta publisher (trainer) or follower (generator role), either or none."""

    def __init__(
        self, *, transport: Transport, policy: Policy, generator: Generator, state: NodeState,
        records: Records, publisher: DeltaPublisher | None = None,
        follower: DeltaFollower | None = None,
    ):
        self.transport = transport
        self.policy = policy
        self.generator = generator
        self.state = state
        self.records = records
        self.publisher = publisher
        self.follower = follower

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
            events = self.publisher.publish(bf16_state_dict(self.policy.model), self.state.policy_version)
            self.records.record_deltas(events + self.publisher.served_events())

    def follow(self) -> None:
        """Generator: apply what the followed trainer published since the last round."""
        self.transport.pump()  # manifests that arrived since the last drain
        result = self.follower.sync()
        if result.changed:
            load_into(self.policy.model, self.follower.weights, result.changed)
            self.generator.update_weights(self.policy.model, result.changed)
        self.state.policy_version = result.version
        self.records.record_deltas(result.events)

    def close(self) -> None:
        """Trainer: record the fetches of its deltas since the last update."""
        if self.publisher is not None:
            self.records.record_deltas(self.publisher.served_events())
