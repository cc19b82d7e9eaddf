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

The same file is also the node process (`--worker`), so the benchmark has no dependency on
the test suite. It is a measurement tool, not a load generator for real deployments.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import queue
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

TOPIC = "bench"
DEFAULT_SIZES = (1024, 16 * 1024, 64 * 1024)
DEFAULT_NODES = (2, 4, 8)
START_TIMEOUT_S = 60.0
# A phase ends when every node has every message, or when deliveries stall this long.
STALL_TIMEOUT_S = 20.0
PHASE_TIMEOUT_S = 300.0


# ----------------------------------------------------------------------------------------
# Worker: one node, driven by JSON-lines commands on stdin.
# ----------------------------------------------------------------------------------------


def _emit(obj: dict) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


class _Recorder:
    """Records, per phase, (sender, seq, latency ms, came-straight-from-origin) of each message."""

    def __init__(self, transport) -> None:
        self._transport = transport
        self._lock = threading.Lock()
        self.records: dict[str, list] = {}
        self.last_receive: dict[str, float] = {}
        self._stop = threading.Event()
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        while not self._stop.is_set():
            for message in self._transport.receive(timeout=0.1):
                self._record(message)

    def _record(self, message) -> None:
        sender, seq, phase, sent_ns = message.data.split(b":", 4)[:4]
        latency_ms = (message.received_at - int(sent_ns) / 1e9) * 1000.0
        direct = getattr(message, "forwarder", "") == message.source
        with self._lock:
            self.records.setdefault(phase.decode(), []).append(
                [int(sender), int(seq), latency_ms, direct]
            )
            self.last_receive[phase.decode()] = max(
                self.last_receive.get(phase.decode(), 0.0), message.received_at
            )

    def count(self, phase: str) -> int:
        with self._lock:
            return len({(r[0], r[1]) for r in self.records.get(phase, [])})

    def report(self, phase: str) -> dict:
        with self._lock:
            return {
                "records": list(self.records.get(phase, [])),
                "last_receive": self.last_receive.get(phase, 0.0),
            }

    def stop(self) -> None:
        self._stop.set()


def _publish(transport, index: int, cmd: dict) -> dict:
    count, size, rate, phase = cmd["count"], cmd["size"], cmd["rate"], cmd["phase"]
    interval = 1.0 / rate if rate > 0 else 0.0
    began_wall, began = time.time(), time.monotonic()
    next_at = began
    for seq in range(count):
        if interval:
            delay = next_at - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            next_at += interval
        head = f"{index}:{seq}:{phase}:{time.time_ns()}:".encode()
        transport.publish(TOPIC, head + b"x" * max(0, size - len(head)))
    return {"began": began_wall, "seconds": time.monotonic() - began}


def worker_main(args: argparse.Namespace) -> int:
    from swarm.core.errors import TransportError
    from swarm.p2p.libp2p import Libp2pTransport

    transport = Libp2pTransport(
        bootstrap=args.bootstrap,
        topics=[TOPIC],
        inbox_capacity=1 << 18,
        **({} if args.mesh_degree is None else {"mesh_degree": args.mesh_degree}),
    )
    transport.start()
    recorder = _Recorder(transport)
    _emit({"event": "ready", "peer_id": transport.peer_id, "addrs": transport.listen_addrs()})
    commands: queue.Queue = queue.Queue()

    def read_stdin() -> None:
        for line in sys.stdin:
            commands.put(json.loads(line))
        commands.put({"cmd": "exit"})  # parent gone

    threading.Thread(target=read_stdin, daemon=True).start()
    deadline = time.monotonic() + args.max_lifetime
    try:
        while time.monotonic() < deadline:
            try:
                cmd = commands.get(timeout=0.5)
            except queue.Empty:
                continue
            name = cmd["cmd"]
            if name == "exit":
                break
            try:
                if name == "wait_mesh":
                    reply = {
                        "mesh": transport.wait_for_topic_peers(TOPIC, cmd["n"], cmd["timeout"])
                    }
                elif name == "publish":
                    reply = _publish(transport, args.index, cmd)
                elif name == "flush":
                    reply = {"flushed": transport.flush(cmd["timeout"])}
                elif name == "stats":
                    reply = {"stats": transport.stats().as_dict()}
                elif name == "count":
                    reply = {"count": recorder.count(cmd["phase"])}
                elif name == "report":
                    reply = {**recorder.report(cmd["phase"]), "stats": transport.stats().as_dict()}
                else:
                    raise ValueError(f"unknown command {name!r}")
                reply["ok"] = True
            except (TransportError, ValueError, KeyError) as exc:
                reply = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
            _emit({"id": cmd.get("id"), **reply})
    finally:
        recorder.stop()
        transport.close()
    return 0


