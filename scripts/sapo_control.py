"""The channels study's positive control: can a node's weak families move at all in the budget?

A gap-swarm node answers its two weak families one step off. Before asking whether a sharing
channel teaches them, this asks whether anything can within the run's budget: the node is
fine-tuned, one optimizer step a round for `--rounds` rounds (the verdict's length), on its
peer's right completions only (advantage 1 each: supervised learning on what the peer got
right), at each of `--lrs`. The peer is a gap node strong on the receiver's weak families; it
generates `--completions` completions for `--questions` weak-family questions a round, as a
node of the swarm would. Held-out greedy accuracy on the weak families is measured every
`--eval-every` rounds. The negative control (rewards shuffled within shared groups) is the arm
`4/4-shuf` of `scripts/sapo_experiment.py`.

    python scripts/sapo_control.py                          # receivers 0 and 1, lr 1e-4 and 1e-3
    python scripts/sapo_control.py --pairs 2:3 --lrs 1e-3 --rounds 100

Writes one JSON per (receiver, lr) under results/sapo/channels-control/ (skipped when present,
so a stopped run resumes) and prints a table.
"""

from __future__ import annotations

import argparse
import sys

from lab.positive_control import run


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--pairs",
        default="0:1,1:0",
        help="receiver:peer gap-node pairs, comma-separated (the peer must be strong on the "
        "receiver's weak families)",
    )
    parser.add_argument("--lrs", default="1e-4,1e-3", help="learning rates, comma-separated")
    parser.add_argument("--rounds", type=int, default=300, help="optimizer steps (rounds)")
    parser.add_argument("--questions", type=int, default=4, help="weak-family questions a round")
    parser.add_argument("--completions", type=int, default=8, help="peer completions a question")
    parser.add_argument("--eval-size", type=int, default=100, help="held-out questions")
    parser.add_argument("--eval-every", type=int, default=50, help="rounds between evaluations")
    parser.add_argument("--seed", type=int, default=0, help="seed of the questions and sampling")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    parser.add_argument("--out", default="results/sapo/channels-control", help="results folder")
    return parser.parse_args(argv)


def main(argv=None) -> int:
    return run(parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
