"""Publishing: this node's groups, signed, to its peers.

Each of a round's groups becomes its wire struct (`RolloutGroup`), is signed, and is
remembered by the verifier (a peer re-signing it is then a copycat). With gossip the signed
groups are packed into messages and published on the rollout topic; a failed publish is
counted, never fatal. With another exchange protocol (`p2p.exchange = "pull"`) the groups go
to `exchange.publish` (`swarm.exchange.base`). Only a node with a model publishes.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from swarm.config import Config
from swarm.core.errors import TransportError
from swarm.exchange.base import Exchange
from swarm.monitor.display import Reporter
from swarm.node.state import NodeState, OwnGroup
from swarm.p2p.transport import Transport
from swarm.policy.model import Policy
from swarm.verify.gate import Verifier
from swarm.wire import RolloutGroup, Sampling, pack_messages
from swarm.wire.signing import sign_group


@dataclass(frozen=True)
class Published:
    """What one `publish` did: groups published, and gossip messages that failed to go."""

    groups: int
    failures: int


class Publishing:
    """Signs and publishes this node's groups (see the module docstring)."""

    def __init__(
        self,
        *,
        config: Config,
        key_pair,
        peer_id: str,
        topic: str,
        transport: Transport,
        verifier: Verifier,
        policy: Policy,
        sampling,
        state: NodeState,
        reporter: Reporter,
        exchange: Exchange | None = None,
    ):
        self.config = config
        self.key_pair = key_pair
        self.peer_id = peer_id
        self.topic = topic
        self.transport = transport
        self.verifier = verifier
        self.policy = policy
        self.sampling = sampling
        self.state = state
        self.reporter = reporter
        self.exchange = exchange  # None: gossip on `topic`

    def publish(self, groups: list[OwnGroup]) -> Published:
        """Sign the round's groups and publish them in batches; failures are counted, not fatal."""
        signed, pairs = [], []
        for group in groups:
            group.wire = wire = self._wire_group(group)
            group.signed = sign_group(wire, self.key_pair)
            signed.append(group.signed)
            pairs.append((group.signed, wire))
            self.verifier.note_own(wire)  # a peer re-signing it is then a copycat
        if self.exchange is not None:
            self.exchange.publish(pairs)
            return Published(len(groups), 0)
        failures = 0
        for message in pack_messages(signed):
            try:
                self.transport.publish(self.topic, message)
            except TransportError as e:
                failures += 1
                self.reporter.message(f"publish failed: {e}")
        return Published(len(groups), failures)

    def _wire_group(self, group: OwnGroup) -> RolloutGroup:
        """An own group as the wire struct this node signs."""
        policy = self.policy
        return RolloutGroup(
            swarm_id=self.config.p2p.swarm_id,
            sender=self.peer_id,
            task=group.task.spec,
            question=group.task.question,
            completions=tuple(c.text for c in group.completions),
            rewards=tuple(group.rewards),
            finished=tuple(c.finished for c in group.completions),
            model=policy.model_id,  # by content: never a local path
            base_hash=policy.base_hash,
            policy_version=self.state.policy_version,
            sampling=Sampling(
                temperature=float(self.sampling.temperature),
                top_p=float(self.sampling.top_p),
                top_k=int(self.sampling.top_k),
                max_new_tokens=int(self.sampling.max_new_tokens),
            ),
            round=self.state.round,
            created_at=time.time(),
            token_ids=tuple(tuple(c.token_ids) for c in group.completions),
            format_bonus=float(self.config.tasks.format_reward),
        )