# ----------------------------------------------------------------------------------------
# Driver.
# ----------------------------------------------------------------------------------------


class Worker:
    """A worker process and a blocking request channel to it."""

    def __init__(self, index: int, bootstrap: list[str], log_dir: Path, extra: list[str]) -> None:
        args = [
            sys.executable,
            __file__,
            "--worker",
            "--index",
            str(index),
            "--max-lifetime",
            "1800",
        ]
        for addr in bootstrap:
            args += ["--bootstrap", addr]
        args += extra
        self._log = open(log_dir / f"worker-{index}.stderr", "w")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            args,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
            text=True,
            bufsize=1,
        )
        self._lines: queue.Queue = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()
        self._next_id = 0
        self.addrs: list[str] = []

    def _pump(self) -> None:
        for line in self.proc.stdout:
            self._lines.put(json.loads(line))
        self._lines.put(None)

    def _line(self, timeout: float) -> dict:
        try:
            line = self._lines.get(timeout=timeout)
        except queue.Empty:
            raise RuntimeError(
                f"worker {self.proc.pid}: no answer within {timeout:.0f} s"
            ) from None
        if line is None:
            raise RuntimeError(f"worker {self.proc.pid} exited (see its .stderr log)")
        return line

    def wait_ready(self) -> None:
        self.addrs = self._line(START_TIMEOUT_S)["addrs"]

    def send(self, cmd: dict) -> int:
        self._next_id += 1
        self.proc.stdin.write(json.dumps({**cmd, "id": self._next_id}) + "\n")
        self.proc.stdin.flush()
        return self._next_id

    def reply(self, request_id: int, timeout: float = 120.0) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            line = self._line(max(0.1, deadline - time.monotonic()))
            if line.get("id") == request_id:
                if not line.get("ok"):
                    raise RuntimeError(f"worker {self.proc.pid}: {line.get('error')}")
                return line

    def request(self, cmd: dict, timeout: float = 120.0) -> dict:
        return self.reply(self.send(cmd), timeout)

    def stop(self) -> None:
        try:
            if self.proc.poll() is None:
                self.send({"cmd": "exit"})
                self.proc.wait(timeout=10)
        except (OSError, ValueError, subprocess.TimeoutExpired):
            pass
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait(timeout=10)
            self._log.close()


def broadcast(workers: list[Worker], make_cmd, timeout: float = 300.0) -> list[dict]:
    """Send a command to every worker at once, then collect all replies."""
    pending = [(w, w.send(make_cmd(i))) for i, w in enumerate(workers)]
    return [w.reply(request_id, timeout) for w, request_id in pending]


def start_network(n: int, log_dir: Path, extra: list[str], mesh_low: int) -> list[Worker]:
    first = Worker(0, [], log_dir, extra)
    workers = [first]
    try:
        first.wait_ready()
        workers += [Worker(i, first.addrs, log_dir, extra) for i in range(1, n)]
        for worker in workers[1:]:
            worker.wait_ready()
        want = min(n - 1, mesh_low)
        meshes = broadcast(workers, lambda i: {"cmd": "wait_mesh", "n": want, "timeout": 30})
        if any(m["mesh"] < want for m in meshes):
            print(f"warning: meshes {[m['mesh'] for m in meshes]} below {want}", file=sys.stderr)
    except BaseException:
        for worker in workers:
            worker.stop()
        raise
    return workers


def wait_delivered(workers: list[Worker], phase: str, per_sender: int) -> bool:
    """Wait until every node has every message (True), or deliveries stall or time out (False)."""
    expected = per_sender * (len(workers) - 1)
    began = last_progress = time.monotonic()
    last_total = -1
    while time.monotonic() - began < PHASE_TIMEOUT_S:
        counts = [
            c["count"] for c in broadcast(workers, lambda i: {"cmd": "count", "phase": phase})
        ]
        if all(c >= expected for c in counts):
            return True
        if sum(counts) > last_total:
            last_total, last_progress = sum(counts), time.monotonic()
        elif time.monotonic() - last_progress > STALL_TIMEOUT_S:
            return False
        time.sleep(0.25)
    return False


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)  # nearest-rank percentile
    return ordered[min(len(ordered), max(1, math.ceil(q / 100 * len(ordered)))) - 1]


