"""How off-policy are a peer's completions for the node that trains on them?

SAPO trains a node on its peers' completions as if they were its own (ratio 1). That is
only sound while the peers' policies stay close to the receiver's. This script runs two
tiny-model nodes that share rollouts (4 local + 4 shared groups an update, in one process
over the in-memory transport) and, every few rounds, has node B sample fresh groups and
measures for each completion:

- the largest gap between B's own sampling log-probs and the log-probs B's shared-group
  path (re-tokenize, score under the policy) gives the same text: ~1e-6 means the path
  that trains on peers' groups is exact;
- log(mu_B / pi_A) over the whole completion: how much likelier B (which sampled it) found
  it than A (which trains on it). Near 0: as good as A's own sample.

    python scripts/sapo_drift.py                    # 30 rounds, lr 1e-4
    python scripts/sapo_drift.py --max-new-tokens 8 --lr 3e-4

Prints a table and writes JSON. Deliberately not a training benchmark: rewards are not
compared here (see `scripts/sapo_experiment.py`).
"""

from __future__ import annotations

import argparse
import sys

from lab.drift import run


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=30, help="rounds both nodes run")
    parser.add_argument(
        "--measure-every", type=int, default=5, help="measure after every this many rounds"
    )
    parser.add_argument("--lr", type=float, default=1e-4, help="learning rate of both nodes")
    parser.add_argument(
        "--questions", type=int, default=9, help="questions per round (and per measurement)"
    )
    parser.add_argument(
        "--max-new-tokens", type=int, default=10, help="longest completion, in tokens"
    )
    parser.add_argument("--out", default="runs/sapo_drift.json", help="JSON results")
    return parser.parse_args(argv)


def main(argv=None) -> int:
    return run(parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
