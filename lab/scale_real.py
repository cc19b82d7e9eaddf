"""A real swarm on this machine: network-only node processes and tiny-model trainers over
libp2p on 127.0.0.1, all joined through the first network-only node's address.

Network-only nodes (`python -m lab.network_node`) run paced rounds and print one
JSON line a round: bytes are the process's TCP bytes over the round's window (everything
on the wire: Noise, Yamux, gossip, blobs), CPU the process's CPU over it (network thread
included). Trainers are ordinary `swarm-node join` processes with the tiny model; what they
pulled, verified, refused and trained on is read from their ledgers afterwards. Every
process ends by itself; the peak resident memory of each is polled while it runs.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from swarm.ledger import GroupRow, GroupUseRow, Ledger

ROOT = Path(__file__).resolve().parents[1]
BATCH = 20  # network-only processes started at once


@dataclass(frozen=True)
class RealSettings:
    network: int = 32
    trainers: int = 8
    exchange: str = "pull"
    rounds: int = 12  # network-only rounds
    period_s: float = 15.0
    groups: int = 16  # Q of a network-only node
    shared: int = 8  # J of a network-only node
    trainer_rounds: int = 4
    trainer_questions: int = 8
    trainer_shared: int = 4
    warmup: int = 2  # network-only rounds left out of the summaries
    nice: int = 15
    max_connections: int = 64  # of each network-only process


def _popen(args: list[str], nice: int, log: Path | None = None) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    prefix = ["nice", "-n", str(nice)] if nice else []
    return subprocess.Popen(
        [*prefix, sys.executable, *args],
        stdout=subprocess.PIPE,
        stderr=log.open("w") if log else subprocess.DEVNULL,
        text=True,
        env=env,
        cwd=ROOT,
    )


def _stdout(proc: subprocess.Popen):
    assert proc.stdout is not None  # started with stdout=PIPE
    return proc.stdout


def _peak_mb(pid: int) -> float:
    """VmHWM of a running process (0 once it is gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def _pids_below(pid: int) -> list[int]:
    """`pid` and its descendants (nice execs python in place: usually just `pid`)."""
    found = [pid]
    try:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return found
    for child in children:
        found += _pids_below(int(child))
    return found


def run_real(
    s: RealSettings, out_dir: Path, progress: Callable[[str], None] = lambda m: None
) -> dict:
    """Run the swarm; returns per-process records and summaries (see the module docstring)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    start_file = out_dir / "start_at"
    start_file.unlink(missing_ok=True)
    common = [
        "-m",
        "lab.network_node",
        "--exchange",
        s.exchange,
        "--rounds",
        str(s.rounds),
        "--period",
        str(s.period_s),
        "--groups",
        str(s.groups),
        "--shared",
        str(s.shared),
        "--start-file",
        str(start_file),
        "--max-connections",
        str(s.max_connections),
        "--linger",
        str(s.period_s),
    ]
    first = _popen(common, s.nice, out_dir / "network-0.log")
    hello = json.loads(_stdout(first).readline())
    address = hello["addrs"][0]
    procs = [("network", first)]
    ready, joined = [address], 0
    rng = random.Random(0)
    # in batches, each process joining through the first node and one already there (so
    # that 100 handshakes do not all wait on one process); the readiness barrier: every
    # process has a connected peer before round 0 is set
    for start in range(1, s.network, BATCH):
        batch = []
        for i in range(start, min(start + BATCH, s.network)):
            boot = ["--bootstrap", address]
            if len(ready) > 1:
                boot += ["--bootstrap", rng.choice(ready[1:])]
            log = out_dir / f"network-{i}.log"
            batch.append(("network", _popen([*common, *boot], s.nice, log)))
        for _, proc in batch:
            line = _stdout(proc).readline()
            if line:
                hello = json.loads(line)
                ready.append(hello["addrs"][0])
                joined += hello.get("peers", 0) > 0
        procs += batch
        progress(f"{len(ready)} of {s.network} network-only processes up, {joined} joined")
    start_at = time.time() + 5.0 + 0.05 * s.network
    start_file.write_text(repr(start_at))
    trainer_dirs = [out_dir / f"trainer-{i}" for i in range(s.trainers)]
    # trainers start once the network-only nodes have announced their first round's groups: a
    # trainer runs its rounds as fast as it can, and one that started earlier could finish
    # before anything was there to pull
    time.sleep(max(0.0, start_at + s.period_s - time.time()))
    for i, run_dir in enumerate(trainer_dirs):
        args = [
            "-m",
            "swarm.cli",
            "join",
            "--run-dir",
            str(run_dir),
            "--rounds",
            str(s.trainer_rounds),
            "--seed",
            str(i + 1),
            "--bootstrap",
            address,
            "--display",
            "none",
            "--set",
            f"p2p.exchange={s.exchange}",
            "--set",
            f"sharing.shared_groups={s.trainer_shared}",
            "--set",
            f"generation.questions_per_round={s.trainer_questions}",
            "--set",
            "tasks.eval_size=0",
        ]
        procs.append(("trainer", _popen(args, s.nice, out_dir / f"trainer-{i}.log")))
    progress(f"{len(procs)} processes started; round 0 at +{start_at - time.time():.0f}s")
    peaks = [0.0] * len(procs)
    outputs: list[str | None] = [None] * len(procs)
    while any(out is None for out in outputs):
        for i, (_, proc) in enumerate(procs):
            if outputs[i] is None:
                peaks[i] = max([peaks[i]] + [_peak_mb(p) for p in _pids_below(proc.pid)])
                if proc.poll() is not None:
                    outputs[i] = _stdout(proc).read()
        time.sleep(1.0)
    network = [
        {
            "rounds": [json.loads(line) for line in (out or "").splitlines() if '"round"' in line],
            "peak_mb": peak,
            "returncode": proc.returncode,
        }
        for (kind, proc), out, peak in zip(procs, outputs, peaks, strict=True)
        if kind == "network"
    ]
    trainers = [
        {**trainer_record(run_dir), "peak_mb": peak, "returncode": proc.returncode}
        for run_dir, ((_, proc), peak) in zip(
            trainer_dirs,
            [(p, k) for p, k in zip(procs, peaks, strict=True) if p[0] == "trainer"],
            strict=True,
        )
    ]
    return {
        "settings": asdict(s),
        "network": network,
        "trainers": trainers,
        "summary": summarize_real(network, trainers, s.warmup),
    }


def trainer_record(run_dir: Path) -> dict:
    """What a trainer's ledger says it received, refused and trained on."""
    ledger = Ledger(f"sqlite:///{run_dir / 'ledger.sqlite'}")
    try:
        with ledger.reader() as session:
            rows = session.query(GroupRow.direction, GroupRow.status, GroupRow.reason).all()
            uses = session.query(GroupUseRow).count()
    finally:
        ledger.close()
    received = [r for r in rows if r.direction == "received"]
    rejected: dict[str, int] = {}
    for r in received:
        if r.status == "rejected":
            rejected[r.reason] = rejected.get(r.reason, 0) + 1
    return {
        "sent": sum(r.direction == "sent" for r in rows),
        "accepted": sum(r.status == "accepted" for r in received),
        "rejected": rejected,
        "group_uses": uses,
    }


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def summarize_real(network: list[dict], trainers: list[dict], warmup: int) -> dict:
    """Per network-only node and measured round: means; delivery over every process."""
    rows = [r for node in network for r in node["rounds"] if r["round"] >= warmup]
    boot = [r for r in (network[0]["rounds"] if network else []) if r["round"] >= warmup]
    keys = ("bytes_in", "bytes_out", "cpu_s", "verified", "cheap_checked", "ledger_rows", "peers")
    per_node = {k: sum(r[k] for r in rows) / len(rows) if rows else 0.0 for k in keys}
    every = [r for node in network for r in node["rounds"]]
    pulls = sum(r["extra"].get("pulls", 0) for r in every)
    failed = sum(r["extra"].get("pulls_failed", 0) for r in every)
    from_holders = sum(r["extra"].get("pulled_from_holders", 0) for r in every)
    with_holders = sum(r["extra"].get("pulls_with_holders", 0) for r in every)
    return {
        "per_node": per_node,
        "network_pulls": pulls,
        "network_pulls_failed": failed,
        "network_pulled_from_holders": from_holders,  # served by a peer other than the sender
        "holder_share": from_holders / (pulls - failed) if pulls > failed else 0.0,
        "network_pulls_with_holders": with_holders,  # a holder besides the sender was known
        "network_peers_max": max((r["peers"] for r in rows), default=0),
        "bootstrap_peers_mean": _mean([r["peers"] for r in boot]),
        "bootstrap_bytes_out_mean": _mean([r["bytes_out"] for r in boot]),
        "bootstrap_cpu_s_mean": _mean([r["cpu_s"] for r in boot]),
        "network_verified": sum(r["verified"] for r in every),
        "network_accepted": sum(r["accepted"] for r in every),
        "network_rejected": sum(r["rejected"] for r in every),
        "network_peak_mb": max((n["peak_mb"] for n in network), default=0.0),
        "network_failed_processes": sum(n["returncode"] != 0 for n in network),
        "trainer_accepted": sum(t["accepted"] for t in trainers),
        "trainer_rejected": sum(sum(t["rejected"].values()) for t in trainers),
        "trainer_group_uses": sum(t["group_uses"] for t in trainers),
        "trainer_peak_mb": max((t["peak_mb"] for t in trainers), default=0.0),
        "trainer_failed_processes": sum(t["returncode"] != 0 for t in trainers),
    }
