"""A swarm of N network-only nodes in one process: what a node's round costs as N grows.

Every node is a real `swarm.node.network_only.NetworkNode` (real tasks, rewards, Ed25519
signatures, verification and sampler; no model) on an in-memory transport, speaking the
gossip or the pull exchange. Pull nodes sit on `LinkedMemoryTransport`s: each joins
through one address (node 0's), keeps at most `links` connections and finds the rest of
the swarm through its view. Gossip nodes sit on `MemoryTransport`s (every node reaches
every node, once: no mesh duplicates, which real GossipSub adds).

Pull nodes first shuffle their views `view_rounds` times (nothing else runs), so the
measured rounds see views as mixed as in a swarm that has been running a while.

Time is simulated: global round r spans [r, r + 1) x `period_s`, node i runs at
r + i / N of it, so ages and freshness checks see a swarm whose nodes run out of step. A
node's bytes are the payload bytes its transport counted over the global round (served and
fetched blobs, gossip messages; not framing), its CPU the process time of its own round
(in memory, serving a blob costs the server nothing). The first `warmup` rounds fill views
and pools and are not measured.

Fairness of what the nodes train on (the J shared groups each chooses a round):

- `sender_cv_ratio`: the coefficient of variation of how often each ordinary sender was
  chosen, over its value under ideal uniform sampling (1: as even as chance allows);
- `hub_ratio`: how often node 0, everyone's bootstrap peer, was chosen, over an ordinary
  sender (1: no bias to the peer every node is connected to);
- `loud_ratio`: the same for senders that make `loud_factor` times as many groups (one
  node in 100; per-sender caps and taking one group per sender in turn keep it near 1).
"""

from __future__ import annotations

import dataclasses
import gc
import math
import random
import statistics
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from swarm.errors import TransportError
from swarm.node.history_sample import DEFAULT_SKETCH
from swarm.node.network_only import ExchangeKind, NetworkNode, NetworkNodeSettings, RoundCost
from swarm.node.pulling import PullSettings
from swarm.ops.footprint import peak_mb
from swarm.p2p.identity import create_identity, peer_id_of
from swarm.p2p.memory_links import LinkedMemoryTransport
from swarm.p2p.transport import MemoryHub, MemoryTransport
from swarm.wire.streams import VIEW_KEY, VIEW_MAX_ENTRIES, ViewEntry, encode_view

METRICS = ("bytes_in", "bytes_out", "cpu_s", "verified", "cheap_checked", "ledger_rows", "peers")


@dataclass(frozen=True)
class SimSettings:
    nodes: int
    exchange: ExchangeKind = ExchangeKind.PULL
    rounds: int = 4
    warmup: int = 2
    view_rounds: int = 20  # view shuffles before round 0: a swarm that has run a while
    period_s: float = 60.0
    groups: int = 16  # Q
    shared: int = 8  # J
    lists: int = 8
    pulls: int = 10
    keep_rounds: int = 1  # in memory a pull follows its list at once: the current round suffices
    links: int = 64
    loud_factor: int = 4  # loud nodes (1 in 100, at least one) make this many times Q a round
    seed: int = 0
    hostile: float = 0.0  # share of identities that collude to capture views (see `Adversary`)
    greedy: int = 0  # greedy viewers: fetch every node's view every round
    sketch: int = DEFAULT_SKETCH  # history sample of each node (0: ask peers from the view)


class SimClock:
    """The simulated wall clock every node reads."""

    def __init__(self, start: float = 1_700_000_000.0):
        self.start = start
        self.now = start

    def __call__(self) -> float:
        return self.now


