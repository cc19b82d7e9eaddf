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
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from swarm.bench.view_capture import CaptureSettings, capture  # noqa: E402


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--nodes", type=int, default=150, help="views in the swarm")
    parser.add_argument("--capacity", type=int, default=16, help="entries a view holds")
    parser.add_argument("--sketch", type=int, default=32, help="IDs in a history sample")
    parser.add_argument(
        "--shares", type=float, nargs="+", default=[0.05, 0.2], help="colluding shares to run"
    )
    parser.add_argument("--rounds", type=int, default=30, help="refreshes (the last 10 count)")
    parser.add_argument("--seed", type=int, default=2, help="which identities collude")
    args = parser.parse_args(argv)
    for share in args.shares:
        for sketch in (args.sketch, 0):
            settings = CaptureSettings(
                nodes=args.nodes,
                capacity=args.capacity,
                sketch=sketch,
                share=share,
                rounds=args.rounds,
                seed=args.seed,
            )
            r = capture(settings)
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
