"""An observer process watching a trainer process over libp2p on 127.0.0.1, both started with
`swarm-node join` as an operator would: the observer records what the trainer sent and its
delta manifests, serves its metrics, and stays small (it loads no model).

Every process started here ends by itself (the trainer's rounds; the observer on SIGTERM,
killed in `finally` if it outlives its time).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from swarm.ledger import DeltaRow, GroupRow, Ledger
from tests.waiting import wait_for, wait_node_info

ROOT = Path(__file__).resolve().parents[2]
PROC = Path("/proc")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _join(*args: str, log: Path) -> subprocess.Popen:
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    with log.open("w") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "swarm.cli", "join", "--display", "lines", *args],
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONPATH": path},
        )


def _peak_rss_mb(pid: int) -> float:
    """The process's peak resident memory so far (VmHWM), in MB; 0 once it has exited (an
    exited process that is not reaped yet has a status without memory lines)."""
    try:
        lines = (PROC / str(pid) / "status").read_text().splitlines()
    except FileNotFoundError:
        return 0.0
    for line in lines:
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _rows(run_dir: Path, table):
    path = run_dir / "ledger.sqlite"
    if not path.exists():
        return []
    ledger = Ledger(f"sqlite:///{path}", create=False)
    try:
        with ledger.reader() as s:
            return s.query(table).all()
    finally:
        ledger.close()


def _scrape(port: int) -> dict[str, float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    return {
        s.name + json.dumps(s.labels, sort_keys=True) * bool(s.labels): s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
    }


@pytest.mark.skipif(not PROC.exists(), reason="reads peak memory from /proc")
@pytest.mark.timeout(600)
def test_an_observer_process_records_a_trainer_process(tmp_path, tiny_model_path):
    obs_dir, trainer_dir = tmp_path / "observer", tmp_path / "trainer"
    obs_port = _free_port()
    obs_dir.mkdir()
    (obs_dir / "config.toml").write_text(
        '[node]\nname = "watcher"\nrole = "observer"\nrun_dir = "."\nobserve_every_s = 0.5\n'
        '[p2p]\nlisten = "/ip4/127.0.0.1/tcp/0"\nexchange = "gossip"\n'
    )  # the gossip exchange, explicitly (an observer of a pull swarm: test_observer_pull.py)
    observer = trainer = None
    peaks = {}
    try:
        observer = _join(
            "--config",
            str(obs_dir / "config.toml"),
            "--metrics",
            f"127.0.0.1:{obs_port}",
            "--log-format",
            "json",
            log=tmp_path / "observer.out",
        )
        info = wait_node_info(obs_dir, 120, "the observer's node.json")
        trainer = _join(
            "--run-dir",
            str(trainer_dir),
            "--rounds",
            "3",
            "--bootstrap",
            info["addrs"][0],
            "--set",
            'policy.device="cpu"',
            "--set",
            "generation.questions_per_round=4",
            "--set",
            "generation.completions_per_question=4",
            "--set",
            "tasks.eval_size=4",
            "--set",
            "sync.publish_deltas=true",
            "--set",
            'p2p.exchange="gossip"',
            log=tmp_path / "trainer.out",
        )
        while trainer.poll() is None:
            now = {"observer": _peak_rss_mb(observer.pid), "trainer": _peak_rss_mb(trainer.pid)}
            peaks = {k: max(v, peaks.get(k, 0.0)) for k, v in now.items()}
            time.sleep(0.5)
        assert trainer.returncode == 0, (tmp_path / "trainer.out").read_text()[-3000:]
        sent = {r.content_hash for r in _rows(trainer_dir, GroupRow) if r.direction == "sent"}
        published = {
            (r.kind, r.from_version, r.to_version)
            for r in _rows(trainer_dir, DeltaRow)
            if r.status == "published"
        }
        assert len(sent) == 3 * 4 and len(published) == 3

        def recorded():
            accepted = {r.content_hash for r in _rows(obs_dir, GroupRow) if r.status == "accepted"}
            return accepted if len(accepted) >= len(sent) - 4 else None  # round 0 may race the mesh

        accepted = wait_for(recorded, 60, "the observer to record the trainer's groups")
        metrics = _scrape(obs_port)
        peaks["observer"] = max(peaks["observer"], _peak_rss_mb(observer.pid))
        observer.send_signal(signal.SIGTERM)
        assert observer.wait(timeout=120) == 0, (tmp_path / "observer.out").read_text()[-3000:]
    finally:
        for process in (trainer, observer):
            if process is not None and process.poll() is None:
                process.kill()
                process.wait()

    assert accepted <= sent
    announced = {
        (r.kind, r.from_version, r.to_version)
        for r in _rows(obs_dir, DeltaRow)
        if r.status == "announced"
    }
    assert announced and announced <= published
    assert not [r for r in _rows(obs_dir, GroupRow) if r.status == "rejected"]
    # its metrics, scraped from the running process
    assert metrics["swarm_groups_accepted_total"] == len(accepted)
    assert metrics["swarm_received_bytes_total" + json.dumps({"channel": "gossip"})] > 0
    assert metrics["swarm_delta_manifests_total"] == len(announced)
    assert (
        metrics[
            'swarm_node_info{"model": "", "name": "watcher", "peer_id": "'
            + info["peer_id"]
            + '", "role": "observer"}'
        ]
        == 1
    )
    # its log: JSON lines, no model, its passes; the terminal shows no library noise
    log = [json.loads(x) for x in (obs_dir / "node.log").read_text().splitlines()]
    assert any("model none (observer)" in x["message"] for x in log)
    assert any(x["message"].startswith("pass ") for x in log)
    observed, trained = peaks["observer"], peaks["trainer"]
    print(f"peak resident memory: observer {observed:.0f} MB, trainer {trained:.0f} MB")
    assert peaks["observer"] < 0.8 * peaks["trainer"] and peaks["observer"] < 1024
