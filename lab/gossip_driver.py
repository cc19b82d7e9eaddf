"""The gossip benchmark's driver: worker processes (`lab.gossip_worker`) on 127.0.0.1,
meshed, and one phase of publishing (paced or burst) measured across them: delivered
fraction, messages/s, one-hop and all-nodes latency.
"""

from __future__ import annotations

import json
import math
import queue
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

DEFAULT_SIZES = (1024, 16 * 1024, 64 * 1024)
DEFAULT_NODES = (2, 4, 8)
START_TIMEOUT_S = 60.0
# A phase ends when every node has every message, or when deliveries stall this long.
STALL_TIMEOUT_S = 20.0
PHASE_TIMEOUT_S = 300.0


class Worker:
    """A worker process and a blocking request channel to it."""

    def __init__(self, index: int, bootstrap: list[str], log_dir: Path, extra: list[str]) -> None:
        args = [
            sys.executable,
            "-m",
            "lab.gossip_worker",
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
        assert self.proc.stdin is not None and self.proc.stdout is not None  # both piped
        self._in, self._out = self.proc.stdin, self.proc.stdout
        self._lines: queue.Queue = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()
        self._next_id = 0
        self.addrs: list[str] = []

    def _pump(self) -> None:
        for line in self._out:
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
        self._in.write(json.dumps({**cmd, "id": self._next_id}) + "\n")
        self._in.flush()
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
