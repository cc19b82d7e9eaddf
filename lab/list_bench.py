"""What a peer whose list offers nothing, or whose groups are other bytes, costs a pull node:
real processes on 127.0.0.1 (`scripts/bench_lists.py`, `tests/integration/test_list_once.py`).

A network-only pull node (`lab.network_node`: paced rounds, 8 groups made and up to
10 pulled a round, no other peer) and one attacker of `lab.unresponsive_peer`:

- `old-lists`: a peer serving 256 signed announcements of policy version 0 while the node is
  at version `version` (5: with `max_version_lag` 1 it pulls none of them). Measured: how
  often the node fetched that list (as the attacker served it), how many announcements it
  checked, how many lists it took unchanged.
- `wrong-bytes`: a peer announcing 256 groups and serving other bytes of the announced size
  under each one's key. Measured: the seconds from the attacker's start (it has fetched the
  node's list and view, so the node has heard of it) to the end of the node's round that
  banned it.

`run` returns a plain dict of the figures (JSON), with the setting it ran.
"""

from __future__ import annotations

import json
import math
import statistics
import threading
import time
from collections.abc import Callable

from lab.processes import spawn

MODES = ("old-lists", "wrong-bytes")
COUNTERS = ("lists_asked", "lists_refreshed", "lists_unchanged", "cheap_checked", "pulls")


class Node:
    """The network-only pull node; its round records with their arrival times."""

    def __init__(self, seconds: float, period: float, per_peer_cap: int, version: int):
        rounds = math.ceil((seconds + 60) / period)  # it ends by itself after these
        args = ["--exchange", "pull", "--rounds", str(rounds), "--period", str(period)]
        args += ["--groups", "8", "--shared", "4", "--linger", "0"]
        args += ["--per-peer-cap", str(per_peer_cap), "--version", str(version)]
        self.proc = spawn("lab.network_node", args)
        assert self.proc.stdout is not None
        self.addr: str = json.loads(self.proc.stdout.readline())["addrs"][0]
        self.rounds: list[tuple[float, dict]] = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            record = json.loads(line)
            if "round" in record:
                self.rounds.append((time.time(), record))

    def wait(self, done: Callable[[], bool], timeout: float) -> bool:
        deadline = time.time() + timeout
        while not done() and time.time() < deadline and self.proc.poll() is None:
            time.sleep(0.05)
        return done()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
        self.proc.wait(timeout=60)
        self.reader.join(timeout=5)


class Attacker:
    """`lab.unresponsive_peer` in one mode, against the node."""

    def __init__(self, mode: str, node: str, lifetime: float):
        args = ["--mode", mode, "--bootstrap", node, "--groups", "256"]
        self.proc = spawn("lab.unresponsive_peer", [*args, "--max-lifetime", str(lifetime)])
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        assert line, f"the {mode} attacker did not start"
        self.ready = time.time()
        self.peer: str = json.loads(line)["peers"][0]

    def end(self) -> int:
        """Stop it; the list fetches it served since it was ready."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.close()
        served = -1
        for line in self.proc.stdout:
            record = json.loads(line)
            if record.get("event") == "served":
                served = record["lists"]
        self.proc.wait(timeout=60)
        return served


def run(mode: str, seconds: float, period: float, per_peer_cap: int = 2, version: int = 0) -> dict:
    """One run: the node alone for 3 rounds, then `seconds` with the attacker (a
    `wrong-bytes` run ends once the attacker is banned)."""
    assert mode in MODES, mode
    node = Node(seconds, period, per_peer_cap, version)
    attacker = None
    try:
        assert node.wait(lambda: len(node.rounds) >= 3, 120), "the node did not start its rounds"
        attacker = Attacker(mode, node.addr, seconds + 60)
        banned = lambda: any(r["extra"].get("banned") for _, r in node.rounds)  # noqa: E731
        node.wait(banned if mode == "wrong-bytes" else lambda: False, seconds)
        ended = time.time()
        served = attacker.end()
    finally:
        if attacker is not None and attacker.proc.poll() is None:
            attacker.proc.kill()
            attacker.proc.wait()
        node.stop()
    return summary(mode, node.rounds, attacker.ready, ended, served) | {
        "period_s": period,
        "per_peer_cap": per_peer_cap,
        "version": version,
    }


def summary(
    mode: str, rounds: list[tuple[float, dict]], ready: float, ended: float, served: int
) -> dict:
    """The figures of a run, over the node's rounds that ended after the attacker was ready."""
    after = [r for t, r in rounds if ready < t <= ended]
    totals = {k: sum(r["extra"].get(k, 0) for r in after) for k in COUNTERS}
    bans = [t for t, r in rounds if r["extra"].get("banned")]
    return {
        "mode": mode,
        "seconds": round(ended - ready, 1),
        "rounds": len(after),
        "lists_served": served,
        "round_median_s": round(statistics.median(r["wall_s"] for r in after), 3)
        if after
        else None,
        "banned_after_s": round(bans[0] - ready, 1) if bans else None,
        "rejected": sum(r["rejected"] for r in after),
        **totals,
    }