def build(settings: SimSettings, clock: SimClock) -> list[NetworkNode]:
    """The swarm: node 0 first, then every other node joined through it."""
    hub, nodes, first = MemoryHub(), [], ""
    rng = random.Random(settings.seed)
    for i in range(settings.nodes):
        key_pair = create_identity(rng.randbytes(32))
        peer_id = peer_id_of(key_pair)
        if settings.exchange == ExchangeKind.PULL:
            transport: MemoryTransport = LinkedMemoryTransport(
                peer_id, hub, bootstrap=[first] if first else [], max_links=settings.links
            )
        else:
            transport = MemoryTransport(peer_id, hub, inbox_capacity=1 << 20)
        first = first or peer_id
        groups = settings.groups * (settings.loud_factor if 1 <= i <= loud_count(settings) else 1)
        node_settings = NetworkNodeSettings(
            exchange=settings.exchange,
            groups_per_round=groups,
            shared_groups=settings.shared,
            max_age_s=3 * settings.period_s,
            pull=PullSettings(
                lists_per_round=settings.lists,
                pull_groups=settings.pulls,
                keep_rounds=settings.keep_rounds,
                max_age_s=3 * settings.period_s,
                view_sketch=settings.sketch,
            ),
        )
        nodes.append(NetworkNode(node_settings, transport, key_pair, clock=clock))
    for node in nodes:
        node.start()
    return nodes


class Adversary:
    """Hostile identities of a simulated pull swarm, trying to own honest nodes' samples.

    - colluders (`hostile` of the identities, never node 0): ordinary nodes, except that
      the view each serves lists only colluders, all at age 0 (the youngest, so kept first);
    - greedy viewers (`greedy`, also colluders): fetch every node's view every round, which
      enters them at age 0 in every view they fetch.

    `measure` counts whom honest nodes asked for their lists.
    """

    def __init__(self, settings: SimSettings, nodes: list[NetworkNode]):
        rng = random.Random(settings.seed + 3)
        count = round(settings.hostile * len(nodes))
        picked = rng.sample(range(1, len(nodes)), min(len(nodes) - 1, max(count, settings.greedy)))
        self.hostile = {nodes[i].peer_id for i in picked}
        self.greedy = [nodes[i] for i in picked[: settings.greedy]]
        self.nodes = nodes
        self.asked: Counter = Counter()

    def act(self) -> None:
        """Serve the colluders' views and let the greedy viewers fetch every view."""
        entries = [ViewEntry(p, (), 0) for p in sorted(self.hostile)][:VIEW_MAX_ENTRIES]
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
        for node in self.nodes:
            if node.peer_id not in self.hostile:
                self.asked.update(getattr(node.exchange, "last_asked", ()))

    def report(self) -> dict:
        """Hostile share of honest nodes' samples over their share of the swarm (1: fair),
        and how often a greedy viewer was asked over an honest peer (1: no gain)."""
        total = sum(self.asked.values())
        honest = [p.peer_id for p in self.nodes if p.peer_id not in self.hostile]
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


