"""Can colluding identities capture whom honest nodes ask? Views against history samples.

    python scripts/bench_view_capture.py                # 150 views, 5 % and 20 % colluders

N views of `--capacity` over linked memory transports, all joined through the first; a
share of the identities collude: each serves a view listing only colluders at age 0, and
one of them (the greedy viewer) fetches every node's view after every refresh. After
`--rounds` refreshes, the last 10 count whom honest nodes asked (`PeerView.sample(8)`),
once drawing from the history sample (`--sketch` IDs) and once from the view (sketch 0,
how the pull exchange sampled before). Prints one line per case.
"""

from __future__ import annotations

import argparse
import random
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from swarm.exchange.peer_view import PeerView  # noqa: E402
from swarm.p2p.memory_links import LinkedMemoryTransport  # noqa: E402
from swarm.p2p.transport import MemoryHub  # noqa: E402
from swarm.wire.streams import VIEW_KEY, ViewEntry, encode_view  # noqa: E402


def run(nodes: int, capacity: int, sketch: int, share: float, rounds: int, seed: int) -> dict:
    """One swarm; the colluders' share of identities, of honest views and of those asked."""
    hub, views, first = MemoryHub(), [], ""
    for i in range(nodes):
        peer = f"peer-{i:05d}"
        transport = LinkedMemoryTransport(peer, hub, bootstrap=[first] if first else [])
        transport.start()
        first = first or peer
        views.append(PeerView(transport, peer, capacity=capacity, sketch=sketch))
    rng = random.Random(seed)
    hostile = [v for v in views[1:] if rng.random() < share]
    names = {v.own_id for v in hostile}
    asked: Counter = Counter()
    in_views: list[float] = []
    for r in range(rounds):
        order = list(views)
        rng.shuffle(order)
        for view in order:
            view.refresh()
        for view in hostile:
            others = [ViewEntry(p, (f"/memory/{p}",), 0) for p in sorted(names - {view.own_id})]
            view.transport.serve_blob(
                VIEW_KEY,
                encode_view([ViewEntry(view.own_id, (f"/memory/{view.own_id}",), 0)] + others),
            )
        for view in views:
            if view is not hostile[0]:
                hostile[0].transport.fetch_blob(view.own_id, VIEW_KEY)
        if r >= rounds - 10:
            for view in views:
                if view.own_id not in names:
                    asked.update(view.sample(8))
                    in_views.append(sum(p in names for p in view.view) / max(1, len(view.view)))
    honest = [v.own_id for v in views if v.own_id not in names]
    per_honest = sum(asked[p] for p in honest) / len(honest)
    hostile_share = len(names) / nodes
    in_samples = sum(asked[p] for p in names) / sum(asked.values())
    return {
        "sketch": sketch,
        "colluders": len(names),
        "hostile_share": hostile_share,
        "in_views": sum(in_views) / len(in_views),
        "in_samples": in_samples,
        "ratio": in_samples / hostile_share,
        "greedy_ratio": asked[hostile[0].own_id] / per_honest,
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--nodes", type=int, default=150)
    parser.add_argument("--capacity", type=int, default=16)
    parser.add_argument("--sketch", type=int, default=32)
    parser.add_argument("--shares", type=float, nargs="+", default=[0.05, 0.2])
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--seed", type=int, default=2)
    args = parser.parse_args(argv)
    for share in args.shares:
        for sketch in (args.sketch, 0):
            r = run(args.nodes, args.capacity, sketch, share, args.rounds, args.seed)
            print(
                f"sketch {sketch:3d}: colluders {r['colluders']}/{args.nodes}"
                f" ({r['hostile_share']:.1%}), in honest views {r['in_views']:.1%},"
                f" among those asked {r['in_samples']:.1%} ({r['ratio']:.2f}x);"
                f" greedy viewer asked {r['greedy_ratio']:.2f}x an honest peer",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