@dataclass
class PhaseResult:
    nodes: int
    size: int
    phase: str
    published: int
    delivered: int
    expected: int
    seconds: float
    complete: bool
    one_hop_ms: list[float] = field(default_factory=list)
    all_nodes_ms: list[float] = field(default_factory=list)
    stats: list[dict] = field(default_factory=list)

    def summary(self) -> dict:
        return {
            "nodes": self.nodes,
            "size": self.size,
            "phase": self.phase,
            "published": self.published,
            "delivered": self.delivered,
            "expected": self.expected,
            "delivered_fraction": self.delivered / self.expected if self.expected else None,
            "complete": self.complete,
            "seconds": round(self.seconds, 3),
            # Messages published network-wide per second, counted until the last delivery.
            "messages_per_s": round(self.published / self.seconds, 1) if self.delivered else None,
            "one_hop_p50_ms": _round(percentile(self.one_hop_ms, 50)),
            "one_hop_p99_ms": _round(percentile(self.one_hop_ms, 99)),
            "one_hop_samples": len(self.one_hop_ms),
            "all_nodes_p50_ms": _round(percentile(self.all_nodes_ms, 50)),
            "all_nodes_p99_ms": _round(percentile(self.all_nodes_ms, 99)),
            "outbound_dropped": sum(s["outbound_dropped"] for s in self.stats),
            "outbound_discarded": sum(s["outbound_discarded"] for s in self.stats),
            "inbox_dropped": sum(s["inbox_dropped"] for s in self.stats),
            "backpressure_waits": sum(s["backpressure_waits"] for s in self.stats),
            "backpressure_timeouts": sum(s["backpressure_timeouts"] for s in self.stats),
            "stalled_peers": sum(s["stalled_peers"] for s in self.stats),
        }


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 2)


def run_phase(
    workers: list[Worker], size: int, phase: str, per_sender: int, rate: float
) -> PhaseResult:
    n = len(workers)
    before = [r["stats"] for r in broadcast(workers, lambda i: {"cmd": "stats"})]
    published = broadcast(
        workers,
        lambda i: {
            "cmd": "publish",
            "phase": phase,
            "count": per_sender,
            "size": size,
            "rate": rate,
        },
    )
    complete = wait_delivered(workers, phase, per_sender)
    reports = broadcast(workers, lambda i: {"cmd": "report", "phase": phase})
    # Let forwarded duplicates drain too, so the next phase starts on an idle network.
    broadcast(workers, lambda i: {"cmd": "flush", "timeout": 30.0})
    time.sleep(0.5)
    began = min(p["began"] for p in published)
    last = max((r["last_receive"] for r in reports), default=began)
    per_message: dict[tuple[int, int], list[float]] = {}
    one_hop, distinct = [], 0
    for report in reports:
        seen = set()
        for sender, seq, latency_ms, direct in report["records"]:
            if (sender, seq) in seen:
                continue
            seen.add((sender, seq))
            per_message.setdefault((sender, seq), []).append(latency_ms)
            if direct:
                one_hop.append(latency_ms)
        distinct += len(seen)
    all_nodes = [max(lat) for lat in per_message.values() if len(lat) == n - 1]
    return PhaseResult(
        nodes=n,
        size=size,
        phase=phase,
        published=per_sender * n,
        delivered=distinct,
        expected=per_sender * n * (n - 1),
        seconds=max(last - began, 1e-9),
        complete=complete,
        one_hop_ms=one_hop,
        all_nodes_ms=all_nodes,
        stats=[_delta(r["stats"], b) for r, b in zip(reports, before, strict=True)],
    )


def _delta(after: dict, before: dict) -> dict:
    """Counters accumulated during one phase (the transport's are totals since start)."""
    return {k: v - before.get(k, 0) for k, v in after.items() if isinstance(v, int)}


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


def driver_main(args: argparse.Namespace) -> int:
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
    # Worker mode (internal).
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--index", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--bootstrap", action="append", default=[], help=argparse.SUPPRESS)
    parser.add_argument("--max-lifetime", type=float, default=1800.0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    return worker_main(args) if args.worker else driver_main(args)


if __name__ == "__main__":
    sys.exit(main())
