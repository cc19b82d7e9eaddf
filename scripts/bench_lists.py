"""What a peer whose list offers nothing, or whose groups are other bytes, costs a pull node.

    python scripts/bench_lists.py --mode old-lists [--seconds 60] [--period 1.0] [--version 5]
    python scripts/bench_lists.py --mode wrong-bytes [--seconds 120] [--period 2.0] [--per-peer-cap 1]

Runs `lab.list_bench` (a network-only pull node and one attacker process on
127.0.0.1) and prints its figures as one JSON line: for `old-lists` the list fetches the
attacker served and the announcements the node checked; for `wrong-bytes` the seconds until
the node banned the attacker.
"""

from __future__ import annotations

import argparse
import json

from lab.list_bench import MODES, run


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", choices=MODES, required=True)
    parser.add_argument("--seconds", type=float, default=60.0, help="with the attacker, at most")
    parser.add_argument("--period", type=float, default=1.0, help="the node's round, seconds")
    parser.add_argument("--per-peer-cap", type=int, default=2, help="its pulls a round per sender")
    parser.add_argument("--version", type=int, default=None, help="its policy version")
    args = parser.parse_args(argv)
    version = args.version if args.version is not None else (5 if args.mode == "old-lists" else 0)
    print(json.dumps(run(args.mode, args.seconds, args.period, args.per_peer_cap, version)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
