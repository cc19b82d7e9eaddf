"""What verification costs: checks per second for valid and invalid groups, and its share of a round.

Runs a real solo node (the same `Node` as `swarm-node join`, default settings, the built-in
tiny model unless overridden) for a few rounds in a temporary folder, times the rounds, and
takes the signed groups it published as realistic input. Each group is then put through
the verifier as a peer's would be: the gossip validator's checks (`admit`: decode, schema,
bounds, signature, swarm, allow-list, bans, age, nonce, version, rate limit), the inbox
re-check (`recheck`, with and without the second signature check) and the expensive checks
(`verify_content`: copycat, task rebuild, question, every reward recomputed; in this
process and in the bounded verification worker a node uses by default, whose round trip
per group is reported apart) and the token
spot check that groups declaring our model and policy version get (counted for every group:
the worst case). Invalid groups
are timed too (garbage, forged signature, inflated reward, a task outside the catalogue).

The share of round time assumes each of P peers sends as many groups per round as this node
generates (P = 1, 4, 8). Prints a table and writes JSON.

    python scripts/bench_verify.py                   # defaults, 3 timed rounds
    python scripts/bench_verify.py --rounds 5 --set generation.questions_per_round=32
"""

from __future__ import annotations

import argparse
import sys

from lab.verify_cost import run


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--config", default=None, help="node config (default: built-in defaults)")
    parser.add_argument(
        "--rounds", type=int, default=3, help="rounds to time (after one warm-up round)"
    )
    parser.add_argument(
        "--set", dest="sets", action="append", default=[], help="config override, section.key=value"
    )
    parser.add_argument(
        "--repeat", type=int, default=5, help="passes over the groups per measurement"
    )
    parser.add_argument(
        "--out", default="runs/bench_verify.json", help="where to write the JSON results"
    )
    return parser.parse_args(argv)


def main(argv=None) -> int:
    return run(parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
