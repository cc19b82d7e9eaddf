"""Benchmark Libp2pTransport gossip on loopback: delivery, throughput and latency.

For each node count (default 2, 4, 8) it starts that many nodes as separate processes on
127.0.0.1 (the first is the bootstrap; the rest find each other by peer exchange) and, for
each message size (default ~1 KB, ~16 KB, ~64 KB: typical rollout-group batches), runs:

  paced  every node publishes at a low, steady rate (the network total is --paced-rate
         messages/s), so latency is measured without queueing. "one-hop" latency is taken
         at receivers that got the message straight from its origin; "all-nodes" latency is,
         per message, the time until the last node had it.
  burst  every node publishes --burst messages as fast as publish() allows, all at once:
         delivered fraction (distinct messages received / messages x receivers) and
         messages/s (messages published network-wide / time until the last delivery).

Latency is receive time (when the transport accepted the message) minus send time (just
before publish()), both from the wall clock of the same machine.

Target: 100% delivery, p50 one-hop latency under 10 ms for a 1 KB message.

    python scripts/bench_gossip.py            # full run, writes runs/bench_gossip.json
    python scripts/bench_gossip.py --quick    # smaller and faster

Each node is `lab.gossip_worker` run as a program, so the benchmark has no
dependency on the test suite. It is a measurement tool, not a load generator for real
deployments.
"""

from __future__ import annotations

import argparse
import sys

from lab.gossip_bench import run


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick", action="store_true", help="2 and 4 nodes, 1 KB and 16 KB, fewer messages"
    )
    parser.add_argument("--out", default="runs/bench_gossip.json")
    parser.add_argument("--nodes", type=int, nargs="+")
    parser.add_argument("--sizes", type=int, nargs="+")
    parser.add_argument("--paced", type=int, help="messages in the paced phase, network total")
    parser.add_argument(
        "--paced-rate", type=float, default=20.0, help="paced phase, messages/s network total"
    )
    parser.add_argument("--burst", type=int, help="messages per node in the burst phase")
    parser.add_argument(
        "--burst-bytes", type=int, default=4 * 1024 * 1024, help="cap on burst bytes per node"
    )
    parser.add_argument(
        "--mesh-degree", type=int, default=None, help="GossipSub D (default: the transport's)"
    )
    return run(parser.parse_args())


if __name__ == "__main__":
    sys.exit(main())
