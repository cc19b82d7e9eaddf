"""Churn in a real swarm on this machine: network-only pull node processes over libp2p on
127.0.0.1, one leaving and one joining every `every_s` seconds, against the same swarm
without churn (`scripts/bench_churn.py`).

Every process is `python -m lab.network_node` (pull, paced rounds of `period_s`; one
JSON line a round: its round's own time `wall_s`, what it pulled and verified). A leaver
leaves as a peer whose machine sleeps or loses its network does, its TCP connections left
open (SIGSTOP; every other one is killed outright, its sockets closed by the kernel); a
newcomer joins through a random process still there. Node 0, the first address, stays.
Rounds of a process's first `warmup` rounds are left out. Every process started here is
stopped here, by its PID.

Besides the round times, each run sums where a slow round's time went (the exchange's own
counters: taking lists, `lists_s`, and pulling groups, `pulls_s`, over the rounds above
1 s) and the fetches a round stopped waiting on (`unwaited`; `late`: group fetches of those
taken when they ended), and `goal` says whether the churn run met its goal against the run
without churn (p95 within `P95_GOAL`x, no round above `MAX_GOAL_S`, pulls delivered at
least `DELIVERED_GOAL`).
"""

from __future__ import annotations

import json
import os
import random
import signal
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
P95_GOAL = 1.5  # the churn run's p95 round within this many times the run without churn
MAX_GOAL_S = 2.0  # no round of the churn run above this
DELIVERED_GOAL = 0.995  # pulls delivered at least


@dataclass(frozen=True)
class ChurnSettings:
    processes: int = 12
    duration_s: float = 300.0
    every_s: float = 10.0  # one leaves and one joins this often (0: no churn)
    period_s: float = 5.0  # a process's round period
    groups: int = 16
    shared: int = 8
    warmup: int = 2
    nice: int = 5
    seed: int = 0


class Member:
    """One network-only node process and the rounds it reported."""

    def __init__(self, s: ChurnSettings, index: int, bootstrap: str | None, log: Path):
        rounds = int(s.duration_s / s.period_s) + 10
        args = ["-m", "lab.network_node", "--exchange", "pull", "--rounds", str(rounds)]
        args += ["--period", str(s.period_s), "--groups", str(s.groups), "--shared", str(s.shared)]
        args += ["--linger", "0"] + (["--bootstrap", bootstrap] if bootstrap else [])
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        prefix = ["nice", "-n", str(s.nice)] if s.nice else []
        self.index = index
        self.proc = subprocess.Popen(
            [*prefix, sys.executable, *args],
            stdout=subprocess.PIPE,
            stderr=log.open("w"),
            text=True,
            env=env,
            cwd=ROOT,
        )
        assert self.proc.stdout is not None
        hello = json.loads(self.proc.stdout.readline())
        self.addr: str = hello["addrs"][0]
        self.rounds: list[dict] = []
        self.left: str | None = None  # how it left: "stopped" or "killed"
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            try:
                self.rounds.append(json.loads(line))
            except ValueError:
                continue

    def leave(self, stop: bool) -> None:
        self.left = "stopped" if stop else "killed"
        self.proc.send_signal(signal.SIGSTOP if stop else signal.SIGKILL)

    def end(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.kill()
        self.proc.wait(timeout=60)
        self.reader.join(timeout=5)


def run_churn(s: ChurnSettings, out_dir: Path, progress=lambda m: None) -> dict:
    out_dir.mkdir(parents=True, exist_ok=True)
    rng = random.Random(s.seed)
    members = [Member(s, 0, None, out_dir / "node-0.log")]
    for i in range(1, s.processes):
        boot = rng.choice([m.addr for m in members])
        members.append(Member(s, i, boot, out_dir / f"node-{i}.log"))
    progress(f"{len(members)} processes up")
    began = time.monotonic()
    left = joined = 0
    try:
        while time.monotonic() - began < s.duration_s:
            time.sleep(s.every_s or 1.0)
            if not s.every_s:
                continue
            live = [m for m in members if m.left is None and m.index != 0]
            leaver = rng.choice(live)
            leaver.leave(stop=left % 2 == 0)
            left += 1
            boot = rng.choice([m.addr for m in members if m.left is None])
            members.append(Member(s, len(members), boot, out_dir / f"node-{len(members)}.log"))
            joined += 1
            progress(f"{time.monotonic() - began:.0f} s: {left} left, {joined} joined")
    finally:
        for m in members:
            m.end()
    return {"settings": asdict(s), "left": left, "joined": joined, **summarize(s, members)}


def summarize(s: ChurnSettings, members: list[Member]) -> dict:
    rows = [r for m in members for r in [x for x in m.rounds if "wall_s" in x][s.warmup :]]
    walls = sorted(r["wall_s"] for r in rows)
    pulls = sum(r["extra"].get("pulls", 0) for r in rows)
    failed = sum(r["extra"].get("pulls_failed", 0) for r in rows)

    def pct(q: float) -> float:
        return walls[min(len(walls) - 1, int(q * len(walls)))] if walls else 0.0

    return {
        "rounds": len(rows),
        "round_s": {
            "median": statistics.median(walls) if walls else 0.0,
            "mean": statistics.fmean(walls) if walls else 0.0,
            "p95": pct(0.95),
            "p99": pct(0.99),
            "max": walls[-1] if walls else 0.0,
            "over_1s": sum(w > 1.0 for w in walls),
            "over_2s": sum(w > 2.0 for w in walls),
        },
        "pulls": pulls,
        "pulls_failed": failed,
        "delivered": 1 - failed / pulls if pulls else 1.0,
        "verified_per_round": statistics.fmean(r["verified"] for r in rows) if rows else 0.0,
        "rejected": sum(r["rejected"] for r in rows),
        "bytes_in_per_round": statistics.fmean(r["bytes_in"] for r in rows) if rows else 0.0,
        "lists_failed": sum(r["extra"].get("lists_failed", 0) for r in rows),
        "lists_asked": sum(r["extra"].get("lists_asked", 0) for r in rows),
        "unwaited": sum(r["extra"].get("unwaited", 0) for r in rows),
        "late": sum(r["extra"].get("late", 0) for r in rows),
        "stalled": sum(r["extra"].get("stalled", 0) for r in rows),
        "slow_rounds": slow_rounds(rows),
    }


def slow_rounds(rows: list[dict]) -> dict:
    """Where the time of the rounds above 1 s went: taking lists, pulling, the rest (making
    and verifying groups, choosing), summed, in seconds."""
    slow = [r for r in rows if r["wall_s"] > 1.0]
    lists = sum(r["extra"].get("lists_s", 0.0) for r in slow)
    pulls = sum(r["extra"].get("pulls_s", 0.0) for r in slow)
    total = sum(r["wall_s"] for r in slow)
    return {
        "rounds": len(slow),
        "lists_s": lists,
        "pulls_s": pulls,
        "rest_s": total - lists - pulls,
    }


def goal(without: dict, churn: dict) -> dict:
    """Whether the churn run met its goal against the run without churn."""
    ratio = churn["round_s"]["p95"] / without["round_s"]["p95"] if without["rounds"] else 0.0
    met = {
        "p95_ratio": ratio <= P95_GOAL,
        "max_s": churn["round_s"]["max"] <= MAX_GOAL_S,
        "delivered": churn["delivered"] >= DELIVERED_GOAL,
    }
    return {"p95_ratio": ratio, "met": met, "all": all(met.values())}
