"""What a node costs per round as the swarm grows, for the gossip and the pull exchange.

    python scripts/bench_scale.py sim --exchange pull --nodes 100 1000 10000
    python scripts/bench_scale.py sim --exchange gossip --nodes 8 32 100
    python scripts/bench_scale.py real --network 32 --trainers 8          # processes, libp2p
    python scripts/bench_scale.py deltas --followers 10 100 1000          # a trainer's upload
    python scripts/bench_scale.py report                                  # table, JSON, PNG

`sim` runs N network-only nodes in this process over the memory transport
(`lab.scale_sim`: real tasks, signatures, verification, sampler; simulated time) and
writes one JSON per run; `real` runs network-only node processes and tiny-model trainers
over libp2p on 127.0.0.1 (`lab.scale_real`); `deltas` simulates followers fetching a
trainer's deltas (`lab.delta_sim`); `report` gathers every JSON under --out into
summary.json, prints the table and draws scale.png: per-node cost against N, log axes. The
gossip exchange cannot be simulated at 1,000 or 10,000 nodes (each node would verify 16,000
or 160,000 groups a round); its cost there is the line fitted to its measured sizes, drawn
dashed and marked "model" in the table.
"""

from __future__ import annotations

import argparse

from lab.scale_runs import run


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", default="results/scale", help="folder of the JSON results")
    sub = parser.add_subparsers(dest="command", required=True)
    sim = sub.add_parser("sim", help="N nodes in one process over the memory transport")
    sim.add_argument("--exchange", choices=("pull", "gossip"), default="pull")
    sim.add_argument("--nodes", type=int, nargs="+", default=[100, 1000], help="swarm sizes")
    sim.add_argument("--rounds", type=int, default=4, help="rounds, warm-up included")
    sim.add_argument("--warmup", type=int, default=2, help="rounds not measured")
    sim.add_argument(
        "--view-rounds", type=int, default=20, help="view shuffles before round 0 (pull)"
    )
    sim.add_argument("--hostile", type=float, default=0.0, help="share of colluding identities")
    sim.add_argument("--greedy", type=int, default=0, help="greedy viewers (fetch every view)")
    sim.add_argument("--sketch", type=int, default=128, help="history sample (0: from the view)")
    sim.add_argument(
        "--sampled-views", type=int, default=1, help="views heard a refresh from sampled peers"
    )
    sim.add_argument(
        "--most-sampled-views",
        type=int,
        default=16,
        help="... at most, while they still teach a node new IDs (= --sampled-views: fixed)",
    )
    sim.add_argument("--loss", type=float, default=0.0, help="share of fetches lost")
    sim.add_argument("--latency", type=float, default=0.0, help="seconds per fetch")
    sim.add_argument("--churn", type=float, default=0.0, help="share replaced each round")
    sim.add_argument(
        "--vanished",
        type=float,
        default=1.0,
        help="share of leavers that vanish: fetches from them wait their timeout (else refused)",
    )
    real = sub.add_parser("real", help="node processes over libp2p on 127.0.0.1")
    real.add_argument("--exchange", choices=("pull", "gossip"), default="pull")
    real.add_argument("--network", type=int, default=32, help="network-only processes")
    real.add_argument("--trainers", type=int, default=8, help="tiny-model trainer processes")
    real.add_argument("--rounds", type=int, default=12)
    real.add_argument("--period", type=float, default=15.0, help="seconds per round")
    real.add_argument("--trainer-rounds", type=int, default=4)
    real.add_argument("--nice", type=int, default=15)
    real.add_argument("--max-connections", type=int, default=64, help="per network-only process")
    real.add_argument("--tag", default="", help="name of the result (default: from sizes)")
    deltas = sub.add_parser("deltas", help="a trainer's upload per version, by followers")
    deltas.add_argument("--followers", type=int, nargs="+", default=[10, 100, 1000])
    sub.add_parser("report", help="table, summary.json and scale.png from the results")
    return parser.parse_args(argv)


def main(argv=None) -> int:
    return run(parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
