"""What the simulated pull swarm (`lab.scale_sim`) faces besides its own load: hostile
identities, lossy and slow links, churn.

- `Adversary`: colluding identities that serve views listing only each other, and greedy
  viewers that fetch every node's view every round;
- `ImpairedTransport`: a `LinkedMemoryTransport` whose fetches are lost with probability
  `loss` and are charged to the node's round budget (`StepClock`: the monotonic clock the
  node's pull exchange reads) what they would wait: a round trip (`latency_s`) each, three
  more to set up a connection to a peer not linked yet (TCP, Noise, stream negotiation), and
  for a peer that has left, its whole timeout if it vanished (`vanished` of the leavers: its
  machine asleep or off the network, its connection left open or its address dropping
  SYNs) or a round trip if it closed its connections. In memory fetches run one after
  another, so this overstates what parallel fetches over libp2p cost; and over libp2p the
  views and lists are fetched off the round (`swarm.exchange.pull_later`), which the
  simulation does not model: it charges them to the round.

Churn (nodes leaving and joining every round) is `scale_sim.simulate`'s, since it builds
nodes.
"""

from __future__ import annotations

import random
import statistics
from collections import Counter

from lab.network_node import NetworkNode
from swarm.core.errors import TransportError
from swarm.p2p.memory_links import LinkedMemoryTransport
from swarm.p2p.transport import FetchLimits, MemoryHub
from swarm.wire.streams import VIEW_KEY, VIEW_MAX_ENTRIES, ViewEntry, encode_view

DIAL_TRIPS = 3  # round trips to set up a connection (TCP, Noise, stream negotiation)


class StepClock:
    """A monotonic clock that moves only when told (a node's simulated time in its round)."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class ImpairedTransport(LinkedMemoryTransport):
    """Fetches that may be lost and that take time (see the module docstring)."""

    def __init__(
        self,
        peer_id: str,
        hub: MemoryHub,
        *,
        bootstrap: list[str],
        max_links: int,
        loss: float,
        latency_s: float,
        rng: random.Random,
        clock: StepClock,
        vanished: float = 1.0,
    ):
        super().__init__(peer_id, hub, bootstrap=bootstrap, max_links=max_links, addressed=True)
        self.loss, self.latency_s, self.rng, self.clock = loss, latency_s, rng, clock
        self.vanished = vanished
        self.lost = 0
        self.waited_on_gone = 0.0  # seconds charged for peers that had left

    def fetch_blob(
        self, peer_id: str, key: str, timeout: float = 30.0, limits: FetchLimits | None = None
    ) -> bytes:
        member = self._hub.member(peer_id)
        if member is None and peer_id in self.known:  # it left: gone, or vanished
            vanished = self.rng.random() < self.vanished
            wait = timeout if vanished else min(self.latency_s, timeout)
            self.clock.now += wait
            self.waited_on_gone += wait
            raise TransportError(f"{key} from {peer_id}: no answer in {wait} s")
        trips = 1 if peer_id in self.links else 1 + DIAL_TRIPS
        self.clock.now += min(trips * self.latency_s, timeout)
        if trips * self.latency_s > timeout:
            raise TransportError(f"{key} from {peer_id}: no answer in {timeout} s")
        if self.loss and self.rng.random() < self.loss:
            self.lost += 1
            raise TransportError(f"{key} from {peer_id}: lost")
        return super().fetch_blob(peer_id, key, timeout, limits)


class Adversary:
    """Hostile identities of a simulated pull swarm, trying to own honest nodes' samples.

    - colluders (`hostile` of the identities, never node 0): ordinary nodes, except that
      the view each serves lists only colluders, all at age 0 (the youngest, so kept first);
    - greedy viewers (`greedy`, also colluders): fetch every node's view every round, which
      enters them at age 0 in every view they fetch.

    `measure` counts whom honest nodes asked for their lists. Under churn an honest peer
    may be there for only some of the measured rounds (and is asked less in its first
    ones), while the hostile ones stay: a greedy viewer is compared with the honest peers
    present in every measured round.
    """

    def __init__(self, nodes: list[NetworkNode], hostile: float, greedy: int, seed: int):
        rng = random.Random(seed)
        count = round(hostile * len(nodes))
        picked = rng.sample(range(1, len(nodes)), min(len(nodes) - 1, max(count, greedy)))
        self.hostile = {nodes[i].peer_id for i in picked}
        self.greedy = [nodes[i] for i in picked[:greedy]]
        self.nodes = nodes
        self.asked: Counter = Counter()
        self.present: Counter = Counter()  # measured rounds each honest peer was there
        self.measured = 0

    def act(self) -> None:
        """Serve the colluders' views and let the greedy viewers fetch every view."""
        entries = [ViewEntry(p, (f"/memory/{p}",), 0) for p in sorted(self.hostile)][
            :VIEW_MAX_ENTRIES
        ]
        for node in self.nodes:
            if node.peer_id in self.hostile:
                own = [e for e in entries if e.id == node.peer_id]
                others = [e for e in entries if e.id != node.peer_id]
                node.transport.serve_blob(VIEW_KEY, encode_view(own + others))
        for viewer in self.greedy:
            for node in self.nodes:
                if node is not viewer:
                    try:
                        viewer.transport.fetch_blob(node.peer_id, VIEW_KEY)
                    except TransportError:
                        continue

    def measure(self) -> None:
        self.measured += 1
        for node in self.nodes:
            if node.peer_id not in self.hostile:
                self.asked.update(getattr(node.exchange, "last_asked", ()))
                self.present[node.peer_id] += 1

    def report(self) -> dict:
        """Hostile share of honest nodes' samples over their share of the swarm (1: fair),
        and how often a greedy viewer was asked over an honest peer (1: no gain)."""
        total = sum(self.asked.values())
        honest = [p for p, rounds in self.present.items() if rounds == self.measured]
        per_honest = sum(self.asked[p] for p in honest) / max(1, len(honest))
        share = len(self.hostile) / len(self.nodes)
        in_samples = sum(self.asked[p] for p in self.hostile) / total if total else 0.0
        greedy = [self.asked[v.peer_id] for v in self.greedy]
        return {
            "hostile_identities": len(self.hostile),
            "hostile_share": share,
            "hostile_share_in_samples": in_samples,
            "capture_ratio": in_samples / share if share else 0.0,
            "greedy_ratio": statistics.fmean(greedy) / per_honest if greedy and per_honest else 0.0,
        }