def simulate(settings: SimSettings, progress: Callable[[str], None] = lambda s: None) -> dict:
    """Run the swarm; per-node cost per measured round (summaries) and fairness."""
    clock = SimClock()
    t0 = time.perf_counter()
    nodes = build(settings, clock)
    progress(f"{settings.nodes} {settings.exchange} nodes built in {time.perf_counter() - t0:.0f}s")
    adversary = Adversary(settings, nodes) if settings.hostile or settings.greedy else None
    shuffle_views(nodes, settings.view_rounds, random.Random(settings.seed + 2), adversary)
    progress(f"views shuffled {settings.view_rounds} times: {time.perf_counter() - t0:.0f}s")
    per_node: list[dict] = []
    chosen: Counter = Counter()
    ages: list[float] = []
    pulls = failed = 0
    order = list(range(len(nodes)))
    rng = random.Random(settings.seed + 1)
    for r in range(settings.rounds):
        t = time.perf_counter()
        before = [node.byte_meter() for node in nodes]
        rng.shuffle(order)  # who runs first in a round changes from round to round
        costs: list[RoundCost | None] = [None] * len(nodes)
        for position, i in enumerate(order):
            clock.now = clock.start + (r + position / len(nodes)) * settings.period_s
            costs[i] = nodes[i].run_round()
        if adversary is not None:
            adversary.act()
            if r >= settings.warmup:
                adversary.measure()
        after = [node.byte_meter() for node in nodes]
        progress(f"round {r}: {time.perf_counter() - t:.0f}s")
        if r < settings.warmup:
            continue
        for cost, (bi, bo), (ai, ao) in zip(costs, before, after, strict=True):
            assert cost is not None
            per_node.append(
                {
                    "bytes_in": ai - bi,
                    "bytes_out": ao - bo,
                    "cpu_s": cost.work_cpu_s,
                    "verified": cost.verified,
                    "cheap_checked": cost.cheap_checked,
                    "ledger_rows": cost.ledger_rows,
                    "peers": cost.peers,
                }
            )
            chosen.update(sender for sender, _ in cost.chosen)
            ages += [age for _, age in cost.chosen]
            pulls += cost.extra.get("pulls", 0)
            failed += cost.extra.get("pulls_failed", 0)
    result = {
        "settings": {**dataclasses.asdict(settings), "exchange": str(settings.exchange)},
        "per_node": summarize(per_node),
        "delivery": {
            "pulls": pulls,
            "failed": failed,
            "delivered": 1.0 - failed / pulls if pulls else 1.0,
        },
        "age_s": {"mean": statistics.fmean(ages) if ages else 0.0, "p95": percentile(ages, 0.95)},
        "fairness": fairness(chosen, [n.peer_id for n in nodes], loud_count(settings)),
        "adversary": adversary.report() if adversary is not None else None,
        "wall_s": time.perf_counter() - t0,
        "process_peak_mb": peak_mb(),  # the whole simulation's, all nodes together
    }
    for node in nodes:
        node.close()
    del nodes
    gc.collect()
    return result


def shuffle_views(
    nodes: list[NetworkNode],
    rounds: int,
    rng: random.Random,
    adversary: Adversary | None = None,
) -> None:
    """Refresh the views of pull nodes `rounds` times (nodes in a new order each time; the
    adversary acting after each time)."""
    views = [v for v in (getattr(n.exchange, "view", None) for n in nodes) if v is not None]
    for _ in range(rounds if views else 0):
        rng.shuffle(views)
        for view in views:
            view.refresh()
        if adversary is not None:
            adversary.act()


def summarize(rows: list[dict]) -> dict:
    """Mean, median, p95 and max of each metric over (node, round) rows."""
    out = {}
    for key in METRICS:
        values = [row[key] for row in rows]
        out[key] = {
            "mean": statistics.fmean(values) if values else 0.0,
            "p50": percentile(values, 0.5),
            "p95": percentile(values, 0.95),
            "max": max(values, default=0),
        }
    return out


def percentile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def loud_count(settings: SimSettings) -> int:
    return max(1, settings.nodes // 100)


def fairness(chosen: Counter, peer_ids: list[str], louds: int = 1) -> dict:
    """How evenly the chosen shared groups spread over senders (see the module docstring)."""
    hub, loud = peer_ids[0], peer_ids[1 : 1 + louds]
    ordinary = [chosen.get(p, 0) for p in peer_ids[1 + louds :]]
    total = sum(ordinary)
    if not ordinary or total == 0:
        return {"sender_cv_ratio": 0.0, "hub_ratio": 0.0, "loud_ratio": 0.0, "chosen": 0}
    mean = total / len(ordinary)
    cv = statistics.pstdev(ordinary) / mean
    ideal = math.sqrt((1 - 1 / len(ordinary)) / mean)  # multinomial, equal shares
    return {
        "sender_cv": cv,
        "sender_cv_ideal": ideal,
        "sender_cv_ratio": cv / ideal if ideal else 0.0,
        "hub_ratio": chosen.get(hub, 0) / mean,
        "loud_ratio": statistics.fmean(chosen.get(p, 0) for p in loud) / mean,
        "never_chosen": sum(1 for c in ordinary if c == 0) / len(ordinary),
        "chosen": sum(chosen.values()),
    }
