"""A node shows its own model as peers see it (`name@hash`): in `join`'s start line, in
`status` and in `peers`, together with where it was loaded from."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest


def _cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "swarm.cli", *args], capture_output=True, text=True, timeout=timeout
    )


@pytest.fixture(scope="module")
def joined(tmp_path_factory, tiny_model_path) -> tuple[Path, str, str]:
    """A node that ran one round from a local model folder under a chosen name: its run
    folder, the model folder and what `join` printed."""
    run_dir = tmp_path_factory.mktemp("identity") / "node"
    result = _cli(
        "join",
        "--run-dir",
        str(run_dir),
        "--rounds",
        "1",
        "--model",
        str(tiny_model_path),
        "--display",
        "lines",
        "--listen",
        "/ip4/127.0.0.1/tcp/0",
        *("--set", "policy.model_name=tiny-math", "--set", "policy.device=cpu"),
        *("--set", "generation.questions_per_round=2", "--set", "generation.max_new_tokens=8"),
        *("--set", "generation.completions_per_question=2", "--set", "tasks.eval_size=2"),
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    return run_dir, str(tiny_model_path), result.stdout


def _sent_model(run_dir: Path) -> str:
    """The model named in the groups this node sent: what its peers see."""
    with sqlite3.connect(run_dir / "ledger.sqlite") as db:
        models = {m for (m,) in db.execute("SELECT model FROM rollout_groups WHERE status='sent'")}
    assert len(models) == 1, models
    return models.pop()


def test_the_start_line_shows_the_identity_peers_see(joined):
    run_dir, folder, output = joined
    identity = _sent_model(run_dir)
    assert identity.startswith("tiny-math@") and len(identity.split("@")[1]) == 12
    start = output.splitlines()[0]
    assert f" model {identity} (from {folder}) on cpu" in start, start


def test_status_shows_the_identity(joined):
    run_dir, folder, _ = joined
    identity = _sent_model(run_dir)
    data = json.loads(_cli("status", "--run-dir", str(run_dir), "--json").stdout)
    assert data["model_identity"] == identity and data["model"] == folder
    table = _cli("status", "--run-dir", str(run_dir))
    assert table.returncode == 0, table.stderr
    header = " ".join(table.stdout.split("· last round")[0].split())
    assert header.endswith(f"model {identity} (from {folder})"), table.stdout


def test_peers_shows_the_identity(joined):
    run_dir, folder, _ = joined
    identity = _sent_model(run_dir)
    result = _cli("peers", "--run-dir", str(run_dir))
    assert result.returncode == 0, result.stderr
    header = " ".join(result.stdout.split("· 2 groups in ledger")[0].split())
    assert header == f"node node · model {identity} (from {folder})", result.stdout
    data = json.loads(_cli("peers", "--run-dir", str(run_dir), "--json").stdout)
    assert data["model_identity"] == identity


def test_a_ledger_without_a_recorded_identity_says_when_it_will_have_one(joined, tmp_path):
    run_dir, folder, _ = joined
    copy = tmp_path / "ledger.sqlite"
    with sqlite3.connect(run_dir / "ledger.sqlite") as db, sqlite3.connect(copy) as out:
        db.backup(out)
    with sqlite3.connect(copy) as db:  # as a node of an earlier version left it
        db.execute("DELETE FROM meta WHERE key = 'model_identity'")
    result = _cli("status", "--ledger", str(copy))
    header = " ".join(result.stdout.split("· last round")[0].split())
    assert header.endswith(f"model {folder} (its name@hash is recorded when the node next starts)")
