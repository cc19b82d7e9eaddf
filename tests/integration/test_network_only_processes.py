"""Network-only nodes as separate processes over libp2p on 127.0.0.1: all groups delivered and
verified, under 100 MB each."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def start(args: list[str]) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(
        [sys.executable, "-m", "lab.network_node", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def start_together(common: list[str], count: int, start_file: Path) -> list[subprocess.Popen]:
    """`count` nodes, the first the others' bootstrap, their round 0 at one moment once every
    one has joined (the readiness barrier `--start-file`), not after a fixed allowance."""
    barrier = [*common, "--start-file", str(start_file)]
    first = start(barrier)
    hello = json.loads(first.stdout.readline())
    others = [start([*barrier, "--bootstrap", hello["addrs"][0]]) for _ in range(count - 1)]
    for proc in others:  # a node with a bootstrap says hello once it has joined
        line = proc.stdout.readline()
        assert line, proc.stderr.read()[-2000:]
    ready = start_file.with_suffix(".tmp")
    ready.write_text(str(time.time() + 0.5))
    ready.replace(start_file)  # whole, never half-written
    return [first, *others]


def rounds_of(proc: subprocess.Popen) -> list[dict]:
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err[-2000:]
    records = [json.loads(line) for line in out.splitlines()]
    return [r for r in records if "round" in r]


def test_three_processes_deliver_and_verify_every_group(tmp_path):
    # gossip: every group to every process
    common = ["--exchange", "gossip", "--rounds", "3", "--period", "2", "--groups", "6"]
    results = [rounds_of(p) for p in start_together(common, 3, tmp_path / "start")]
    for rounds in results:
        assert len(rounds) == 3
        # groups of rounds 0-1 of both peers have arrived by the end of round 2
        assert sum(r["accepted"] for r in rounds) >= 2 * 6 * 2
        assert all(r["rejected"] == 0 for r in rounds)
        assert max(r["peak_mb"] for r in rounds) < 100
        # two peers' groups of at least two rounds arrived on the wire (a round's window may
        # catch less of it on a busy machine: the total is what counts)
        assert sum(r["bytes_in"] for r in rounds) > 2 * 2 * 6 * 7_000
