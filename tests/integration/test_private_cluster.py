"""A private cluster from `swarm-node cluster init`, as separate processes on 127.0.0.1.

Two members (`swarm-node join --config member-i/config.toml`) exchange rollouts. Two
outsiders try to join and publish validly signed groups the whole time: one with a wrong
swarm key, one with the right key but a peer ID not on the allow-list. Neither may ever
get a message recorded by a member, and neither may hang (bounded dials, prompt exit).
Every process ends by itself (bounded rounds and durations; killed in `finally` otherwise).
"""

from __future__ import annotations

import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from swarm.core.errors import LedgerError
from swarm.ledger import GroupRow, Ledger, RoundRow
from swarm.p2p.swarm_key import read_key_file
from tests.waiting import wait_for

OUTSIDER = Path(__file__).with_name("outsider_peer.py")
ENV = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"}
FAST = [
    "--set",
    "generation.questions_per_round=4",
    "--set",
    "generation.completions_per_question=4",
    "--set",
    "generation.max_new_tokens=4",
    "--set",
    "tasks.eval_size=4",
    "--set",
    "tasks.eval_every=50",
    "--set",
    'policy.device="cpu"',
    "--set",  # every group to every member (with the pull exchange, the default, a member
    'p2p.exchange="gossip"',  # that trains on no peer's groups pulls none)
]


def _free_base_port(count: int) -> int:
    """A base port whose `count` successors are all free on 127.0.0.1 right now."""
    rng = random.Random()
    for _ in range(200):
        base = rng.randrange(20000, 60000 - count)
        sockets = []
        try:
            for port in range(base, base + count):
                s = socket.socket()
                sockets.append(s)
                s.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
        finally:
            for s in sockets:
                s.close()
    raise AssertionError("no free ports")


def _rows(run_dir: Path, model=GroupRow) -> list:
    ledger = Ledger(f"sqlite:///{run_dir / 'ledger.sqlite'}", create=False)
    try:
        with ledger.reader() as s:
            return s.query(model).all()
    except LedgerError:
        return []
    finally:
        ledger.close()


@pytest.mark.slow  # ~35 s on 2 cores: a cluster of processes and an outsider
@pytest.mark.timeout(300)
def test_members_share_and_outsiders_are_refused(tmp_path, tiny_model_path):
    out = tmp_path / "cluster"
    init = subprocess.run(
        [
            sys.executable,
            "-m",
            "swarm.cli",
            "cluster",
            "init",
            "--nodes",
            "2",
            "--out",
            str(out),
            "--base-port",
            str(_free_base_port(2)),
            "--swarm-id",
            "lab",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert init.returncode == 0, init.stderr
    manifest = json.loads((out / "cluster.json").read_text())
    psk = read_key_file(out / "swarm.key").hex  # the libp2p pnet key-file format
    assert (out / "swarm.key").read_text().startswith("/key/swarm/psk/1.0.0/\n/base16/\n")
    assert len(psk) == 64 and (out / "swarm.key").stat().st_mode & 0o777 == 0o600
    assert (out / "allow_list.txt").read_text().split() == [
        m["peer_id"] for m in manifest["members"]
    ]
    members, outsiders = [], []
    try:
        for m in manifest["members"]:
            log = open(tmp_path / f"{m['name']}.log", "w")  # noqa: SIM115 - the child owns it
            members.append(
                subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "swarm.cli",
                        "join",
                        "--config",
                        str(out / m["config"]),
                        "--rounds",
                        "400",
                        "--display",
                        "lines",
                        *FAST,
                    ],
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=ENV,
                )
            )
        run_dirs = [out / m["name"] for m in manifest["members"]]
        addrs = [m["addr"] for m in manifest["members"]]
        wait_for(
            lambda: all((d / "node.json").exists() for d in run_dirs), 120, "members to listen"
        )
        started = time.monotonic()
        for psk_arg in ("cd" * 32, psk):  # a wrong key; the right key but a peer ID nobody listed
            cmd = [
                sys.executable,
                str(OUTSIDER),
                "--swarm-id",
                "lab",
                "--duration",
                "12",
                "--psk",
                psk_arg,
            ]
            for addr in addrs:
                cmd += ["--bootstrap", addr]
            outsiders.append(
                subprocess.Popen(
                    cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV
                )
            )
        reports = []
        for proc in outsiders:
            stdout, stderr = proc.communicate(timeout=90)
            assert proc.returncode == 0, stderr[-2000:]
            reports.append(json.loads(stdout.strip().splitlines()[-1]))
        outsider_wall = time.monotonic() - started
        # the members exchange rollouts: each accepted groups from the other
        for i, run_dir in enumerate(run_dirs):
            other = manifest["members"][1 - i]["peer_id"]
            wait_for(
                lambda d=run_dir, o=other: [
                    r for r in _rows(d) if r.status == "accepted" and r.sender == o
                ],
                60,
                f"member-{i} to accept the other member's groups",
            )
        for proc in members:
            proc.send_signal(signal.SIGINT)  # clean stop after the current round
        for proc in members:
            assert proc.wait(timeout=120) == 0
    finally:
        for proc in members + outsiders:
            if proc.poll() is None:
                proc.kill()
    wrong_key, unlisted = reports
    assert wrong_key["published"] > 10 and unlisted["published"] > 10
    assert wrong_key["most_peers"] == 0  # the handshake itself fails without the key
    assert outsider_wall < 60 and max(r["close_s"] for r in reports) < 15  # no 40 s hang anywhere
    strangers = {wrong_key["peer_id"], unlisted["peer_id"]}
    for run_dir in run_dirs:
        rows = _rows(run_dir)
        assert not [r for r in rows if r.sender in strangers or r.source in strangers], (
            "an outsider's message got in"
        )
        assert {r.sender for r in rows if r.direction == "received"} <= {
            m["peer_id"] for m in manifest["members"]
        }
        assert len(_rows(run_dir, RoundRow)) >= 2
    print(
        f"outsiders refused; wrong key saw {wrong_key['most_peers']} peers, unlisted saw at most "
        f"{unlisted['most_peers']} (closed at once); outsiders done in {outsider_wall:.1f}s"
    )
