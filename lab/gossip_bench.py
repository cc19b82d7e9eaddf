"""Benchmark Libp2pTransport gossip on loopback: delivery, throughput and latency.

What it measures, on what and how, is said once: in `scripts/bench_gossip.py`'s help.
`run` takes the options of `scripts/bench_gossip.py`; `lab.gossip_driver` drives
the worker processes.
"""

from __future__ import annotations

import json
import os
import platform
import sys
import time
from pathlib import Path

from lab.gossip_driver import DEFAULT_NODES, DEFAULT_SIZES, run_phase, start_network


def print_table(rows: list[dict]) -> None:
    headers = [
        ("nodes", "nodes"),
        ("size", "size B"),
        ("phase", "phase"),
        ("delivered_fraction", "delivered"),
        ("messages_per_s", "msg/s"),
        ("one_hop_p50_ms", "1-hop p50 ms"),
        ("one_hop_p99_ms", "1-hop p99 ms"),
        ("all_nodes_p50_ms", "all p50 ms"),
        ("all_nodes_p99_ms", "all p99 ms"),
        ("outbound_dropped", "q-drops"),
        ("outbound_discarded", "q-lost"),
    ]

    def cell(row: dict, key: str) -> str:
        value = row[key]
        if value is None:
            return "-"
        if key == "delivered_fraction":
            return f"{100 * value:.2f}%"
        return str(value)

    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:
        print("  ".join(h for _, h in headers))
        for row in rows:
            print("  ".join(cell(row, k) for k, _ in headers))
        return
    table = Table(title="Libp2pTransport gossip on loopback (msg/s: network-wide, burst)")
    for _, header in headers:
        table.add_column(header, justify="right")
    for row in rows:
        table.add_row(*(cell(row, k) for k, _ in headers))
    Console(width=160).print(table)


def run(args) -> int:
    """Every node count and size, paced then burst; the table and the JSON. `args` holds the
    options of scripts/bench_gossip.py."""
    import libp2p

    from swarm.p2p.libp2p import DEFAULT_MESH_DEGREE

    nodes = args.nodes or ((2, 4) if args.quick else DEFAULT_NODES)
    sizes = args.sizes or ((1024, 16 * 1024) if args.quick else DEFAULT_SIZES)
    paced = args.paced or (40 if args.quick else 100)
    burst = args.burst or (100 if args.quick else 200)
    out = Path(args.out)
    log_dir = out.parent / "bench_gossip_logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    worker_args = [] if args.mesh_degree is None else ["--mesh-degree", str(args.mesh_degree)]
    degree = args.mesh_degree or DEFAULT_MESH_DEGREE
    rows = []
    for n in nodes:
        began = time.monotonic()
        workers = start_network(n, log_dir, worker_args, max(1, degree * 2 // 3))
        print(f"{n} nodes up and meshed in {time.monotonic() - began:.1f} s", file=sys.stderr)
        try:
            for size in sizes:
                tag = f"n{n}s{size}"
                # Paced: the whole network publishes at args.paced_rate messages/s in total.
                rate = args.paced_rate / n
                rows.append(
                    run_phase(workers, size, f"paced-{tag}", max(1, paced // n), rate).summary()
                )
                # A burst is --burst messages per node, capped at --burst-bytes per node so the
                # large sizes do not run for minutes on a small machine.
                count = max(1, min(burst, args.burst_bytes // size))
                rows.append(run_phase(workers, size, f"burst-{tag}", count, 0.0).summary())
                print(json.dumps(rows[-2]), "\n", json.dumps(rows[-1]), file=sys.stderr)
        finally:
            for worker in workers:
                worker.stop()
    print_table(rows)
    result = {
        "generated_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "machine": {
            "cpus": _cpu_count(),
            "python": platform.python_version(),
            "libp2p": libp2p.__version__,
        },
        "config": {
            "nodes": list(nodes),
            "sizes": list(sizes),
            "paced_messages": paced,
            "burst_per_node": burst,
            "burst_bytes_per_node": args.burst_bytes,
            "paced_rate_total": args.paced_rate,
            "mesh_degree": degree,
        },
        "target": {"delivered_fraction": 1.0, "one_hop_p50_ms_1kb": 10.0},
        "results": rows,
    }
    out.write_text(json.dumps(result, indent=2))
    print(f"wrote {out}", file=sys.stderr)
    return 0


def _cpu_count() -> int | None:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
