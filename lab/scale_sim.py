"""A swarm of N network-only nodes in one process: what a node's round costs as N grows.

Every node is a real `lab.network_node.NetworkNode` (real tasks, rewards, Ed25519
signatures, verification and sampler; no model) on an in-memory transport, speaking the
gossip or the pull exchange. Pull nodes sit on `LinkedMemoryTransport`s: each joins
through one address (node 0's), keeps at most `links` connections and finds the rest of
the swarm through its view; as over libp2p, it can dial only peers whose addresses it was
handed (a view entry, a holder hint) or that were once connected to it. Gossip nodes sit on `MemoryTransport`s (every node reaches
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

from lab.footprint import peak_mb
from lab.network_node import ExchangeKind, NetworkNode, NetworkNodeSettings, RoundCost
from lab.sim_conditions import Adversary, ImpairedTransport, StepClock
from swarm.core.identity import create_identity, peer_id_of
from swarm.exchange.history_sample import DEFAULT_SKETCH
from swarm.exchange.peer_view import DEFAULT_SAMPLED_VIEWS, MOST_SAMPLED_VIEWS
from swarm.exchange.pull import PullSettings
from swarm.p2p.transport import MemoryHub, MemoryTransport

METRICS = (
    "bytes_in",
    "bytes_out",
    "cpu_s",
    "wait_s",  # simulated time its fetches waited (round trips, dials, timeouts)
    "verified",
    "cheap_checked",
    "ledger_rows",
    "peers",
)


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
    sampled_views: int = DEFAULT_SAMPLED_VIEWS  # views heard a refresh from sampled peers
    most_sampled_views: int = MOST_SAMPLED_VIEWS  # ... while they still teach new IDs
    loss: float = 0.0  # share of fetches lost
    latency_s: float = 0.0  # each fetch's time, charged to the node's round budget
    churn: float = 0.0  # share of (honest) nodes replaced by newcomers after each round
    vanished: float = 1.0  # share of leavers that vanish (fetches from them time out)


class SimClock:
    """The simulated wall clock every node reads."""

    def __init__(self, start: float = 1_700_000_000.0):
        self.start = start
        self.now = start

    def __call__(self) -> float:
        return self.now


def build(settings: SimSettings, clock: SimClock, hub: MemoryHub) -> list[NetworkNode]:
    """The swarm: node 0 first, then every other node joined through it."""
    nodes: list[NetworkNode] = []
    rng = random.Random(settings.seed)
    for i in range(settings.nodes):
        nodes.append(make_node(settings, clock, hub, i, nodes[0].peer_id if nodes else "", rng))
    for node in nodes:
        node.start()
    return nodes


def make_node(
    settings: SimSettings,
    clock: SimClock,
    hub: MemoryHub,
    i: int,
    bootstrap: str,
    rng: random.Random,
) -> NetworkNode:
    """Node `i` of the swarm, joining through `bootstrap` (not started)."""
    key_pair = create_identity(rng.randbytes(32))
    peer_id = peer_id_of(key_pair)
    steps = StepClock()
    if settings.exchange == ExchangeKind.PULL:
        transport: MemoryTransport = ImpairedTransport(
            peer_id,
            hub,
            bootstrap=[bootstrap] if bootstrap else [],
            max_links=settings.links,
            loss=settings.loss,
            latency_s=settings.latency_s,
            rng=random.Random(rng.random()),
            clock=steps,
            vanished=settings.vanished,
        )
    else:
        transport = MemoryTransport(peer_id, hub, inbox_capacity=1 << 20)
    groups = settings.groups * (settings.loud_factor if 1 <= i <= loud_count(settings) else 1)
    node_settings = NetworkNodeSettings(
        exchange=settings.exchange,
        groups_per_round=groups,
        shared_groups=settings.shared,
        max_held_s=3 * settings.period_s,
        pull=PullSettings(
            pull_lists=settings.lists,
            pull_groups=settings.pulls,
            keep_rounds=settings.keep_rounds,
            view_sketch=settings.sketch,
            sampled_views=settings.sampled_views,
            most_sampled_views=settings.most_sampled_views,
        ),
    )
    return NetworkNode(node_settings, transport, key_pair, clock=clock, monotonic=steps)


def churn(
    settings: SimSettings,
    nodes: list[NetworkNode],
    clock: SimClock,
    hub: MemoryHub,
    keep: set[str],
    rng: random.Random,
) -> int:
    """Replace `churn` of the nodes (never node 0 or those in `keep`) by newcomers, each
    joining through a random node still there. Returns how many were replaced."""
    eligible = [i for i in range(1, len(nodes)) if nodes[i].peer_id not in keep]
    leaving = rng.sample(eligible, min(len(eligible), round(settings.churn * len(nodes))))
    for i in leaving:
        nodes[i].close()  # leaves the hub: fetches from it fail from now on
    staying = [n.peer_id for j, n in enumerate(nodes) if j not in set(leaving)]
    for i in leaving:
        nodes[i] = make_node(settings, clock, hub, i, rng.choice(staying), rng)
        nodes[i].start()
    return len(leaving)


def simulate(settings: SimSettings, progress: Callable[[str], None] = lambda s: None) -> dict:
    """Run the swarm; per-node cost per measured round (summaries) and fairness."""
    clock = SimClock()
    t0 = time.perf_counter()
    hub = MemoryHub()
    nodes = build(settings, clock, hub)
    progress(f"{settings.nodes} {settings.exchange} nodes built in {time.perf_counter() - t0:.0f}s")
    adversary = None
    if settings.hostile or settings.greedy:
        adversary = Adversary(nodes, settings.hostile, settings.greedy, settings.seed + 3)
    hostile = adversary.hostile if adversary is not None else set()
    replaced = 0
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
        waited = [node.monotonic() for node in nodes]
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
        waits = [node.monotonic() - w for node, w in zip(nodes, waited, strict=True)]
        if settings.churn:  # after the round is measured: newcomers start the next one
            replaced += churn(settings, nodes, clock, hub, hostile, rng)
        progress(f"round {r}: {time.perf_counter() - t:.0f}s")
        if r < settings.warmup:
            continue
        for cost, (bi, bo), (ai, ao), wait in zip(costs, before, after, waits, strict=True):
            assert cost is not None
            per_node.append(
                {
                    "bytes_in": ai - bi,
                    "bytes_out": ao - bo,
                    "cpu_s": cost.work_cpu_s,
                    "wait_s": wait,
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
        "replaced_nodes": replaced,
        "lost_fetches": sum(getattr(n.transport, "lost", 0) for n in nodes),
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
