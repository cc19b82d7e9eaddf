"""What a node process costs in memory and start-up time, stage by stage.

Each measurement runs in a fresh Python process (what is imported is the point):

- `imports`: the node's heavy imports one after another, in the order a node makes them,
  with the resident memory and seconds each adds;
- `tiny`: a trainer node with the built-in tiny model on the libp2p transport (listening on
  127.0.0.1, no peers), as `swarm-node join` runs it: build, start, evaluate, a few rounds,
  checkpoint, close; per stage the seconds (wall and CPU), RSS after it and the peak RSS
  during it, and at the end where the resident memory lives (heap, anonymous, files);
- `network`: a network-only node (`lab.network_node`: no model, synthetic groups,
  real signing and verification) over libp2p, in a swarm of three (two more such nodes
  run in their own processes): build, start, rounds paced 2 s apart, close.

    python scripts/bench_footprint.py                         # imports, tiny, network
    python scripts/bench_footprint.py --only tiny --config node_config/solo-cpu.toml
    python scripts/bench_footprint.py --only tiny --set training.micro_batch_size=64

Prints a table per measurement and writes JSON (default runs/bench_footprint.json).
"""

from __future__ import annotations

import argparse
import sys

from lab.node_footprint import KINDS, run


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--only", choices=KINDS, action="append", help="measure only these")
    parser.add_argument("--config", help="node config for the tiny node (default: defaults)")
    parser.add_argument("--set", dest="sets", action="append", default=[], help="section.key=value")
    parser.add_argument("--rounds", type=int, default=3, help="rounds the nodes run")
    parser.add_argument("--out", default="runs/bench_footprint.json", help="JSON results")
    return parser.parse_args(argv)


def main(argv=None) -> int:
    return run(parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
