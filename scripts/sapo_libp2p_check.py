"""Does the in-memory experiment tell the truth about real nodes? One arm over libp2p, compared.

`scripts/sapo_experiment.py` runs a swarm's 8 nodes in one process over the in-memory
transport, round-robin. This script runs the same arm (same models, seeds, settings) as 8
separate `swarm-node join` processes of a private cluster on 127.0.0.1 (real libp2p, signing,
gossip and verification, no round-robin: each node runs at its own pace), reads each node's
own-rollout reward per round from its ledger, and compares the swarm's cumulative reward with
the in-memory units of the same arm and learning rate over the same rounds: the same seed,
and the spread over all seeds found.

    python scripts/sapo_libp2p_check.py --arm 4/4 --seed 0 --lr 1e-4 --rounds 40

Writes <results>/<protocol>-<testbed>/libp2p_check.json. Every process it starts ends by
itself (each node stops after --rounds rounds); on Ctrl-C it stops them by PID.
"""

from __future__ import annotations

import argparse
import sys

from lab.experiment import Protocol
from lab.libp2p_check import run


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--arm", default="4/4", help="the arm (I/J)")
    parser.add_argument("--seed", type=int, default=0, help="seed (as in the experiment's units)")
    parser.add_argument(
        "--lr", type=float, default=1e-4, help="learning rate (as in the units compared with)"
    )
    parser.add_argument("--rounds", type=int, default=40, help="rounds each node runs")
    parser.add_argument("--protocol", default="paper", choices=[p.value for p in Protocol])
    parser.add_argument("--results", default="results/sapo", help="the experiment's results folder")
    parser.add_argument(
        "--timeout",
        type=float,
        default=3600,
        help="give up (and stop the nodes) after this many seconds",
    )
    return parser.parse_args(argv)


def main(argv=None) -> int:
    return run(parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
