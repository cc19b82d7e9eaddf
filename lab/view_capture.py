"""Can colluding identities capture whom honest nodes ask? Peer views in memory.

`nodes` views over linked memory transports, all joined through the first. A share of the
identities collude: each serves a view listing only colluders at age 0, and one of them
(the greedy viewer) fetches every node's view after every refresh. Over the last `counted`
of `rounds` refreshes, `capture` counts whom honest nodes asked (`PeerView.sample(8)`).
`scripts/bench_view_capture.py` and `tests/unit/exchange/test_peer_view.py` run it.
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass

from swarm.exchange.peer_view import DEFAULT_SAMPLED_VIEWS, MOST_SAMPLED_VIEWS, PeerView
from swarm.p2p.memory_links import LinkedMemoryTransport
from swarm.p2p.transport import MemoryHub
from swarm.wire.streams import VIEW_KEY, ViewEntry, encode_view


@dataclass
class CaptureSettings:
    nodes: int = 150
    capacity: int = 16  # view entries
    sketch: int = 32  # history sample (0: peers asked are drawn from the view)
    share: float = 0.2  # of the identities, colluding
    rounds: int = 30  # refreshes
    counted: int = 10  # the last refreshes whose asks are counted
    seed: int = 2
    sampled_views: int = DEFAULT_SAMPLED_VIEWS
    most_sampled_views: int = MOST_SAMPLED_VIEWS
    addressed: bool = True  # dial only peers whose addresses were handed over, as libp2p


def linked_views(
    n: int,
    capacity: int,
    sketch: int,
    *,
    sampled_views: int = DEFAULT_SAMPLED_VIEWS,
    most_sampled_views: int = MOST_SAMPLED_VIEWS,
    addressed: bool = False,
    hub: MemoryHub | None = None,
) -> list[PeerView]:
    """`n` started views over linked memory transports (on `hub`, to join more later), all
    joined through the first."""
    hub, views, first = hub if hub is not None else MemoryHub(), [], ""
    for i in range(n):
        peer = f"peer-{i:05d}"
        bootstrap = [first] if first else []
        transport = LinkedMemoryTransport(peer, hub, bootstrap=bootstrap, addressed=addressed)
        transport.start()
        first = first or peer
        views.append(
            PeerView(
                transport,
                peer,
                capacity=capacity,
                sketch=sketch,
                sampled_views=sampled_views,
                most_sampled_views=most_sampled_views,
            )
        )
    return views


def entry(peer: str) -> ViewEntry:
    return ViewEntry(peer, (f"/memory/{peer}",), 0)


def capture(s: CaptureSettings) -> dict:
    """One swarm: the colluders' share of identities, of honest views and of those asked,
    and how often the greedy viewer was asked over an honest peer."""
    views = linked_views(
        s.nodes,
        s.capacity,
        s.sketch,
        sampled_views=s.sampled_views,
        most_sampled_views=s.most_sampled_views,
        addressed=s.addressed,
    )
    rng = random.Random(s.seed)
    hostile = [v for v in views[1:] if rng.random() < s.share]
    names, greedy = {v.own_id for v in hostile}, hostile[0]
    asked: Counter = Counter()
    in_views: list[float] = []
    for r in range(s.rounds):
        order = list(views)
        rng.shuffle(order)
        for view in order:
            view.refresh()
        for view in hostile:
            listed = [view.own_id, *sorted(names - {view.own_id})]
            view.transport.serve_blob(VIEW_KEY, encode_view([entry(p) for p in listed]))
        for view in views:
            if view is not greedy:
                greedy.transport.learn_peer(view.own_id, entry(view.own_id).addrs)
                greedy.transport.fetch_blob(view.own_id, VIEW_KEY)
        if r >= s.rounds - s.counted:
            for view in views:
                if view.own_id not in names:
                    asked.update(view.sample(8))
                    in_views.append(sum(p in names for p in view.view) / max(1, len(view.view)))
    honest = [v.own_id for v in views if v.own_id not in names]
    per_honest = sum(asked[p] for p in honest) / len(honest)
    hostile_share = len(names) / s.nodes
    in_samples = sum(asked[p] for p in names) / sum(asked.values())
    return {
        "colluders": len(names),
        "hostile_share": hostile_share,
        "in_views": sum(in_views) / len(in_views),
        "in_samples": in_samples,
        "ratio": in_samples / hostile_share,
        "greedy_ratio": asked[greedy.own_id] / per_honest,
    }


def run(args) -> int:
    """Every colluding share against every case (history sample size, most sampled views; and
    the view alone unless `no_view_only`), one line each. `args` holds the options of
    `scripts/bench_view_capture.py`."""
    cases = [(args.sketch, most) for most in args.most_sampled_views]
    cases += [] if args.no_view_only else [(0, 1)]
    for share in args.shares:
        for sketch, most in cases:
            settings = CaptureSettings(
                nodes=args.nodes,
                capacity=args.capacity,
                sketch=sketch,
                share=share,
                rounds=args.rounds,
                counted=args.counted,
                seed=args.seed,
                most_sampled_views=most,
            )
            r = capture(settings)
            print(
                f"sketch {sketch:3d}, up to {most:2d} sampled views: colluders {r['colluders']}/{args.nodes}"
                f" ({r['hostile_share']:.1%}), in honest views {r['in_views']:.1%},"
                f" among those asked {r['in_samples']:.1%} ({r['ratio']:.2f}x);"
                f" greedy viewer asked {r['greedy_ratio']:.2f}x an honest peer",
                flush=True,
            )
    return 0
