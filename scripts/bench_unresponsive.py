"""What peers that vanish, stall or lie about others cost a real node's rounds.

    python scripts/bench_unresponsive.py [--cases none,vanish-1,vanish-4,vanish-16,
        dead-view,silent-view,stall] [--before 40] [--after 80]
        [--honest-period 0.5] [--honest-groups 16] [--out results/unresponsive/bench.json]

The node is `swarm-node join` in its own process (defaults but light rounds of 4 questions
of 4 completions of 8 tokens, the tiny model on the CPU, the pull exchange;
`sharing.shared_groups = 4` so that it asks for lists and pulls groups; no evaluation),
joined by one honest network-only pull node (`lab.network_node`) whose groups it
pulls: 16 every 0.5 s, more than the node pulls (`sharing.per_peer_cap = 2` a round), so
that every round pulls 2 and the rest of the round (pulling, verifying) carries a steady
load; each result counts the rounds by groups pulled (`pulls_baseline`, `pulls_after`).
Once the node has pulled a group from it, 30 warm-up rounds and then `--before` rounds make
the baseline; then the attack starts (`lab.unresponsive_peer`):

- none: no attacker (what the comparison gives when nothing happens: the noise);
- vanish-N: N peers dial the node, fetch its list and view, and are stopped (SIGSTOP) with
  their TCP connections open;
- dead-view: a peer serves a view of 64 made-up peers whose address drops SYNs; after half
  the rounds it serves an honest view (the attack ends: does its cost outlast it?);
- silent-view: a peer takes every view request and never answers;
- stall: a peer announces 256 groups and takes every group fetch without answering.

Rounds come from the node's ledger (start, total). Each result holds the goal as judged
(`goal`), the criterion in words (`criterion`, `lab.unresponsive_report.CRITERION`),
the baseline rounds judged like the rounds after the event (`baseline_spread`: the noise
floor), the median of each third of the rounds after (`median_ratio_by_third_after`: do
they grow?), the CPU seconds of the node (its main thread apart), the honest peer, the
attacker and the machine, and the load. Prints a table; writes JSON.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from lab.unresponsive_bench import CASES, ROOT, Honest, run


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default=",".join(CASES), help="cases to run, comma-separated")
    parser.add_argument("--before", type=int, default=40, help="rounds before the event")
    parser.add_argument("--after", type=int, default=80, help="rounds after the event")
    parser.add_argument(
        "--honest-period", type=float, default=Honest.period_s, help="the honest peer's round, s"
    )
    parser.add_argument(
        "--honest-groups", type=int, default=Honest.groups, help="groups it makes a round"
    )
    parser.add_argument(
        "--out",
        default=str(ROOT / "results" / "unresponsive" / "bench.json"),
        help="JSON written after each case",
    )
    args = parser.parse_args(argv)
    cases = [c for c in args.cases.split(",") if c]
    unknown = [c for c in cases if c not in CASES]
    if unknown:
        parser.error(f"unknown case {unknown[0]!r} (known: {', '.join(CASES)})")
    honest = Honest(args.honest_period, args.honest_groups)
    run(cases, args.before, args.after, Path(args.out), " ".join(sys.argv), honest)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
