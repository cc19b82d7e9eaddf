"""Can colluding identities capture whom honest nodes ask? Views against history samples.

    python scripts/bench_view_capture.py                # 150 views, 5 % and 20 % colluders
    python scripts/bench_view_capture.py --nodes 2000 --capacity 64 --sketch 128 \
        --shares 0.05 --rounds 24 --counted 4 --most-sampled-views 1 4 8 16

N views of `--capacity` over linked memory transports, all joined through the first; a
share of the identities collude: each serves a view listing only colluders at age 0, and
one of them (the greedy viewer) fetches every node's view after every refresh. After
`--rounds` refreshes, the last `--counted` count whom honest nodes asked
(`PeerView.sample(8)`), once drawing from the history sample (`--sketch` IDs) and once from
the view (sketch 0, how the pull exchange sampled before). Each `--most-sampled-views` M is
a case of its own: a node hears up to M sampled views a refresh while they bring new IDs
(M = 1: one a refresh, always). Prints one line per case.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from lab.view_capture import run  # noqa: E402


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
    parser.add_argument("--rounds", type=int, default=30, help="refreshes")
    parser.add_argument("--counted", type=int, default=10, help="the last refreshes counted")
    parser.add_argument(
        "--most-sampled-views",
        type=int,
        nargs="+",
        default=[16],
        help="most views heard a refresh from sampled peers, one case each",
    )
    parser.add_argument(
        "--no-view-only", action="store_true", help="skip the case drawing from the view"
    )
    parser.add_argument("--seed", type=int, default=2, help="which identities collude")
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
