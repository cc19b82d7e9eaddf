"""kill -9 at random moments of a trainer and its follower: scripts/kill_loop.py, 50 kills.

The script kills one of two real node processes (a trainer publishing deltas, a generator
following it over libp2p on 127.0.0.1) while it fetches a delta, writes its ledger or runs
a round, restarts it, and checks each time: `PRAGMA integrity_check` clean, every committed
row still there unchanged, nothing recorded twice, `doctor` clean, and a new round
committed. Its JSON says what it found; this test reads it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow  # ~130 s on a busy 2-core machine
@pytest.mark.timeout(900)
def test_fifty_kills_lose_nothing_committed_and_every_restart_resumes(tmp_path, tiny_model_path):
    out = tmp_path / "kill_loop.json"
    proc = subprocess.run(
        [
            sys.executable,
            "scripts/kill_loop.py",
            "--kills",
            "50",
            "--json",
            str(out),
            "--work",
            str(tmp_path / "work"),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=850,
    )
    print(proc.stdout[-3000:])
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads(out.read_text())
    summary = result["summary"]
    assert summary["ok"] and summary["kills"] == len(result["kills"]) == 50
    assert summary["integrity_ok"] == summary["resumed"] == 50
    assert summary["rows_lost"] == summary["rows_duplicated"] == summary["doctor_problems"] == 0
    assert all(k["exit"] == -9 and k["rows_at_death"] > 0 for k in result["kills"])
    # Kills landed in each phase aimed at, on both nodes.
    assert min(summary["by_phase"][p] for p in ("delta fetch", "ledger write", "round")) >= 5
    assert min(summary["by_node"].values()) >= 10
    assert all(f["exit"] == 0 and f["integrity"] == "ok" for f in result["final"].values())
